// CUDA twin of SumToShape (ai.ortmodule): a gradient summed down to the shape its operand
// had before broadcasting. One thread per output element adds the input elements that
// broadcast from it; consecutive threads read consecutive addresses of each reduced slice.
#include <cstdint>
#include <string>
#include <utility>

#include "kernels/cuda/cuda_common.h"
#include "ops/op_utils.h"

namespace ortmodule {

namespace {

using cuda::kMaxRank;

struct Dims {
  int rank = 0;
  int64_t size[kMaxRank] = {};
  int64_t stride[kMaxRank] = {};  // of the input, in elements
};

// Offset in the input of index `i` of the space `d` spans (row-major over d.size).
__device__ int64_t input_offset(const Dims& d, int64_t i) {
  int64_t off = 0;
  for (int k = d.rank - 1; k >= 0; --k) {
    off += (i % d.size[k]) * d.stride[k];
    i /= d.size[k];
  }
  return off;
}

template <typename T>
__global__ void sum_to_shape_kernel(int64_t out_n, Dims kept, Dims reduced, int64_t reduced_n,
                                    const T* x, T* y) {
  const int64_t step = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t o = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; o < out_n;
       o += step) {
    const int64_t base = input_offset(kept, o);
    T acc = 0;
    for (int64_t j = 0; j < reduced_n; ++j) acc += x[base + input_offset(reduced, j)];
    y[o] = acc;
  }
}

template <typename T>
void launch_sum_to_shape(OpContext& ctx, const Tensor& x, Tensor& y) {
  const Shape& in = x.shape();
  const Shape& out = y.shape();
  if (in.size() > static_cast<size_t>(kMaxRank)) {
    ctx.fail("rank " + std::to_string(in.size()) +
             " is above the CUDA SumToShape kernel's limit of " + std::to_string(kMaxRank));
  }
  // The output's dims right-aligned with the input's: a dim of 1 (or a missing one) where the
  // input's is not 1 is summed away, the others are kept.
  Dims kept, reduced;
  int64_t stride = 1, reduced_n = 1;
  for (size_t k = in.size(); k-- > 0;) {
    const size_t lead = in.size() - out.size();
    const int64_t t = k >= lead ? out[k - lead] : 1;
    Dims& d = (t == in[k]) ? kept : reduced;
    d.size[d.rank] = in[k];
    d.stride[d.rank] = stride;
    ++d.rank;
    if (t != in[k]) reduced_n *= in[k];
    stride *= in[k];
  }
  // Filled innermost first: reverse to row-major order.
  for (Dims* d : {&kept, &reduced}) {
    for (int a = 0, b = d->rank - 1; a < b; ++a, --b) {
      std::swap(d->size[a], d->size[b]);
      std::swap(d->stride[a], d->stride[b]);
    }
  }
  const int64_t out_n = y.numel();
  if (out_n == 0) return;
  sum_to_shape_kernel<T><<<cuda::blocks_for(out_n), cuda::kThreads, 0, cuda::stream(y.device())>>>(
      out_n, kept, reduced, reduced_n, x.data<T>(), y.data<T>());
  cuda::check_launch("SumToShape");
}

}  // namespace

void cuda_sum_to_shape(OpContext& ctx) {
  const Tensor& x = ctx.in(0);
  Tensor& y = ctx.out(0);
  if (y.raw() == x.raw()) return;  // nothing was broadcast: the output is a view
  ORTM_DISPATCH_FLOAT(x.dtype(), ctx, launch_sum_to_shape<scalar_t>(ctx, x, y));
}

}  // namespace ortmodule
