// Softmax and log-softmax along one axis (ONNX opset-13 semantics).
//
// The caller views the tensor as [outer, dim, inner]: `dim` is the size of the
// softmax axis, `outer` the product of the dims before it and `inner` the product
// of the dims after it. Both kernels may run in place (y == x, dx == dy).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

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

// softmax_backward over rows (inner == 1) with dy made row by row: dy_row(o, row) writes row
// o of dy into row, which is then dx's row o, and the row's backward runs in place while it
// is in cache. The bits of writing all of dy into dx and calling
// softmax_backward(outer, dim, 1, dx, y, dx, log), without dy's passes over memory.
template <typename T>
void softmax_backward_rows(int64_t outer, int64_t dim, const T* y, T* dx, bool log,
                           const std::function<void(int64_t, T*)>& dy_row);

}  // namespace ortmodule

namespace ortmodule {

// Attention's scores softmax in one pass over memory: y = softmax(scale * x + mask) along the
// last axis of y's shape, x and mask broadcast to it (numpy rules, right-aligned strides from
// broadcast_strides; 0 along broadcast dims). y: [rows, dim] contiguous; mask may be null.
struct ScaledMaskedSoftmaxShape {
  std::vector<int64_t> out;           // y's shape, rank >= 1
  std::vector<int64_t> x_strides;     // x's strides seen through broadcasting to `out`
  std::vector<int64_t> mask_strides;  // likewise for the mask (unused when it is null)
};
template <typename T>
void scaled_masked_softmax_forward(const ScaledMaskedSoftmaxShape& shape, T scale, const T* x,
                                   const T* mask, T* y);

// With a boolean mask (keep, one byte per element, broadcast through shape.mask_strides):
// y = softmax(keep ? scale * x : fill) along the last axis.
template <typename T>
void scaled_kept_softmax_forward(const ScaledMaskedSoftmaxShape& shape, T scale, const T* x,
                                 const uint8_t* keep, T fill, T* y);

// dy, y, dx: [rows, dim] contiguous; dx = scale * y * (dy - sum(dy * y)) per row (the
// gradient of scale * x; scale 1 gives the mask's). dx may alias dy.
template <typename T>
void scaled_masked_softmax_backward(int64_t rows, int64_t dim, T scale, const T* dy, const T* y,
                                    T* dx);

// The gradient of scaled_kept_softmax_forward's x: keep ? scale * y * (dy - sum(dy * y)) : 0
// (a row the mask drops entirely gets none, though its softmax is uniform). dy, y, dx have
// shape.out, contiguous; keep broadcasts through shape.mask_strides. dx may alias dy.
// One row of the attention softmax, for the fused attention kernels (attention.cpp): what masks
// the row (nothing, an additive row or a boolean row with its fill; step: the mask's stride
// along the row, 0 where it broadcasts) ...
template <typename T>
struct RowMask {
  const T* add = nullptr;
  const uint8_t* keep = nullptr;
  int64_t step = 0;
  T fill = T(0);
};
// ... y = softmax(scale * x + add) or softmax(keep ? scale * x : fill) over [n]; x contiguous,
// y may alias x. Or in two steps: the masked scores (y = scale * x + add, or keep ? scale * x :
// fill), then the softmax of y in place.
template <typename T>
void attention_softmax_row(int64_t n, T scale, const T* x, const RowMask<T>& mask, T* y);
template <typename T>
void attention_scores_row(int64_t n, T scale, const T* x, const RowMask<T>& mask, T* y);
template <typename T>
void softmax_row(int64_t n, T* y);
// dx = scale * y * (dy - sum(dy * y)), 0 where mask.keep (when set) drops the element; dx may
// alias dy. mask.add plays no part.
template <typename T>
void attention_softmax_grad_row(int64_t n, T scale, const T* dy, const T* y, const RowMask<T>& mask,
                                T* dx);

template <typename T>
void scaled_kept_softmax_backward(const ScaledMaskedSoftmaxShape& shape, T scale, const T* dy,
                                  const T* y, const uint8_t* keep, T* dx);

}  // namespace ortmodule
