// Winograd F(2x2, 3x3) convolution for 3x3, stride-1, undilated, ungrouped 2-D convolutions:
// each 2x2 output tile costs 16 multiplies per (input, output) channel pair instead of 36, so
// the GEMM work of the forward, the input gradient and the weight gradient drops 2.25x against
// im2col + GEMM. conv.cpp routes eligible convolutions here (conv2d_winograd_applies), all
// three of them; others never are.
#pragma once

#include "kernels/cpu/conv.h"

namespace ortmodule {

// Whether p is a convolution the Winograd kernels compute (forward, backward to dx through the
// transposed convolution, backward to dw) and one large enough for them to pay.
bool conv2d_winograd_applies(const Conv2dParams& p);

// conv2d_forward's contract, for p with conv2d_winograd_applies(p).
template <typename T>
void conv2d_winograd_forward(const Conv2dParams& p, const T* x, const T* w, const T* bias, T* y);

// dy: [N, M, outH, outW] -> dx: [N, C, H, W] (overwritten), for p with
// conv2d_winograd_applies(p): the forward kernel run on dy with the weights flipped and
// transposed, [C, M, 3, 3], and the padding mirrored (2 - pad).
template <typename T>
void conv2d_winograd_backward_input(const Conv2dParams& p, const T* w, const T* dy, T* dx);

// x: [N, C, H, W], dy: [N, M, outH, outW] -> dw: [M, C, 3, 3] (overwritten), for p with
// conv2d_winograd_applies(p).
template <typename T>
void conv2d_winograd_backward_weight(const Conv2dParams& p, const T* x, const T* dy, T* dw);

}  // namespace ortmodule
