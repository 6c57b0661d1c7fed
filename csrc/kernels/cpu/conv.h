// 2-D convolution over contiguous NCHW tensors (1-D convolution arrives as H = 1) and 3-D
// convolution over NCDHW tensors.
#pragma once

#include <cstdint>

namespace ortmodule {

struct Conv2dParams {
  int64_t N, C, H, W;  // input
  int64_t M;           // output channels
  int64_t kH, kW;      // kernel
  int64_t outH, outW;  // output spatial (caller computes)
  int64_t group;       // C % group == 0, M % group == 0; weight is [M, C/group, kH, kW]
  // pad_bottom / pad_right are implied by outH / outW.
  int64_t stride_h, stride_w, pad_top, pad_left, dil_h, dil_w;
};

// x: [N, C, H, W], w: [M, C/group, kH, kW], bias: [M] or null -> y: [N, M, outH, outW]
template <typename T>
void conv2d_forward(const Conv2dParams& p, const T* x, const T* w, const T* bias, T* y);

// dy: [N, M, outH, outW] -> dx: [N, C, H, W], dw: [M, C/group, kH, kW], dbias: [M].
// Each output is nullable (its work is skipped) and is overwritten, never accumulated into.
template <typename T>
void conv2d_backward(const Conv2dParams& p, const T* x, const T* w, const T* dy, T* dx, T* dw,
                     T* dbias);

// 3-D convolution over contiguous NCDHW tensors. Index 0, 1, 2 of each array is D, H, W.
struct Conv3dParams {
  int64_t N, C, M, group;            // C % group == 0, M % group == 0
  int64_t in[3], kernel[3], out[3];  // out: caller computes (pad_end is implied by it)
  int64_t stride[3], pad_begin[3], dilation[3];
};

// x: [N, C, D, H, W], w: [M, C/group, kD, kH, kW], bias: [M] or null -> y: [N, M, oD, oH, oW]
template <typename T>
void conv3d_forward(const Conv3dParams& p, const T* x, const T* w, const T* bias, T* y);

// dy: [N, M, oD, oH, oW] -> dx, dw, dbias (each nullable and overwritten, as conv2d_backward).
template <typename T>
void conv3d_backward(const Conv3dParams& p, const T* x, const T* w, const T* dy, T* dx, T* dw,
                     T* dbias);

}  // namespace ortmodule
