// CUDA twins of the region ops: Slice and SliceGrad (a strided box), Concat, Split and
// ConcatGrad (blocks along an axis), Pad and PadGrad. Their geometry (ops/data_movement.h)
// comes from attributes and host inputs exactly as on the CPU, and the per-element offsets
// are the CPU kernels' (kernels/math/index.h).
#include <cstdint>
#include <string>
#include <vector>

#include "backends/cuda/movement.cuh"
#include "ops/data_movement.h"

namespace ortmodule {

namespace {

using cuda::DimArray;
using cuda::grid_stride;
using cuda::thread_index;

// The box of a Slice, by value. Element i of the box is element box_offset(i) of the tensor.
struct BoxIndex {
  int rank = 0;
  DimArray shape, start, step, stride;
};

BoxIndex box_index(const OpContext& ctx, const Shape& full, const Box& box, const char* op) {
  cuda::check_rank(ctx, full.size(), op);
  BoxIndex b;
  b.rank = static_cast<int>(full.size());
  b.shape = cuda::dim_array(box.shape);
  b.start = cuda::dim_array(box.start);
  b.step = cuda::dim_array(box.step);
  b.stride = cuda::dim_array(row_major_strides(full));
  return b;
}

// Slice: y[i] = x[box offset of i]; SliceGrad: dx[box offset of i] = dy[i] (a slice selects
// every element at most once, so no two threads write one element).
template <typename T, bool kScatter>
__global__ void box_kernel(int64_t n, BoxIndex b, const T* src, T* dst) {
  for (int64_t i = thread_index(); i < n; i += grid_stride()) {
    const int64_t off = math::box_offset(i, b.rank, b.shape.v, b.start.v, b.step.v, b.stride.v);
    if (kScatter)
      dst[off] = src[i];
    else
      dst[i] = src[off];
  }
}

// One part of a concatenation: the part is [outer, part_row] elements, the whole
// [outer, whole_row]; the part's rows start at column `offset` of the whole's rows.
template <typename T, bool kToWhole>
__global__ void concat_part_kernel(int64_t n, int64_t part_row, int64_t whole_row, int64_t offset,
                                   T* part, T* whole) {
  for (int64_t i = thread_index(); i < n; i += grid_stride()) {
    const int64_t w = (i / part_row) * whole_row + offset + i % part_row;
    if (kToWhole)
      whole[w] = part[i];
    else
      part[i] = whole[w];
  }
}

// Copies between a tensor of shape `full` and its parts along `axis` (sizes[i] rows each; a
// null part is skipped): to_whole concatenates, else splits. The CUDA twin of concat_copy.
template <typename T>
void concat_parts(const Shape& full, int64_t axis, const std::vector<int64_t>& sizes,
                  const std::vector<T*>& parts, T* whole, Device device, bool to_whole,
                  const char* name) {
  const int64_t outer = dims_product(full, 0, axis);
  const int64_t inner = dims_product(full, axis + 1, full.size());
  const int64_t whole_row = full[axis] * inner;
  cudaStream_t stream = cuda::stream(device);
  int64_t offset = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    const int64_t part_row = sizes[i] * inner;
    const int64_t n = outer * part_row;
    if (parts[i] && n > 0) {
      if (to_whole) {
        concat_part_kernel<T, true><<<cuda::blocks_for(n), cuda::kThreads, 0, stream>>>(
            n, part_row, whole_row, offset, parts[i], whole);
      } else {
        concat_part_kernel<T, false><<<cuda::blocks_for(n), cuda::kThreads, 0, stream>>>(
            n, part_row, whole_row, offset, parts[i], whole);
      }
      cuda::check_launch(name);
    }
    offset += part_row;
  }
}

// The geometry of a Pad, by value.
struct PadIndex {
  int rank = 0;
  math::PadMode mode = math::PadMode::Constant;
  DimArray in, out, begin, in_stride;
};

PadIndex pad_index(const OpContext& ctx, const Shape& in, const Shape& out, const PadSpec& p,
                   const char* op) {
  cuda::check_rank(ctx, in.size(), op);
  PadIndex g;
  g.rank = static_cast<int>(in.size());
  g.mode = p.mode;
  g.in = cuda::dim_array(in);
  g.out = cuda::dim_array(out);
  g.begin = cuda::dim_array(p.begin);
  g.in_stride = cuda::dim_array(row_major_strides(in));
  return g;
}

// y[o] = x[source of o], or the constant: *value where the constant is a device input, else
// `fill`. x: in, y: out (padded).
template <typename T>
__global__ void pad_kernel(int64_t n, PadIndex g, const T* value, T fill, const T* x, T* y) {
  const T constant = value ? *value : fill;
  for (int64_t o = thread_index(); o < n; o += grid_stride()) {
    const int64_t i =
        math::padded_source_offset(o, g.rank, g.mode, g.in.v, g.out.v, g.begin.v, g.in_stride.v);
    y[o] = i < 0 ? constant : x[i];
  }
}

// dx[source of o] += dy[o]. In constant mode every dx element has at most one source, so the
// result is exact; in edge, reflect and wrap modes several dy elements add into one dx
// element in no fixed order (the last bits of float sums can vary from run to run).
// dy: out (padded), dx: in.
template <typename T>
__global__ void pad_grad_kernel(int64_t n, PadIndex g, const T* dy, T* dx) {
  for (int64_t o = thread_index(); o < n; o += grid_stride()) {
    const int64_t i =
        math::padded_source_offset(o, g.rank, g.mode, g.in.v, g.out.v, g.begin.v, g.in_stride.v);
    if (i >= 0) cuda::atomic_add(dx + i, dy[o]);
  }
}

}  // namespace

// Slice(data, starts, ends, axes?, steps?): starts, ends, axes and steps read on the host.
void cuda_slice(OpContext& ctx) {
  const Tensor& x = ctx.in(0);
  Tensor& y = ctx.out(0);
  const BoxIndex b = box_index(ctx, x.shape(), slice_box(ctx, x.shape(), 1), "Slice");
  const int64_t n = y.numel();
  if (n == 0) return;
  ORTM_DISPATCH_BITS(x.dtype(), ctx, {
    box_kernel<scalar_t, false>
        <<<cuda::blocks_for(n), cuda::kThreads, 0, cuda::stream(y.device())>>>(
            n, b, x.data<scalar_t>(), y.data<scalar_t>());
    cuda::check_launch("Slice");
  });
}

// SliceGrad(dY, shape, starts, ends, axes?, steps?): all but dY read on the host.
void cuda_slice_grad(OpContext& ctx) {
  const Tensor& dy = ctx.in(0);
  Tensor& dx = ctx.out(0);
  const BoxIndex b = box_index(ctx, dx.shape(), slice_box(ctx, dx.shape(), 2), "SliceGrad");
  ORTM_DISPATCH_NUMERIC(dy.dtype(), ctx, (void)0);  // the CPU kernel's dtypes
  cuda::zero_fill(dx);
  const int64_t n = dy.numel();
  if (n == 0) return;
  ORTM_DISPATCH_BITS(dy.dtype(), ctx, {
    box_kernel<scalar_t, true>
        <<<cuda::blocks_for(n), cuda::kThreads, 0, cuda::stream(dx.device())>>>(
            n, b, dy.data<scalar_t>(), dx.data<scalar_t>());
    cuda::check_launch("SliceGrad");
  });
}

void cuda_concat(OpContext& ctx) {
  Tensor& y = ctx.out(0);
  const int64_t axis = normalize_axis(ctx, ctx.node.attr_int("axis", 0), y.rank());
  std::vector<int64_t> sizes;
  for (size_t i = 0; i < ctx.num_inputs(); ++i) sizes.push_back(ctx.in(i).dim(axis));
  ORTM_DISPATCH_BITS(y.dtype(), ctx, {
    std::vector<scalar_t*> parts;
    for (size_t i = 0; i < ctx.num_inputs(); ++i) parts.push_back(ctx.in(i).data<scalar_t>());
    concat_parts(y.shape(), axis, sizes, parts, y.data<scalar_t>(), y.device(), true, "Concat");
  });
}

// ConcatGrad(dY, shape_0, ..., shape_n; axis): the shapes read on the host; only the outputs
// asked for are written.
void cuda_concat_grad(OpContext& ctx) {
  const Tensor& dy = ctx.in(0);
  const int64_t axis = normalize_axis(ctx, ctx.node.attr_int("axis", 0), dy.rank());
  std::vector<int64_t> sizes;
  for (size_t i = 1; i < ctx.num_inputs(); ++i) sizes.push_back(ctx.in(i).int_at(axis));
  ORTM_DISPATCH_BITS(dy.dtype(), ctx, {
    std::vector<scalar_t*> parts;
    for (size_t i = 1; i < ctx.num_inputs(); ++i)
      parts.push_back(ctx.has_output(i - 1) ? ctx.out(i - 1).data<scalar_t>() : nullptr);
    concat_parts(dy.shape(), axis, sizes, parts, dy.data<scalar_t>(), dy.device(), false,
                 "ConcatGrad");
  });
}

// Split(input, split?; axis, num_outputs): split read on the host.
void cuda_split(OpContext& ctx) {
  const Tensor& x = ctx.in(0);
  const int64_t axis = normalize_axis(ctx, ctx.node.attr_int("axis", 0), x.rank());
  const std::vector<int64_t> sizes = split_sizes(ctx);
  ORTM_DISPATCH_BITS(x.dtype(), ctx, {
    std::vector<scalar_t*> parts;
    for (size_t i = 0; i < ctx.outputs.size(); ++i)
      parts.push_back(ctx.has_output(i) ? ctx.out(i).data<scalar_t>() : nullptr);
    concat_parts(x.shape(), axis, sizes, parts, x.data<scalar_t>(), x.device(), false, "Split");
  });
}

// Pad(data, pads, constant_value?, axes?; mode): pads and axes read on the host; the constant
// is read by the kernel where it is an input (no copy to the host).
void cuda_pad(OpContext& ctx) {
  const Tensor& x = ctx.in(0);
  Tensor& y = ctx.out(0);
  const PadSpec p = pad_spec(ctx, x.shape(), 1);
  const std::vector<uint8_t> fill_bytes = pad_fill_bytes(ctx);
  const PadIndex g = pad_index(ctx, x.shape(), y.shape(), p, "Pad");
  const int64_t n = y.numel();
  if (n == 0) return;
  ORTM_DISPATCH_BITS(x.dtype(), ctx, {
    scalar_t fill;
    std::memcpy(&fill, fill_bytes.data(), sizeof(fill));
    const scalar_t* value = ctx.has_input(2) ? ctx.in(2).data<scalar_t>() : nullptr;
    pad_kernel<scalar_t><<<cuda::blocks_for(n), cuda::kThreads, 0, cuda::stream(y.device())>>>(
        n, g, value, fill, x.data<scalar_t>(), y.data<scalar_t>());
    cuda::check_launch("Pad");
  });
}

// PadGrad(dY, input_shape, pads, -, axes?; mode): all but dY read on the host.
void cuda_pad_grad(OpContext& ctx) {
  const Tensor& dy = ctx.in(0);
  Tensor& dx = ctx.out(0);
  const PadSpec p = pad_spec(ctx, dx.shape(), 2);
  const PadIndex g = pad_index(ctx, dx.shape(), dy.shape(), p, "PadGrad");
  ORTM_DISPATCH_FLOAT(dy.dtype(), ctx, (void)0);
  cuda::zero_fill(dx);
  const int64_t n = dy.numel();
  if (n == 0) return;
  ORTM_DISPATCH_FLOAT(dy.dtype(), ctx, {
    pad_grad_kernel<scalar_t>
        <<<cuda::blocks_for(n), cuda::kThreads, 0, cuda::stream(dx.device())>>>(
            n, g, dy.data<scalar_t>(), dx.data<scalar_t>());
    cuda::check_launch("PadGrad");
  });
}

}  // namespace ortmodule
