// CUDA twin of SumToShape (ai.ortmodule): a gradient summed down to the shape its operand
// had before broadcasting. One thread per output element adds the input elements that
// broadcast from it; consecutive threads read consecutive addresses of each reduced slice.
#include <cstdint>
#include <string>

#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/cuda_ops_internal.h"
#include "ops/op_utils.h"

namespace ortmodule {

namespace {

using cuda::Dims;

template <typename T>
__global__ void sum_to_shape_kernel(int64_t out_n, Dims kept, Dims reduced, int64_t reduced_n,
                                    const T* x, T* y) {
  const int64_t step = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t o = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; o < out_n;
       o += step) {
    const int64_t base = cuda::dims_offset(kept, o);
    T acc = 0;
    for (int64_t j = 0; j < reduced_n; ++j) acc += x[base + cuda::dims_offset(reduced, j)];
    y[o] = acc;
  }
}

template <typename T>
void launch_sum_to_shape(OpContext& ctx, const Tensor& x, Tensor& y) {
  // The output's dims right-aligned with the input's: a dim of 1 (or a missing one) where the
  // input's is not 1 is summed away, the others are kept.
  Dims kept, reduced;
  if (!cuda::split_reduction(x.shape(), y.shape(), &kept, &reduced))
    ctx.fail(cuda::rank_limit_message(x.rank(), "SumToShape"));
  int64_t reduced_n = 1;
  for (int k = 0; k < reduced.rank; ++k) reduced_n *= reduced.size[k];
  const int64_t out_n = y.numel();
  if (out_n == 0) return;
  sum_to_shape_kernel<T><<<cuda::blocks_for(out_n), cuda::kThreads, 0, cuda::stream(y.device())>>>(
      out_n, kept, reduced, reduced_n, x.data<T>(), y.data<T>());
  cuda::check_launch("SumToShape");
}

}  // namespace

void cuda_sum_to_shape_into(OpContext& ctx, const Tensor& x, Tensor& y) {
  ORTM_DISPATCH_FLOAT(x.dtype(), ctx, launch_sum_to_shape<scalar_t>(ctx, x, y));
}

void cuda_sum_to_shape(OpContext& ctx) {
  const Tensor& x = ctx.in(0);
  Tensor& y = ctx.out(0);
  if (y.raw() == x.raw()) return;  // nothing was broadcast: the output is a view
  cuda_sum_to_shape_into(ctx, x, y);
}

}  // namespace ortmodule
