// CUDA twin of TopK(X, K; axis, largest, sorted): x [outer, dim, inner] -> values, indices
// [outer, K, inner], in the CPU kernel's order (math::topk_before, equal elements by index).
//
// One thread per element finds its rank in its column: the number of elements before it in
// that order (the ones that compare before it, and the equal ones at lower indices). The
// ranks of a column are distinct, so each element of rank < K writes its own output slot: no
// sorting, no atomics, deterministic. The work is dim^2 comparisons per column, which suits
// the short axes models take top-k and sort along (scores, beams, small vocabularies).
#include <cstdint>

#include "kernels/cuda/cuda_common.h"
#include "kernels/math/reduce.h"
#include "ops/op_utils.h"

namespace ortmodule {

namespace {

template <typename T>
__global__ void topk_rank_kernel(int64_t outer, int64_t dim, int64_t inner, int64_t k, const T* x,
                                 T* values, int64_t* indices, bool largest) {
  const int64_t n = outer * dim * inner;
  const int64_t step = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < n; e += step) {
    const int64_t o = e / (dim * inner), j = (e / inner) % dim, i = e % inner;
    const T* col = x + o * dim * inner + i;
    const T v = col[j * inner];
    int64_t rank = 0;
    for (int64_t m = 0; m < dim && rank < k; ++m) {
      const T w = col[m * inner];
      rank += math::topk_before(w, v, largest) || (m < j && !math::topk_before(v, w, largest));
    }
    if (rank < k) {
      const int64_t at = o * k * inner + rank * inner + i;
      values[at] = v;
      indices[at] = j;
    }
  }
}

}  // namespace

void cuda_top_k(OpContext& ctx) {
  const Tensor& x = ctx.in(0);
  const size_t axis = static_cast<size_t>(
      normalize_axis(ctx, ctx.node.attr_int("axis", -1), static_cast<int64_t>(x.rank())));
  const int64_t dim = x.dim(axis);
  const int64_t k = topk_k(ctx, dim);
  const bool largest = ctx.node.attr_int("largest", 1) != 0;
  const int64_t outer = dims_product(x.shape(), 0, axis);
  const int64_t inner = dims_product(x.shape(), axis + 1, x.rank());
  const int64_t n = x.numel();
  if (n == 0 || k == 0) return;
  cudaStream_t stream = cuda::stream(x.device());
  ORTM_DISPATCH_NUMERIC(x.dtype(), ctx, {
    topk_rank_kernel<scalar_t><<<cuda::blocks_for(n), cuda::kThreads, 0, stream>>>(
        outer, dim, inner, k, x.data<scalar_t>(), ctx.out(0).data<scalar_t>(),
        ctx.out(1).data<int64_t>(), largest);
  });
  cuda::check_launch("TopK");
}

}  // namespace ortmodule
