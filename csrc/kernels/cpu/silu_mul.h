// SiluMul on the CPU (kernels/math/silu_mul.h): y = silu(g) * u over operands of one shape,
// and its gradients dg, du. float32 takes sigmoid from the instruction set's vector kernel, as
// the Sigmoid op does; float64 and the baseline from math::sigmoid.
#pragma once

#include <cstdint>

namespace ortmodule {

template <typename T>
void silu_mul_forward(int64_t n, const T* g, const T* u, T* y);

// dg and du each nullable (not wanted).
template <typename T>
void silu_mul_backward(int64_t n, const T* dy, const T* g, const T* u, T* dg, T* du);

}  // namespace ortmodule
