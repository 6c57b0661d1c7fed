// CUDA twin of SumToShape (ai.ortmodule): a gradient summed down to the shape its operand
// had before broadcasting (a bias's gradient: [rows, C] down to [C]).
//
// A block of kTileX x kTileY threads sums kTileX outputs. Where the input's innermost dim is
// kept (the bias case), threads along x take consecutive outputs, so each row of the tile is
// one coalesced read, and threads along y take every kTileY-th reduced element; where it is
// summed away, each warp takes one output and its lanes take consecutive elements. The
// reduced elements are split over gridDim.y blocks when the outputs alone would leave the GPU
// idle; each block writes its partial sum, and a second kernel adds the partials in order
// (the result does not depend on timing).
#include <algorithm>
#include <cstdint>
#include <string>

#include "backends/cuda/cuda_ops_internal.h"
#include "kernels/cuda/block_reduce.cuh"
#include "ops/op_utils.h"

namespace ortmodule {

namespace {

using cuda::Dims;

// Offset of reduced element j: one multiply for a single reduced dim (a bias's rows).
__device__ inline int64_t reduced_offset(const Dims& reduced, int64_t j) {
  return reduced.rank == 1 ? j * reduced.stride[0] : cuda::dims_offset(reduced, j);
}

constexpr int kTileX = 32;  // outputs per block (column mode); lanes of a warp (row mode)
constexpr int kTileY = 8;   // reduced elements in flight per output (column mode); warps
constexpr int64_t kTargetBlocks = 512;  // enough blocks to fill a large GPU several times
constexpr int64_t kMinPerSplit = 64;    // reduced elements a split is worth at least

// Column mode: output o = blockIdx.x * kTileX + threadIdx.x, reduced elements
// [j0, j1) of split blockIdx.y.
template <typename T>
__global__ void __launch_bounds__(kTileX* kTileY)
    sum_columns_kernel(int64_t out_n, Dims kept, Dims reduced, int64_t reduced_n, int64_t per_split,
                       const T* x, T* out) {
  __shared__ T tile[kTileY][kTileX + 1];
  const int64_t o = static_cast<int64_t>(blockIdx.x) * kTileX + threadIdx.x;
  const int64_t j0 = static_cast<int64_t>(blockIdx.y) * per_split;
  const int64_t j1 = j0 + per_split < reduced_n ? j0 + per_split : reduced_n;
  T acc = 0;
  if (o < out_n) {
    const int64_t base = cuda::dims_offset(kept, o);
    for (int64_t j = j0 + threadIdx.y; j < j1; j += kTileY)
      acc += x[base + reduced_offset(reduced, j)];
  }
  tile[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && o < out_n) {
    T sum = 0;
    for (int k = 0; k < kTileY; ++k) sum += tile[k][threadIdx.x];
    out[static_cast<int64_t>(blockIdx.y) * out_n + o] = sum;
  }
}

// Row mode: output o = blockIdx.x * kTileY + threadIdx.y, summed by one warp.
template <typename T>
__global__ void __launch_bounds__(kTileX* kTileY)
    sum_rows_kernel(int64_t out_n, Dims kept, Dims reduced, int64_t reduced_n, int64_t per_split,
                    const T* x, T* out) {
  const int64_t o = static_cast<int64_t>(blockIdx.x) * kTileY + threadIdx.y;
  if (o >= out_n) return;  // the whole warp leaves together
  const int64_t j0 = static_cast<int64_t>(blockIdx.y) * per_split;
  const int64_t j1 = j0 + per_split < reduced_n ? j0 + per_split : reduced_n;
  const int64_t base = cuda::dims_offset(kept, o);
  T acc = 0;
  for (int64_t j = j0 + threadIdx.x; j < j1; j += kTileX)
    acc += x[base + reduced_offset(reduced, j)];
  for (int offset = kTileX / 2; offset > 0; offset /= 2)
    acc += __shfl_down_sync(0xffffffffu, acc, offset);
  if (threadIdx.x == 0) out[static_cast<int64_t>(blockIdx.y) * out_n + o] = acc;
}

// y[o] = sum over k < splits of partial[k * out_n + o], in order.
template <typename T>
__global__ void sum_partials_kernel(int64_t out_n, int64_t splits, const T* partial, T* y) {
  const int64_t step = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t o = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; o < out_n;
       o += step) {
    T sum = 0;
    for (int64_t k = 0; k < splits; ++k) sum += partial[k * out_n + o];
    y[o] = sum;
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
  const bool columns = kept.rank > 0 && kept.stride[kept.rank - 1] == 1;
  const int64_t blocks_x = (out_n + (columns ? kTileX : kTileY) - 1) / (columns ? kTileX : kTileY);
  int64_t splits = std::min<int64_t>((kTargetBlocks + blocks_x - 1) / blocks_x,
                                     std::max<int64_t>(1, reduced_n / kMinPerSplit));
  splits = std::clamp<int64_t>(splits, 1, 65535);
  const int64_t per_split = std::max<int64_t>(1, (reduced_n + splits - 1) / splits);
  splits = std::max<int64_t>(1, (reduced_n + per_split - 1) / per_split);
  cudaStream_t stream = cuda::stream(y.device());
  Tensor partial = splits > 1 ? Tensor::empty(y.dtype(), {splits * out_n}, y.device()) : y;
  if (blocks_x > INT32_MAX)
    ctx.fail("output of " + std::to_string(out_n) +
             " elements is above the CUDA SumToShape "
             "kernel's grid limit");
  const dim3 grid(static_cast<unsigned>(blocks_x), static_cast<unsigned>(splits));
  const dim3 block(kTileX, kTileY);
  if (columns)
    sum_columns_kernel<T><<<grid, block, 0, stream>>>(out_n, kept, reduced, reduced_n, per_split,
                                                      x.data<T>(), partial.data<T>());
  else
    sum_rows_kernel<T><<<grid, block, 0, stream>>>(out_n, kept, reduced, reduced_n, per_split,
                                                   x.data<T>(), partial.data<T>());
  cuda::check_launch("SumToShape");
  if (splits == 1) return;
  sum_partials_kernel<T><<<cuda::blocks_for(out_n), cuda::kThreads, 0, stream>>>(
      out_n, splits, partial.data<T>(), y.data<T>());
  cuda::check_launch("SumToShape (partial sums)");
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
