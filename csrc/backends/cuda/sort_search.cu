// CUDA twin of SearchSorted (ops/sort_search_ops.cpp): one thread per value, the binary
// search of kernels/math/search.h.
#include <cstdint>

#include "backends/cuda/map.cuh"
#include "kernels/cuda/cuda_common.h"
#include "kernels/math/search.h"
#include "ops/op_utils.h"

namespace ortmodule {

namespace {

// out[i] = insertion point of values[i] in row i / per_row of seq ([rows, m]).
template <typename T>
__global__ void search_sorted_kernel(int64_t n, int64_t m, int64_t per_row, bool right,
                                     const T* seq, const T* values, int64_t* out) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(blockDim.x) * gridDim.x) {
    const int64_t row = per_row > 0 ? i / per_row : 0;
    out[i] = math::search_sorted(seq + row * m, m, values[i], right);
  }
}

}  // namespace

void cuda_search_sorted(OpContext& ctx) {
  const Tensor& seq = ctx.in(0);
  const Tensor& values = ctx.in(1);
  Tensor& y = ctx.out(0);
  const bool right = ctx.node.attr_int("right", 0) != 0;
  const int64_t m = seq.dim(seq.rank() - 1);
  const int64_t n = values.numel();
  const int64_t per_row =
      seq.rank() == 1 ? n : (values.rank() > 0 ? values.dim(values.rank() - 1) : 1);
  if (n == 0) return;
  ORTM_CUDA_DISPATCH_NUMERIC(seq.dtype(), ctx, {
    search_sorted_kernel<scalar_t>
        <<<cuda::blocks_for(n), cuda::kThreads, 0, cuda::stream(y.device())>>>(
            n, m, per_row, right, seq.data<scalar_t>(), values.data<scalar_t>(), y.data<int64_t>());
    cuda::check_launch("SearchSorted");
  });
}

}  // namespace ortmodule
