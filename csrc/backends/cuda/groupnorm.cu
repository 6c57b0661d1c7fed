// CUDA twins of InstanceNormalization, ai.ortmodule GroupNorm and GroupNormGrad over
// [N, C, S]: one block per (n, group) for the statistics, Y and dX (block sums in double with
// channel_reduce.cuh's fixed tree), one block per channel for dScale and dBias.
#include <cstdint>

#include "kernels/cuda/channel_reduce.cuh"
#include "kernels/cuda/cuda_common.h"
#include "kernels/math/groupnorm.h"
#include "ops/groupnorm_dims.h"
#include "ops/op_utils.h"

namespace ortmodule {

namespace {

// x, y: [N * G, M] (M = C / G * S) -> y, mean, rstd (nullable): [N * G].
template <typename T>
__global__ void __launch_bounds__(cuda::kReduceThreads)
    groupnorm_kernel(GroupNormDims d, double eps, const T* x, const T* scale, const T* bias, T* y,
                     T* mean, T* rstd) {
  __shared__ double shared[2 * cuda::kWarp];
  const int64_t Cg = d.C / d.G, M = Cg * d.S;
  for (int64_t group = blockIdx.x; group < d.N * d.G; group += gridDim.x) {
    const T* xg = x + group * M;
    double sum = 0, unused = 0;
    for (int64_t i = threadIdx.x; i < M; i += blockDim.x) sum += static_cast<double>(xg[i]);
    cuda::block_sum2(&sum, &unused, shared);
    const double mu = M > 0 ? sum / static_cast<double>(M) : 0.0;
    double sq = 0;
    unused = 0;
    for (int64_t i = threadIdx.x; i < M; i += blockDim.x) {
      const double c = static_cast<double>(xg[i]) - mu;
      sq += c * c;
    }
    cuda::block_sum2(&sq, &unused, shared);
    const double r = 1.0 / sqrt((M > 0 ? sq / static_cast<double>(M) : 0.0) + eps);
    if (threadIdx.x == 0) {
      if (mean != nullptr) mean[group] = static_cast<T>(mu);
      if (rstd != nullptr) rstd[group] = static_cast<T>(r);
    }
    const int64_t c0 = (group % d.G) * Cg;
    for (int64_t i = threadIdx.x; i < M; i += blockDim.x) {
      const int64_t c = c0 + i / d.S;
      y[group * M + i] =
          static_cast<T>((static_cast<double>(xg[i]) - mu) * r * static_cast<double>(scale[c]) +
                         static_cast<double>(bias[c]));
    }
  }
}

// dy, x: [N * G, M] -> dx.
template <typename T>
__global__ void __launch_bounds__(cuda::kReduceThreads)
    groupnorm_dx_kernel(GroupNormDims d, const T* dy, const T* x, const T* scale, const T* mean,
                        const T* rstd, T* dx) {
  __shared__ double shared[2 * cuda::kWarp];
  const int64_t Cg = d.C / d.G, M = Cg * d.S;
  for (int64_t group = blockIdx.x; group < d.N * d.G; group += gridDim.x) {
    const double mu = static_cast<double>(mean[group]), r = static_cast<double>(rstd[group]);
    const int64_t c0 = (group % d.G) * Cg, base = group * M;
    double sum_dyw = 0, sum_dyw_xhat = 0;
    for (int64_t i = threadIdx.x; i < M; i += blockDim.x) {
      const double dyw =
          static_cast<double>(dy[base + i]) * static_cast<double>(scale[c0 + i / d.S]);
      sum_dyw += dyw;
      sum_dyw_xhat += dyw * (static_cast<double>(x[base + i]) - mu) * r;
    }
    cuda::block_sum2(&sum_dyw, &sum_dyw_xhat, shared);
    for (int64_t i = threadIdx.x; i < M; i += blockDim.x) {
      const double xhat = (static_cast<double>(x[base + i]) - mu) * r;
      const double dyw =
          static_cast<double>(dy[base + i]) * static_cast<double>(scale[c0 + i / d.S]);
      dx[base + i] =
          static_cast<T>(groupnorm_dx(dyw, xhat, r, sum_dyw, sum_dyw_xhat, static_cast<double>(M)));
    }
  }
}

// dy, x: [N, C, S] -> dscale, dbias (nullable): [C].
template <typename T>
__global__ void __launch_bounds__(cuda::kReduceThreads)
    groupnorm_dparams_kernel(GroupNormDims d, const T* dy, const T* x, const T* mean, const T* rstd,
                             T* dscale, T* dbias) {
  __shared__ double shared[2 * cuda::kWarp];
  const int64_t Cg = d.C / d.G;
  for (int64_t c = blockIdx.x; c < d.C; c += gridDim.x) {
    double ds = 0, db = 0;
    for (int64_t j = threadIdx.x; j < d.N * d.S; j += blockDim.x) {
      const int64_t n = j / d.S, at = (n * d.C + c) * d.S + j % d.S;
      const int64_t group = n * d.G + c / Cg;
      const double g = static_cast<double>(dy[at]);
      ds += g * (static_cast<double>(x[at]) - static_cast<double>(mean[group])) *
            static_cast<double>(rstd[group]);
      db += g;
    }
    cuda::block_sum2(&ds, &db, shared);
    if (threadIdx.x == 0) {
      if (dscale != nullptr) dscale[c] = static_cast<T>(ds);
      if (dbias != nullptr) dbias[c] = static_cast<T>(db);
    }
  }
}

template <typename T>
void launch_groupnorm(OpContext& ctx) {
  const GroupNormDims d = groupnorm_dims(ctx, ctx.in(0).shape(), 1);
  if (ctx.out(0).numel() == 0 && !ctx.has_output(1)) return;
  if (d.N * d.G == 0) return;
  const double eps = ctx.node.attr_float("epsilon", 1e-5f);
  auto out = [&](size_t i) { return ctx.has_output(i) ? ctx.out(i).data<T>() : nullptr; };
  groupnorm_kernel<T><<<cuda::item_blocks(d.N * d.G), cuda::kReduceThreads, 0,
                        cuda::stream(ctx.out(0).device())>>>(
      d, eps, ctx.in(0).data<T>(), ctx.in(1).data<T>(), ctx.in(2).data<T>(), ctx.out(0).data<T>(),
      out(1), out(2));
  cuda::check_launch(ctx.node.op_type.c_str());
}

template <typename T>
void launch_groupnorm_grad(OpContext& ctx) {
  const GroupNormDims d = groupnorm_grad_dims(ctx);
  auto in = [&](size_t i) { return ctx.in(i).data<T>(); };
  auto out = [&](size_t i) { return ctx.has_output(i) ? ctx.out(i).data<T>() : nullptr; };
  const Tensor& dy = ctx.in(0);
  cudaStream_t stream = cuda::stream(dy.device());
  if (out(0) != nullptr && d.N * d.G > 0) {
    groupnorm_dx_kernel<T><<<cuda::item_blocks(d.N * d.G), cuda::kReduceThreads, 0, stream>>>(
        d, in(0), in(1), in(2), in(3), in(4), out(0));
    cuda::check_launch("GroupNormGrad");
  }
  if ((out(1) != nullptr || out(2) != nullptr) && d.C > 0) {
    groupnorm_dparams_kernel<T><<<cuda::item_blocks(d.C), cuda::kReduceThreads, 0, stream>>>(
        d, in(0), in(1), in(3), in(4), out(1), out(2));
    cuda::check_launch("GroupNormGrad");
  }
}

}  // namespace

void cuda_groupnorm(OpContext& ctx) {
  ORTM_DISPATCH_FLOAT(ctx.in(0).dtype(), ctx, launch_groupnorm<scalar_t>(ctx));
}

void cuda_groupnorm_grad(OpContext& ctx) {
  ORTM_DISPATCH_FLOAT(ctx.in(0).dtype(), ctx, launch_groupnorm_grad<scalar_t>(ctx));
}

}  // namespace ortmodule
