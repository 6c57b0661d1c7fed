// 2-D max/average pooling and global average pooling over contiguous NCHW tensors.
#pragma once

#include <cstdint>

namespace ortmodule {

struct Pool2dParams {
  int64_t N, C, H, W, kH, kW, outH, outW;
  int64_t stride_h, stride_w, pad_top, pad_left, dil_h, dil_w;
  bool count_include_pad;  // AveragePool only
  // AveragePool's count_include_pad divisor counts the taps inside the padded input, whose
  // bottom/right padding these are (ceil_mode windows may run past it).
  int64_t pad_bottom = 0, pad_right = 0;
  // ai.ortmodule AveragePoolTorch (torch's divisor_override): every window's divisor when > 0.
  int64_t divisor_override = 0;
};

// x: [N, C, H, W] -> y: [N, C, outH, outW], indices (nullable): [N, C, outH, outW].
// ONNX MaxPool indices: positions in the flattened input, n*C*H*W + c*H*W + h*W + w.
// Padding cells never win; a window holding no input cell yields -inf and index -1.
template <typename T>
void maxpool2d_forward(const Pool2dParams& p, const T* x, T* y, int64_t* indices);

// dy, indices: [N, C, outH, outW] -> dx: [N, C, H, W]. dx is overwritten; overlapping windows
// accumulate. Index -1 (an empty window) contributes nothing. Every other index must name a
// cell of its own (n, c) plane: returns -1 when all do, otherwise the position in indices of
// the first that does not (its gradient is dropped; the caller reports the error).
template <typename T>
int64_t maxpool2d_backward(const Pool2dParams& p, const T* dy, const int64_t* indices, T* dx);

// x: [N, C, H, W] -> y: [N, C, outH, outW]. ONNX AveragePool (and torch's avg_pool2d): with
// count_include_pad the divisor counts the window's taps inside the padded input (input plus
// the pads; taps past the end padding, from ceil_mode, do not count), otherwise the taps
// inside the input; divisor_override > 0 replaces both.
template <typename T>
void avgpool2d_forward(const Pool2dParams& p, const T* x, T* y);

// dy: [N, C, outH, outW] -> dx: [N, C, H, W] (overwritten).
template <typename T>
void avgpool2d_backward(const Pool2dParams& p, const T* dy, T* dx);

// 3-D pooling over contiguous [N, C, D, H, W] tensors (spatial axes i = 0, 1, 2 = D, H, W).
struct Pool3dParams {
  int64_t N, C;
  int64_t in[3], kernel[3], out[3], stride[3], pad_begin[3], pad_end[3], dilation[3];
  bool count_include_pad;        // AveragePool only
  int64_t divisor_override = 0;  // as Pool2dParams'
};

// x -> y, indices (nullable): [N, C, out...]. Indices as in maxpool2d_forward (row-major
// positions in the flattened input); padding cells never win, an empty window gives -inf, -1.
template <typename T>
void maxpool3d_forward(const Pool3dParams& p, const T* x, T* y, int64_t* indices);

// dy, indices: [N, C, out...] -> dx: [N, C, in...] (overwritten; overlapping windows add up).
// Indices and the return value as maxpool2d_backward's.
template <typename T>
int64_t maxpool3d_backward(const Pool3dParams& p, const T* dy, const int64_t* indices, T* dx);

// ONNX AveragePool: with count_include_pad the divisor counts the window's taps inside the
// padded input (input plus the pads; taps past the end padding, from ceil_mode, do not count),
// otherwise the taps inside the input; divisor_override > 0 replaces both.
template <typename T>
void avgpool3d_forward(const Pool3dParams& p, const T* x, T* y);

// dy: [N, C, out...] -> dx: [N, C, in...] (overwritten).
template <typename T>
void avgpool3d_backward(const Pool3dParams& p, const T* dy, T* dx);

// x: [N, C, S] -> y: [N, C]
template <typename T>
void global_avgpool_forward(int64_t N, int64_t C, int64_t S, const T* x, T* y);

// dy: [N, C] -> dx: [N, C, S] (overwritten)
template <typename T>
void global_avgpool_backward(int64_t N, int64_t C, int64_t S, const T* dy, T* dx);

}  // namespace ortmodule
