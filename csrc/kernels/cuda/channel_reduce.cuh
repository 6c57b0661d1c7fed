// Block-wide sums for the per-channel and per-plane reductions (conv.cu's dbias, pool.cu's
// global average, batchnorm.cu's statistics): one block owns one channel, its threads stride
// over the channel's elements, and the partial sums meet here. Device code only.
#pragma once

#include <cstdint>

#include "kernels/cuda/block_reduce.cuh"  // kWarp

namespace ortmodule {
namespace cuda {

// Threads of a reduction block: a multiple of kWarp, at most kWarp * kWarp.
constexpr int kReduceThreads = 256;
static_assert(kReduceThreads % kWarp == 0 && kReduceThreads <= kWarp * kWarp, "block size");

// Sums a and b over the block; every thread gets both totals. `shared` holds 2 * kWarp
// values. Every thread of the block must call it (it synchronizes), and the fixed tree
// makes the result independent of timing (deterministic for a given launch size).
__device__ inline void block_sum2(double* a, double* b, double* shared) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) {
    *a += __shfl_down_sync(0xffffffffu, *a, offset);
    *b += __shfl_down_sync(0xffffffffu, *b, offset);
  }
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  if (lane == 0) {
    shared[warp] = *a;
    shared[kWarp + warp] = *b;
  }
  __syncthreads();
  if (warp == 0) {
    const bool present = lane < static_cast<int>(blockDim.x / kWarp);
    double va = present ? shared[lane] : 0.0, vb = present ? shared[kWarp + lane] : 0.0;
    for (int offset = kWarp / 2; offset > 0; offset /= 2) {
      va += __shfl_down_sync(0xffffffffu, va, offset);
      vb += __shfl_down_sync(0xffffffffu, vb, offset);
    }
    if (lane == 0) {
      shared[0] = va;
      shared[kWarp] = vb;
    }
  }
  __syncthreads();
  *a = shared[0];
  *b = shared[kWarp];
  __syncthreads();  // shared is reused by the next reduction
}

// Blocks for a grid-stride loop over `items` blocks of work (one per channel or plane).
inline unsigned item_blocks(int64_t items) {
  return static_cast<unsigned>(items < (int64_t(1) << 20) ? (items < 1 ? 1 : items)
                                                          : (int64_t(1) << 20));
}

}  // namespace cuda
}  // namespace ortmodule
