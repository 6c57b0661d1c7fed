// Index math of the data-movement ops (Slice, Tile, Pad, Trilu, the scatters), shared by the
// CPU loops (ops/slice_ops.cpp, pad_ops.cpp, index_ops.cpp) and the CUDA kernels
// (backends/cuda/*.cu), so the CPU tests cover the offsets the GPU computes. Dims and strides
// are passed as raw arrays of `rank` entries (a std::vector's data() on the host, an index
// struct's fixed arrays on the device); offsets are in elements, row-major.
#pragma once

#include <cstdint>

#include "kernels/math/host_device.h"

namespace ortmodule {
namespace math {

// An index of an axis of size `dim` given in [-dim, dim): whether it is in range, and its
// value in [0, dim).
ORTM_HOST_DEVICE bool index_in_range(int64_t idx, int64_t dim) { return idx >= -dim && idx < dim; }
ORTM_HOST_DEVICE int64_t wrap_index(int64_t idx, int64_t dim) { return idx < 0 ? idx + dim : idx; }

// Offset in a tensor (strides `stride`) of element `i` of the strided box whose element
// (c0, c1, ...) is the tensor's element (start[d] + c_d * step[d]); `box` is the box's shape.
ORTM_HOST_DEVICE int64_t box_offset(int64_t i, int rank, const int64_t* box, const int64_t* start,
                                    const int64_t* step, const int64_t* stride) {
  int64_t off = 0;
  for (int d = rank - 1; d >= 0; --d) {
    const int64_t c = i % box[d];
    i /= box[d];
    off += (start[d] + c * step[d]) * stride[d];
  }
  return off;
}

// Offset in the tiled-from tensor (shape `small`, strides `small_stride`) of element `i` of
// the tiled tensor (shape `big`, a multiple of `small` in every dim).
ORTM_HOST_DEVICE int64_t tiled_offset(int64_t i, int rank, const int64_t* big, const int64_t* small,
                                      const int64_t* small_stride) {
  int64_t off = 0;
  for (int d = rank - 1; d >= 0; --d) {
    off += (i % big[d]) % small[d] * small_stride[d];
    i /= big[d];
  }
  return off;
}

// Pad modes (ONNX Pad's `mode` attribute).
enum class PadMode { Constant, Edge, Reflect, Wrap };

// Input coordinate read by output coordinate `o` along an axis of size `n` padded by
// `before` in front, or -1 for the constant.
ORTM_HOST_DEVICE int64_t pad_source_index(PadMode mode, int64_t o, int64_t before, int64_t n) {
  int64_t i = o - before;
  if (i >= 0 && i < n) return i;
  switch (mode) {
    case PadMode::Constant:
      return -1;
    case PadMode::Edge:
      return i < 0 ? 0 : n - 1;
    case PadMode::Reflect: {
      if (n == 1) return 0;
      const int64_t period = 2 * (n - 1);
      i = ((i % period) + period) % period;
      return i < n ? i : period - i;
    }
    case PadMode::Wrap:
      return ((i % n) + n) % n;
  }
  return -1;
}

// Offset in the input (shape `in`, strides `in_stride`) that element `o` of the padded output
// (shape `out`) reads, or -1 where it holds the constant.
ORTM_HOST_DEVICE int64_t padded_source_offset(int64_t o, int rank, PadMode mode, const int64_t* in,
                                              const int64_t* out, const int64_t* begin,
                                              const int64_t* in_stride) {
  int64_t off = 0;
  bool inside = true;
  for (int d = rank - 1; d >= 0; --d) {
    const int64_t idx = pad_source_index(mode, o % out[d], begin[d], in[d]);
    o /= out[d];
    if (idx < 0) inside = false;
    off += idx * in_stride[d];
  }
  return inside ? off : -1;
}

// Trilu: whether element (i, j) of a matrix is kept (the others become 0).
ORTM_HOST_DEVICE bool trilu_keeps(int64_t i, int64_t j, int64_t k, bool upper) {
  return upper ? j - i >= k : j - i <= k;
}

// CumSum along one line of `len` elements `stride` apart (reverse: from the last; exclusive:
// each output leaves out its own element).
template <typename T>
ORTM_HOST_DEVICE void cumsum_line(const T* src, T* dst, int64_t len, int64_t stride, bool exclusive,
                                  bool reverse) {
  T acc = 0;
  for (int64_t t = 0; t < len; ++t) {
    const int64_t o = (reverse ? len - 1 - t : t) * stride;
    const T v = src[o];
    if (!exclusive) acc += v;
    dst[o] = acc;
    if (exclusive) acc += v;
  }
}

// ScatterElements / ScatterND `reduction`: the value an element holding `cur` takes when
// `v` is scattered into it.
enum class ScatterReduction { None, Add, Mul, Max, Min };

template <typename T>
ORTM_HOST_DEVICE T scatter_reduce(ScatterReduction r, T cur, T v) {
  switch (r) {
    case ScatterReduction::None:
      return v;
    case ScatterReduction::Add:
      return static_cast<T>(cur + v);
    case ScatterReduction::Mul:
      return static_cast<T>(cur * v);
    case ScatterReduction::Max:
      return cur < v ? v : cur;  // std::max(cur, v)
    case ScatterReduction::Min:
      return v < cur ? v : cur;  // std::min(cur, v)
  }
  return v;
}

}  // namespace math
}  // namespace ortmodule
