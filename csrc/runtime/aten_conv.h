// Convolutions run by torch's own convolution (ATen's at::convolution and
// at::convolution_backward: cuDNN on CUDA) on engine memory of any device. The CUDA Conv and
// ConvGrad kernels (backends/cuda/conv.cu) hand the geometries it computes to it; the rest
// stay on their im2col + cuBLAS path. Implemented on the torch side of the build
// (runtime/aten_conv.cpp); this header carries no torch headers, so .cu files include it.
//
// Numerics follow torch's settings for its convolutions, as eager PyTorch's do:
// torch.backends.cudnn.allow_tf32 (TF32 for float32 on GPUs that have it; on by default in
// torch), torch.backends.cudnn.deterministic / torch.use_deterministic_algorithms, and
// torch.backends.cudnn.benchmark (algorithm search per shape).
#pragma once

#include "base/device.h"
#include "ir/dtype.h"
#include "kernels/cpu/conv.h"

namespace ortmodule {

// One convolution: contiguous x [N, C, spatial...], w [M, C/group, kernel...], y and dy
// [N, M, out...], bias and dbias [M]. `p` is the 3-D form of kernels/cpu/conv.h: a 1-D or 2-D
// convolution has leading spatial dims of 1 (kernel, stride and dilation 1, pad 0), and
// `spatial_rank` says how many of the trailing ones are the op's.
struct AtenConv {
  Conv3dParams p;
  int spatial_rank = 2;  // 1, 2 or 3
  Device device;
  DType dtype = DType::Float32;  // Float32, Float64, Float16 or BFloat16
};

// Whether ATen computes exactly this geometry: torch pads both ends of an axis alike, so the
// output extent with pad_begin on both ends must be p.out on every axis (the pad after each
// axis is implied by p.out; a larger or smaller one changes which cells exist). Also false for
// empty tensors (N, C, M or an output extent 0), which the callers handle themselves.
bool aten_conv_fits(const Conv3dParams& p);

// y = conv(x, w) + bias (bias nullable). Throws std::invalid_argument for a geometry that
// does not fit and std::runtime_error with torch's message when torch fails.
void aten_conv_forward(const AtenConv& c, const void* x, const void* w, const void* bias, void* y);

// The gradients of aten_conv_forward for the output gradient dy: dx, dw and dbias, each
// nullable (not computed) and overwritten. x is read only for dw (nullable without it).
void aten_conv_backward(const AtenConv& c, const void* dy, const void* x, const void* w, void* dx,
                        void* dw, void* dbias);

// The transposed convolution of `c`'s pair: y [N, C, in...] = conv_transpose(x [N, M, out...],
// w) + bias (nullable), i.e. aten_conv_backward's dx for dy := x plus the bias per channel,
// in one call of torch's transposed convolution (float16 and bfloat16 on CUDA).
void aten_conv_transpose_forward(const AtenConv& c, const void* x, const void* w, const void* bias,
                                 void* y);

}  // namespace ortmodule
