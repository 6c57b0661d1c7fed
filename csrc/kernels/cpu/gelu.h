// Gelu forward and backward over contiguous float32 tensors (exact erf form and tanh
// approximation), through the active ISA's vector kernels or the scalar baseline loop.
#pragma once

#include <cstdint>

namespace ortmodule {

// x: [n] -> y: [n]; y may alias x.
void gelu_forward_f32(int64_t n, const float* x, float* y, bool tanh);
// dy, x: [n] -> dx: [n]; dx may alias dy.
void gelu_backward_f32(int64_t n, const float* dy, const float* x, float* dx, bool tanh);

}  // namespace ortmodule
