// Resize (nearest, linear, cubic; ONNX's and PyTorch's coordinate rules) over contiguous
// [planes, in...] tensors, as separable tap tables (kernels/math/resize.h).
#pragma once

#include "kernels/math/resize.h"

namespace ortmodule {

// x: [planes, in[0], in[1], in[2]] -> y: [planes, out[0], out[1], out[2]]
template <typename T>
void resize_forward(const ResizeGeometry& g, const T* x, T* y);

// dy: [planes, out...] -> dx: [planes, in...]: every input cell gathers the gradients of the
// outputs that read it, with their weights.
template <typename T>
void resize_backward(const ResizeAdjointGeometry& g, const T* dy, T* dx);

}  // namespace ortmodule
