// Device helpers of the row and reduction kernels: block-wide reductions by warp shuffles,
// and the index arithmetic of a reduction over a set of axes. Device code: .cu files only.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cuda/cuda_common.h"

namespace ortmodule {
namespace cuda {

constexpr int kWarp = 32;
constexpr int kRowThreads = 256;  // a multiple of kWarp, at most kWarp * kWarp
static_assert(kRowThreads % kWarp == 0 && kRowThreads <= kWarp * kWarp, "block size");

struct MaxOp {
  template <typename A>
  __device__ A operator()(A a, A b) const {
    return b > a ? b : a;
  }
};
struct SumOp {
  template <typename A>
  __device__ A operator()(A a, A b) const {
    return a + b;
  }
};

// Reduces one value per thread over the whole block; every thread gets the result.
// `shared` holds kWarp values; `identity` fills the slots of absent warps. Every thread of
// the block must call it (it synchronizes); blockDim.x must be a multiple of kWarp. The
// combination order is fixed by the block size, so results are deterministic.
template <typename A, typename Op>
__device__ A block_reduce(A v, Op op, A identity, A* shared) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2)
    v = op(v, __shfl_down_sync(0xffffffffu, v, offset));
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < static_cast<int>(blockDim.x / kWarp) ? shared[lane] : identity;
    for (int offset = kWarp / 2; offset > 0; offset /= 2)
      v = op(v, __shfl_down_sync(0xffffffffu, v, offset));
    if (lane == 0) shared[0] = v;
  }
  __syncthreads();
  v = shared[0];
  __syncthreads();  // shared is reused by the next reduction
  return v;
}

// Row blocks for a grid-stride loop over `rows` rows (one block per row).
inline unsigned row_blocks(int64_t rows) {
  return static_cast<unsigned>(std::clamp<int64_t>(rows, 1, int64_t(1) << 20));
}

// A row-major index space of up to kMaxRank dims with a stride per dim (in elements) into
// the tensor it addresses (a stride may be 0: a broadcast dim).
struct Dims {
  int rank = 0;
  int64_t size[kMaxRank] = {};
  int64_t stride[kMaxRank] = {};
};

// Offset of index `i` of the space `d` spans.
__host__ __device__ inline int64_t dims_offset(const Dims& d, int64_t i) {
  int64_t off = 0;
  for (int k = d.rank - 1; k >= 0; --k) {
    off += (i % d.size[k]) * d.stride[k];
    i /= d.size[k];
  }
  return off;
}

// A reduction of a contiguous tensor of shape `in` to `keep` (same rank; the kept dims equal
// in's, the reduced ones 1) as two index spaces over the input: `kept` enumerates the
// outputs (row-major over keep, so output o starts at dims_offset(kept, o)) and `reduced` the
// elements that reduce into one output. Returns false when the rank exceeds kMaxRank.
inline bool split_reduction(const std::vector<int64_t>& in, const std::vector<int64_t>& keep,
                            Dims* kept, Dims* reduced) {
  if (in.size() > static_cast<size_t>(kMaxRank) || keep.size() > in.size()) return false;
  *kept = Dims();
  *reduced = Dims();
  int64_t stride = 1;
  const size_t lead = in.size() - keep.size();
  for (size_t k = in.size(); k-- > 0;) {
    const int64_t t = k >= lead ? keep[k - lead] : 1;
    Dims& d = (t == in[k]) ? *kept : *reduced;
    d.size[d.rank] = in[k];
    d.stride[d.rank] = stride;
    ++d.rank;
    stride *= in[k];
  }
  // Filled innermost first: reverse to row-major order.
  for (Dims* d : {kept, reduced}) {
    for (int a = 0, b = d->rank - 1; a < b; ++a, --b) {
      std::swap(d->size[a], d->size[b]);
      std::swap(d->stride[a], d->stride[b]);
    }
  }
  return true;
}

// "rank R is above the CUDA <op> kernel's limit of kMaxRank"
inline std::string rank_limit_message(size_t rank, const char* op) {
  return "rank " + std::to_string(rank) + " is above the CUDA " + op + " kernel's limit of " +
         std::to_string(kMaxRank) + " dims; run this model on the CPU";
}

}  // namespace cuda
}  // namespace ortmodule
