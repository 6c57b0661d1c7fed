// CUDA twins of Gather (and Embedding, which runs Gather's kernel) and of their gradients
// GatherGrad and EmbeddingGrad. Indices (int64 or int32) stay on the device; an out-of-range
// index fails the op with the CPU kernel's message (cuda::IndexCheck).
#include <cstdint>
#include <string>

#include "backends/cuda/movement.cuh"
#include "ops/data_movement.h"

namespace ortmodule {

namespace {

using cuda::grid_stride;
using cuda::thread_index;

// y[o, i, j] = x[o, idx[i], j].
// x: [outer, extent, inner], idx: [n_idx] (any shape, flattened), y: [outer, n_idx, inner].
template <typename T, typename I>
__global__ void gather_kernel(int64_t n, int64_t n_idx, int64_t extent, int64_t inner, const I* idx,
                              const T* x, T* y) {
  for (int64_t e = thread_index(); e < n; e += grid_stride()) {
    const int64_t j = e % inner, r = e / inner;
    const int64_t k = static_cast<int64_t>(idx[r % n_idx]);
    if (!math::index_in_range(k, extent)) continue;  // reported by IndexCheck
    y[e] = x[((r / n_idx) * extent + math::wrap_index(k, extent)) * inner + j];
  }
}

// dx[o, idx[i], j] += dy[o, i, j], except for rows equal to `skip` (an embedding's padding
// index; -1 for GatherGrad). Repeated indices add into one row with atomics, in no fixed
// order: float sums can differ in their last bits from run to run, as PyTorch's index_add_
// (and embedding backward) on CUDA. dx: [outer, extent, inner], dy: [outer, n_idx, inner].
template <typename T, typename I>
__global__ void gather_grad_kernel(int64_t n, int64_t n_idx, int64_t extent, int64_t inner,
                                   int64_t skip, const I* idx, const T* dy, T* dx) {
  for (int64_t e = thread_index(); e < n; e += grid_stride()) {
    const int64_t j = e % inner, r = e / inner;
    const int64_t raw = static_cast<int64_t>(idx[r % n_idx]);
    if (!math::index_in_range(raw, extent)) continue;  // reported by IndexCheck
    const int64_t k = math::wrap_index(raw, extent);
    if (k == skip) continue;
    cuda::atomic_add(dx + ((r / n_idx) * extent + k) * inner + j, dy[e]);
  }
}

void fail_on_bad_index(const OpContext& ctx, const cuda::IndexCheck& index_check, int64_t extent) {
  const int64_t pos = index_check.first_bad();
  if (pos >= 0) ctx.fail(gather_index_error(index_check.value_at(pos), pos, extent));
}

template <typename T, typename I>
void launch_gather(OpContext& ctx, int64_t axis) {
  const Tensor& x = ctx.in(0);
  const Tensor& indices = ctx.in(1);
  Tensor& y = ctx.out(0);
  const int64_t extent = x.dim(axis);
  const int64_t inner = dims_product(x.shape(), axis + 1, x.rank());
  cuda::DimArray ext;
  ext.v[0] = extent;
  const cuda::IndexCheck index_check = cuda::IndexCheck::launch<I>(indices, 1, ext);
  const int64_t n = y.numel();
  if (n > 0) {
    gather_kernel<T, I><<<cuda::blocks_for(n), cuda::kThreads, 0, cuda::stream(y.device())>>>(
        n, indices.numel(), extent, inner, indices.data<I>(), x.data<T>(), y.data<T>());
    cuda::check_launch("Gather");
  }
  fail_on_bad_index(ctx, index_check, extent);
}

template <typename T, typename I>
void launch_gather_grad(OpContext& ctx, int64_t axis, int64_t skip, const char* name) {
  const Tensor& indices = ctx.in(1);
  const Tensor& dy = ctx.in(2);
  Tensor& dx = ctx.out(0);
  const int64_t extent = dx.dim(axis);
  const int64_t inner = dims_product(dx.shape(), axis + 1, dx.rank());
  cuda::DimArray ext;
  ext.v[0] = extent;
  const cuda::IndexCheck index_check = cuda::IndexCheck::launch<I>(indices, 1, ext);
  cuda::zero_fill(dx);
  const int64_t n = dy.numel();
  if (n > 0) {
    gather_grad_kernel<T, I><<<cuda::blocks_for(n), cuda::kThreads, 0, cuda::stream(dx.device())>>>(
        n, indices.numel(), extent, inner, skip, indices.data<I>(), dy.data<T>(), dx.data<T>());
    cuda::check_launch(name);
  }
  fail_on_bad_index(ctx, index_check, extent);
}

// GatherGrad(shape, indices, dY; axis) and EmbeddingGrad(shape, indices, dY; padding_idx):
// the shape read on the host.
void run_gather_grad(OpContext& ctx, int64_t axis_attr, int64_t skip, const char* name) {
  const int64_t axis = normalize_axis(ctx, axis_attr, ctx.out(0).rank());
  const Tensor& indices = ctx.in(1);
  ORTM_CUDA_DISPATCH_INDEX(
      indices.dtype(), ctx, "indices (input 1)",
      ORTM_DISPATCH_FLOAT(ctx.in(2).dtype(), ctx,
                          launch_gather_grad<scalar_t, index_t>(ctx, axis, skip, name)));
}

}  // namespace

void cuda_gather(OpContext& ctx) {
  const Tensor& x = ctx.in(0);
  const int64_t axis = normalize_axis(ctx, ctx.node.attr_int("axis", 0), x.rank());
  ORTM_CUDA_DISPATCH_INDEX(
      ctx.in(1).dtype(), ctx, "indices (input 1)",
      ORTM_DISPATCH_BITS(x.dtype(), ctx, launch_gather<scalar_t, index_t>(ctx, axis)));
}

void cuda_gather_grad(OpContext& ctx) {
  run_gather_grad(ctx, ctx.node.attr_int("axis", 0), -1, "GatherGrad");
}

void cuda_embedding_grad(OpContext& ctx) {
  run_gather_grad(ctx, 0, ctx.node.attr_int("padding_idx", -1), "EmbeddingGrad");
}

}  // namespace ortmodule
