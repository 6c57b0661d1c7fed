// CUDA twins of the per-element and tuple index ops: GatherElements, its gradient
// GatherElementsGrad and ScatterElements; GatherND, GatherNDGrad and ScatterND. Indices (int64
// or int32) stay on the device; an out-of-range index fails the op with the CPU kernel's
// message (cuda::IndexCheck). Geometry and validation are the CPU's (ops/data_movement.h),
// and the scatter reductions use its formula (math::scatter_reduce).
//
// Where several indices name one element, the updates land in no fixed order: gradient sums
// (atomic adds) can differ in their last bits from run to run, as PyTorch's scatter_add_ on
// CUDA; a scatter with reduction "none" keeps one of the updates, not necessarily the last
// (ONNX leaves duplicate indices undefined there); add, mul, max and min are applied
// atomically.
//
// NonZero finds its coordinates on the host (see cuda_nonzero).
#include <cstdint>
#include <string>

#include "backends/cuda/movement.cuh"
#include "ops/data_movement.h"

namespace ortmodule {

namespace {

using cuda::DimArray;
using cuda::grid_stride;
using cuda::thread_index;
using math::ScatterReduction;

// ---- GatherElements / ScatterElements: one index per element, along `axis` ----

// Element i of the indices (shape `ishape`) addresses the data element (strides
// `data_stride`) with i's coordinates, except idx[i] along `axis`.
struct ElementIndex {
  int rank = 0;
  int axis = 0;
  int64_t extent = 0;  // data's size along axis
  DimArray ishape, data_stride;
};

// The data offset of element i, or -1 when its index is out of range (IndexCheck reports it).
template <typename I>
__device__ int64_t element_offset(const ElementIndex& g, const I* idx, int64_t i) {
  const int64_t k = static_cast<int64_t>(idx[i]);
  if (!math::index_in_range(k, g.extent)) return -1;
  int64_t off = 0, rem = i;
  for (int d = g.rank - 1; d >= 0; --d) {
    const int64_t c = d == g.axis ? math::wrap_index(k, g.extent) : rem % g.ishape.v[d];
    rem /= g.ishape.v[d];
    off += c * g.data_stride.v[d];
  }
  return off;
}

// y[i] = x[offset of i]. y and idx: ishape.
template <typename T, typename I>
__global__ void gather_elements_kernel(int64_t n, ElementIndex g, const I* idx, const T* x, T* y) {
  for (int64_t i = thread_index(); i < n; i += grid_stride()) {
    const int64_t off = element_offset(g, idx, i);
    if (off >= 0) y[i] = x[off];
  }
}

// dx[offset of i] += dy[i]. dy and idx: ishape.
template <typename T, typename I>
__global__ void gather_elements_grad_kernel(int64_t n, ElementIndex g, const I* idx, const T* dy,
                                            T* dx) {
  for (int64_t i = thread_index(); i < n; i += grid_stride()) {
    const int64_t off = element_offset(g, idx, i);
    if (off >= 0) cuda::atomic_add(dx + off, dy[i]);
  }
}

// Scatters v into *dst with reduction r.
template <typename T>
__device__ void scatter_into(ScatterReduction r, T* dst, T v) {
  if (r == ScatterReduction::None)
    *dst = v;
  else
    cuda::atomic_update(dst, [r, v](T cur) { return math::scatter_reduce(r, cur, v); });
}

// y[offset of i] (reduced with) upd[i]. y starts as a copy of the data; upd and idx: ishape.
template <typename T, typename I>
__global__ void scatter_elements_kernel(int64_t n, ElementIndex g, ScatterReduction r, const I* idx,
                                        const T* upd, T* y) {
  for (int64_t i = thread_index(); i < n; i += grid_stride()) {
    const int64_t off = element_offset(g, idx, i);
    if (off >= 0) scatter_into(r, y + off, upd[i]);
  }
}

ElementIndex element_index(const OpContext& ctx, const Shape& data, const Shape& ishape,
                           int64_t axis, const char* op) {
  check_element_indices(ctx, data, ishape, axis);
  cuda::check_rank(ctx, data.size(), op);
  ElementIndex g;
  g.rank = static_cast<int>(data.size());
  g.axis = static_cast<int>(axis);
  g.extent = data[axis];
  g.ishape = cuda::dim_array(ishape);
  g.data_stride = cuda::dim_array(row_major_strides(data));
  return g;
}

template <typename I>
cuda::IndexCheck check_element_range(const Tensor& indices, const ElementIndex& g) {
  DimArray ext;
  ext.v[0] = g.extent;
  return cuda::IndexCheck::launch<I>(indices, 1, ext);
}

void fail_on_bad_element(const OpContext& ctx, const cuda::IndexCheck& index_check,
                         int64_t extent) {
  const int64_t pos = index_check.first_bad();
  if (pos >= 0) ctx.fail(index_error("", index_check.value_at(pos), extent));
}

// ---- GatherND / ScatterND: index tuples into the leading dims (after the batch dims) ----

struct NdGeometry {
  int k = 0;
  int64_t tuples = 1, slice = 1, data_batch = 1;
  DimArray dims, stride;  // data's dims and strides indexed by the tuple entries
};

NdGeometry nd_geometry(const OpContext& ctx, const Shape& data, const NdIndex& nd, const char* op) {
  cuda::check_rank(ctx, data.size(), op);
  const int64_t b = ctx.node.attr_int("batch_dims", 0);
  const Shape st = row_major_strides(data);
  NdGeometry g;
  g.k = static_cast<int>(nd.k);
  g.tuples = nd.tuples;
  g.slice = nd.slice;
  g.data_batch = nd.data_batch;
  for (int64_t j = 0; j < nd.k; ++j) {
    g.dims.v[j] = data[b + j];
    g.stride.v[j] = st[b + j];
  }
  return g;
}

// The data offset of the slice of tuple `row`, or -1 when an index of the tuple is out of
// range (IndexCheck reports it).
template <typename I>
__device__ int64_t nd_offset(const NdGeometry& g, const I* idx, int64_t row) {
  int64_t off = (row / g.tuples) * g.data_batch;
  for (int j = 0; j < g.k; ++j) {
    const int64_t v = static_cast<int64_t>(idx[row * g.k + j]);
    if (!math::index_in_range(v, g.dims.v[j])) return -1;
    off += math::wrap_index(v, g.dims.v[j]) * g.stride.v[j];
  }
  return off;
}

// y[row, j] = x[slice offset of row + j]. y: [rows, slice] (n elements).
template <typename T, typename I>
__global__ void gather_nd_kernel(int64_t n, NdGeometry g, const I* idx, const T* x, T* y) {
  for (int64_t e = thread_index(); e < n; e += grid_stride()) {
    const int64_t off = nd_offset(g, idx, e / g.slice);
    if (off >= 0) y[e] = x[off + e % g.slice];
  }
}

// dx[slice offset of row + j] += dy[row, j].
template <typename T, typename I>
__global__ void gather_nd_grad_kernel(int64_t n, NdGeometry g, const I* idx, const T* dy, T* dx) {
  for (int64_t e = thread_index(); e < n; e += grid_stride()) {
    const int64_t off = nd_offset(g, idx, e / g.slice);
    if (off >= 0) cuda::atomic_add(dx + off + e % g.slice, dy[e]);
  }
}

// y[slice offset of row + j] (reduced with) upd[row, j]; y starts as a copy of the data.
template <typename T, typename I>
__global__ void scatter_nd_kernel(int64_t n, NdGeometry g, ScatterReduction r, const I* idx,
                                  const T* upd, T* y) {
  for (int64_t e = thread_index(); e < n; e += grid_stride()) {
    const int64_t off = nd_offset(g, idx, e / g.slice);
    if (off >= 0) scatter_into(r, y + off + e % g.slice, upd[e]);
  }
}

template <typename I>
cuda::IndexCheck check_nd_range(const Tensor& indices, const NdGeometry& g) {
  return cuda::IndexCheck::launch<I>(indices, g.k, g.dims);
}

void fail_on_bad_tuple(const OpContext& ctx, const cuda::IndexCheck& index_check,
                       const NdGeometry& g) {
  const int64_t pos = index_check.first_bad();
  if (pos >= 0) ctx.fail(index_error("GatherND", index_check.value_at(pos), g.dims.v[pos % g.k]));
}

}  // namespace

void cuda_gather_elements(OpContext& ctx) {
  const Tensor& x = ctx.in(0);
  const Tensor& indices = ctx.in(1);
  Tensor& y = ctx.out(0);
  const int64_t axis = check_axis(ctx, ctx.node.attr_int("axis", 0), x.rank(), "attribute 'axis'");
  const ElementIndex g = element_index(ctx, x.shape(), indices.shape(), axis, "GatherElements");
  const int64_t n = indices.numel();
  ORTM_CUDA_DISPATCH_INDEX(indices.dtype(), ctx, "indices (input 1)", {
    const cuda::IndexCheck index_check = check_element_range<index_t>(indices, g);
    if (n > 0) {
      ORTM_DISPATCH_BITS(x.dtype(), ctx, {
        gather_elements_kernel<scalar_t, index_t>
            <<<cuda::blocks_for(n), cuda::kThreads, 0, cuda::stream(y.device())>>>(
                n, g, indices.data<index_t>(), x.data<scalar_t>(), y.data<scalar_t>());
        cuda::check_launch("GatherElements");
      });
    }
    fail_on_bad_element(ctx, index_check, g.extent);
  });
}

// GatherElementsGrad(dY, data_shape, indices; axis): data_shape read on the host.
void cuda_gather_elements_grad(OpContext& ctx) {
  const Tensor& dy = ctx.in(0);
  const Tensor& indices = ctx.in(2);
  Tensor& dx = ctx.out(0);
  const int64_t axis = check_axis(ctx, ctx.node.attr_int("axis", 0), dx.rank(), "attribute 'axis'");
  ORTM_DISPATCH_NUMERIC(dy.dtype(), ctx, (void)0);  // the CPU kernel's dtypes
  const ElementIndex g =
      element_index(ctx, dx.shape(), indices.shape(), axis, "GatherElementsGrad");
  cuda::zero_fill(dx);
  const int64_t n = indices.numel();
  ORTM_CUDA_DISPATCH_INDEX(indices.dtype(), ctx, "indices (input 2)", {
    const cuda::IndexCheck index_check = check_element_range<index_t>(indices, g);
    if (n > 0) {
      ORTM_DISPATCH_NUMERIC(dy.dtype(), ctx, {
        gather_elements_grad_kernel<scalar_t, index_t>
            <<<cuda::blocks_for(n), cuda::kThreads, 0, cuda::stream(dx.device())>>>(
                n, g, indices.data<index_t>(), dy.data<scalar_t>(), dx.data<scalar_t>());
        cuda::check_launch("GatherElementsGrad");
      });
    }
    fail_on_bad_element(ctx, index_check, g.extent);
  });
}

// ScatterElements(data, indices, updates; axis, reduction).
void cuda_scatter_elements(OpContext& ctx) {
  const Tensor& x = ctx.in(0);
  const Tensor& indices = ctx.in(1);
  Tensor& y = ctx.out(0);
  const int64_t axis = check_axis(ctx, ctx.node.attr_int("axis", 0), x.rank(), "attribute 'axis'");
  if (indices.shape() != ctx.in(2).shape())
    ctx.fail("indices " + shape_str(indices.shape()) + " and updates " +
             shape_str(ctx.in(2).shape()) + " must have one shape");
  const ScatterReduction r = scatter_reduction(ctx);
  ORTM_DISPATCH_ALL(x.dtype(), ctx, (void)0);  // the CPU kernel's dtypes
  const ElementIndex g = element_index(ctx, x.shape(), indices.shape(), axis, "ScatterElements");
  cuda::copy_on_device(y.raw(), x.raw(), x.nbytes(), y.device());
  const int64_t n = indices.numel();
  ORTM_CUDA_DISPATCH_INDEX(indices.dtype(), ctx, "indices (input 1)", {
    const cuda::IndexCheck index_check = check_element_range<index_t>(indices, g);
    if (n > 0) {
      ORTM_DISPATCH_ALL(x.dtype(), ctx, {
        scatter_elements_kernel<scalar_t, index_t>
            <<<cuda::blocks_for(n), cuda::kThreads, 0, cuda::stream(y.device())>>>(
                n, g, r, indices.data<index_t>(), ctx.in(2).data<scalar_t>(), y.data<scalar_t>());
        cuda::check_launch("ScatterElements");
      });
    }
    fail_on_bad_element(ctx, index_check, g.extent);
  });
}

void cuda_gather_nd(OpContext& ctx) {
  const Tensor& x = ctx.in(0);
  const Tensor& indices = ctx.in(1);
  Tensor& y = ctx.out(0);
  const NdGeometry g =
      nd_geometry(ctx, x.shape(), nd_index(ctx, x.shape(), indices.shape()), "GatherND");
  const int64_t n = y.numel();
  ORTM_CUDA_DISPATCH_INDEX(indices.dtype(), ctx, "indices (input 1)", {
    const cuda::IndexCheck index_check = check_nd_range<index_t>(indices, g);
    if (n > 0) {
      ORTM_DISPATCH_BITS(x.dtype(), ctx, {
        gather_nd_kernel<scalar_t, index_t>
            <<<cuda::blocks_for(n), cuda::kThreads, 0, cuda::stream(y.device())>>>(
                n, g, indices.data<index_t>(), x.data<scalar_t>(), y.data<scalar_t>());
        cuda::check_launch("GatherND");
      });
    }
    fail_on_bad_tuple(ctx, index_check, g);
  });
}

// GatherNDGrad(data_shape, indices, dY; batch_dims): data_shape read on the host.
void cuda_gather_nd_grad(OpContext& ctx) {
  const Tensor& indices = ctx.in(1);
  const Tensor& dy = ctx.in(2);
  Tensor& dx = ctx.out(0);
  const NdGeometry g =
      nd_geometry(ctx, dx.shape(), nd_index(ctx, dx.shape(), indices.shape()), "GatherNDGrad");
  ORTM_DISPATCH_NUMERIC(dy.dtype(), ctx, (void)0);  // the CPU kernel's dtypes
  cuda::zero_fill(dx);
  const int64_t n = dy.numel();
  ORTM_CUDA_DISPATCH_INDEX(indices.dtype(), ctx, "indices (input 1)", {
    const cuda::IndexCheck index_check = check_nd_range<index_t>(indices, g);
    if (n > 0) {
      ORTM_DISPATCH_NUMERIC(dy.dtype(), ctx, {
        gather_nd_grad_kernel<scalar_t, index_t>
            <<<cuda::blocks_for(n), cuda::kThreads, 0, cuda::stream(dx.device())>>>(
                n, g, indices.data<index_t>(), dy.data<scalar_t>(), dx.data<scalar_t>());
        cuda::check_launch("GatherNDGrad");
      });
    }
    fail_on_bad_tuple(ctx, index_check, g);
  });
}

// ScatterND(data, indices, updates; reduction).
void cuda_scatter_nd(OpContext& ctx) {
  const Tensor& x = ctx.in(0);
  const Tensor& indices = ctx.in(1);
  Tensor& y = ctx.out(0);
  if (ctx.node.attr_int("batch_dims", 0) != 0) ctx.fail("ScatterND has no batch_dims");
  const NdIndex nd = nd_index(ctx, x.shape(), indices.shape());
  if (shape_numel(nd.out) != ctx.in(2).numel())
    ctx.fail("updates have shape " + shape_str(ctx.in(2).shape()) + "; expected " +
             shape_str(nd.out));
  const ScatterReduction r = scatter_reduction(ctx);
  ORTM_DISPATCH_ALL(x.dtype(), ctx, (void)0);  // the CPU kernel's dtypes
  const NdGeometry g = nd_geometry(ctx, x.shape(), nd, "ScatterND");
  cuda::copy_on_device(y.raw(), x.raw(), x.nbytes(), y.device());
  const int64_t n = ctx.in(2).numel();
  ORTM_CUDA_DISPATCH_INDEX(indices.dtype(), ctx, "indices (input 1)", {
    const cuda::IndexCheck index_check = check_nd_range<index_t>(indices, g);
    if (n > 0) {
      ORTM_DISPATCH_ALL(x.dtype(), ctx, {
        scatter_nd_kernel<scalar_t, index_t>
            <<<cuda::blocks_for(n), cuda::kThreads, 0, cuda::stream(y.device())>>>(
                n, g, r, indices.data<index_t>(), ctx.in(2).data<scalar_t>(), y.data<scalar_t>());
        cuda::check_launch("ScatterND");
      });
    }
    fail_on_bad_tuple(ctx, index_check, g);
  });
}

// NonZero(x): the number of non-zero elements is the output's width, so x is copied to the
// host (Tensor::to waits for the stream: the op's one synchronization), the CPU kernel's loop
// finds the coordinates there (nonzero_indices) and they are copied to x's device on the
// stream (a pageable host source is staged when the copy call returns, so it may go then).
void cuda_nonzero(OpContext& ctx) {
  const Tensor& x = ctx.in(0);
  ctx.out(0) = nonzero_indices(ctx, x.to(Device())).to(x.device());
}

}  // namespace ortmodule
