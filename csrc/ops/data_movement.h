// Geometry of the data-movement ops, read from a node's attributes and host (shape-like)
// inputs: shared by their shape rules, their CPU kernels (ops/shape_ops.cpp, slice_ops.cpp,
// pad_ops.cpp, index_ops.cpp) and their CUDA kernels (backends/cuda/*.cu), which therefore
// validate the same things and fail with the same messages.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/math/index.h"
#include "ops/op_table.h"

namespace ortmodule {

// Row-major strides of `s`, in elements.
Shape row_major_strides(const Shape& s);

// Transpose: the node's permutation (reversed axes when `perm` is absent), checked.
std::vector<int64_t> transpose_perm(const OpContext& ctx);

// A strided box inside a tensor: element (i0, i1, ...) of the box is element
// (start[d] + i_d * step[d]) of the tensor.
struct Box {
  Shape shape;
  std::vector<int64_t> start, step;
};
// The box Slice(data, starts, ends, axes?, steps?) selects (ONNX clamping rules); its inputs
// start at `first` (1 for Slice, 2 for SliceGrad), or are attributes before opset 10.
Box slice_box(const OpContext& ctx, const Shape& data, size_t first);

// Split: the size of every output along the axis (split input, attribute or equal parts).
std::vector<int64_t> split_sizes(const OpContext& ctx);

// Pad: the mode and the pads before and after every axis of the data (`shape`); pads at
// input `pads_at` (or the attribute before opset 11), axes at pads_at + 2.
struct PadSpec {
  math::PadMode mode = math::PadMode::Constant;
  std::vector<int64_t> begin, end;  // per axis of the data
};
PadSpec pad_spec(const OpContext& ctx, const Shape& shape, size_t pads_at);
Shape padded_shape(const Shape& in, const PadSpec& p);
// Pad's constant: checks constant_value (input 2; its dtype and one element) and returns the
// bytes of the constant when there is no such input (the `value` attribute before opset 11,
// else zero).
std::vector<uint8_t> pad_fill_bytes(const OpContext& ctx);

// Trilu: the diagonal offset k (input 1, default 0); fails unless the input is a matrix stack.
int64_t trilu_offset(const OpContext& ctx);
// CumSum: the axis (input 1, one value), normalised against input 0's rank.
int64_t cumsum_axis(const OpContext& ctx);

// Gather along an axis of size `extent`: the message for index `k` at position `pos`.
std::string gather_index_error(int64_t k, int64_t pos, int64_t extent);

// GatherElements / ScatterElements: indices of rank and dims that fit `data` (all dims but
// `axis` at most data's); fails naming the mismatch.
void check_element_indices(const OpContext& ctx, const Shape& data, const Shape& ishape,
                           int64_t axis);
// The message for an element or tuple index `idx` out of range for a dim of size `dim`;
// `what` names the op ("" for the element ops, "GatherND" for the tuple ops).
std::string index_error(const std::string& what, int64_t idx, int64_t dim);

// GatherND / ScatterND geometry (batch_dims attribute).
struct NdIndex {
  int64_t batch = 1;       // product of the batch dims
  int64_t tuples = 1;      // index tuples per batch
  int64_t k = 0;           // tuple length
  int64_t slice = 1;       // elements per gathered slice
  int64_t data_batch = 1;  // elements of data per batch
  Shape out;
};
NdIndex nd_index(const OpContext& ctx, const Shape& data, const Shape& ishape);

// ScatterElements / ScatterND: the `reduction` attribute.
math::ScatterReduction scatter_reduction(const OpContext& ctx);

// NonZero: the coordinates of the non-zero elements of `x` (on the host) in row-major order,
// as int64 [rank, count] on the host: column j holds the j-th non-zero element's.
Tensor nonzero_indices(const OpContext& ctx, const Tensor& x);

}  // namespace ortmodule
