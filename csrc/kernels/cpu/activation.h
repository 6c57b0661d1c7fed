// Activations over contiguous float32 tensors through the active ISA's vector kernels:
// Gelu forward and backward (exact erf form and tanh approximation, with the scalar
// baseline loop here), and Exp / Sigmoid / Tanh (whose baseline loops are the ops' own).
#pragma once

#include <cstdint>

#include "kernels/cpu/vec_kernels.h"

namespace ortmodule {

// x: [n] -> y: [n]; y may alias x.
void gelu_forward_f32(int64_t n, const float* x, float* y, bool tanh);
// dy, x: [n] -> dx: [n]; dx may alias dy.
void gelu_backward_f32(int64_t n, const float* dy, const float* x, float* dx, bool tanh);

// x: [n] -> y: [n]; y may alias x. Returns false, doing nothing, where the active ISA has
// no vector form (the baseline): the caller then runs its scalar loop.
bool activation_forward_f32(VecActivation op, int64_t n, const float* x, float* y);

}  // namespace ortmodule
