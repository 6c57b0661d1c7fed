// Activations over contiguous float32 tensors through the active ISA's vector kernels:
// Gelu forward and backward (exact erf form and tanh approximation, with the scalar
// baseline loop here), and Exp / Sigmoid / Tanh (whose baseline loops are the ops' own).
#pragma once

#include <cstdint>

#include "kernels/cpu/vec_kernels.h"

namespace ortmodule {

// x: [n] -> y: [n]; y may alias x.
void gelu_forward_f32(int64_t n, const float* x, float* y, bool tanh);
// dy, x: [n] -> dx: [n]; dx may alias dy. y: [n] or null: where given, gelu(x) as well, bit
// for bit gelu_forward_f32's, from the same evaluation of the activation (a backward that
// would otherwise repeat the forward's Gelu for a product's weight gradient); y aliases
// neither x nor dy.
void gelu_backward_f32(int64_t n, const float* dy, const float* x, float* dx, float* y, bool tanh);

// Gelu and its gradient over 16-bit values (bfloat16 bits when bf16, else float16 bits): each
// chunk widened to float32 exactly, the float32 kernel above, each result rounded to nearest
// even once (as eager PyTorch computes a reduced-precision Gelu in float32). y may alias x,
// dx dy; the backward's y as gelu_backward_f32's.
void gelu_forward_low(bool bf16, int64_t n, const uint16_t* x, uint16_t* y, bool tanh);
void gelu_backward_low(bool bf16, int64_t n, const uint16_t* dy, const uint16_t* x, uint16_t* dx,
                       uint16_t* y, bool tanh);

// x: [n] -> y: [n]; y may alias x. Returns false, doing nothing, where the active ISA has
// no vector form (the baseline): the caller then runs its scalar loop.
bool activation_forward_f32(VecActivation op, int64_t n, const float* x, float* y);

}  // namespace ortmodule
