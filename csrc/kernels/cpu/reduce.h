// Extreme-value reductions (max / min over a set of axes, arg-max / arg-min along
// one axis) and the gradient of the extreme reductions.
//
// Multi-axis reductions take the input shape and `keep_shape`, the input shape with
// every reduced dim set to 1; the output has numel(keep_shape) elements in row-major
// order of keep_shape (keepdims only changes how the caller labels that shape).
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/math/reduce.h"

namespace ortmodule {

// x: x_shape -> y: keep_shape; y = max (or min) over the reduced dims. NaN propagates;
// an empty reduction gives -inf / +inf (the lowest / highest value for integers).
template <typename T>
void reduce_extreme_forward(const std::vector<int64_t>& x_shape, const T* x,
                            const std::vector<int64_t>& keep_shape, T* y, bool is_max);

// dy, y: keep_shape; x: x_shape -> dx: x_shape. Each output's gradient is split evenly
// among the inputs equal to it (the tied extremes, as torch.amax/amin do); 0 elsewhere.
template <typename T>
void reduce_extreme_backward(const std::vector<int64_t>& x_shape, const T* x,
                             const std::vector<int64_t>& keep_shape, const T* y, const T* dy,
                             T* dx);

// x: [outer, dim, inner] -> y: [outer, inner], the index along `dim` of the largest
// (or smallest) value; the first one unless select_last. NaN counts as the extreme,
// as numpy's argmax/argmin treat it.
template <typename T>
void arg_extreme_forward(int64_t outer, int64_t dim, int64_t inner, const T* x, int64_t* y,
                         bool is_max, bool select_last);

// x: x_shape -> y: keep_shape; the product, sum of absolute values, Euclidean norm or
// log-sum-exp (max-shifted) of each slice, accumulated in double (64-bit integers for the
// integer product). Empty slices give 1, 0, 0 and -inf.
template <typename T>
void reduce_accumulate_forward(const std::vector<int64_t>& x_shape, const T* x,
                               const std::vector<int64_t>& keep_shape, T* y,
                               math::Accumulation kind);

// ReduceProd's gradient (math::prod_grad): dy, y: keep_shape; x, dx: x_shape.
template <typename T>
void reduce_prod_backward(const std::vector<int64_t>& x_shape, const T* x,
                          const std::vector<int64_t>& keep_shape, const T* y, const T* dy, T* dx);

// TopK along one axis: x [outer, dim, inner] -> values, indices [outer, k, inner], the k
// first elements of each column in math::topk_before's order, equal ones by index.
template <typename T>
void topk_forward(int64_t outer, int64_t dim, int64_t inner, int64_t k, const T* x, T* values,
                  int64_t* indices, bool largest);

}  // namespace ortmodule
