// Extreme-value reductions (max / min over a set of axes, arg-max / arg-min along
// one axis) and the gradient of the extreme reductions.
//
// Multi-axis reductions take the input shape and `keep_shape`, the input shape with
// every reduced dim set to 1; the output has numel(keep_shape) elements in row-major
// order of keep_shape (keepdims only changes how the caller labels that shape).
#pragma once

#include <cstdint>
#include <vector>

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

}  // namespace ortmodule
