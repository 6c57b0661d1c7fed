// Softmax and log-softmax along one axis (ONNX opset-13 semantics).
//
// The caller views the tensor as [outer, dim, inner]: `dim` is the size of the
// softmax axis, `outer` the product of the dims before it and `inner` the product
// of the dims after it. Both kernels may run in place (y == x, dx == dy).
#pragma once

#include <cstdint>

namespace ortmodule {

// x: [outer, dim, inner] -> y: [outer, dim, inner]
// log == false: y = exp(x - max) / sum(exp(x - max))
// log == true:  y = x - max - log(sum(exp(x - max)))
template <typename T>
void softmax_forward(int64_t outer, int64_t dim, int64_t inner, const T* x, T* y, bool log);

// dy, y: [outer, dim, inner] -> dx: [outer, dim, inner]; y is the forward output.
// log == false: dx = y * (dy - sum(dy * y))
// log == true:  dx = dy - exp(y) * sum(dy)
template <typename T>
void softmax_backward(int64_t outer, int64_t dim, int64_t inner, const T* dy, const T* y, T* dx,
                      bool log);

}  // namespace ortmodule
