// CUDA twins of ReduceProd, ReduceL1, ReduceL2, ReduceLogSumExp and ReduceProdGrad, with the
// CPU kernels' per-element math (kernels/math/reduce.h) and accumulators (double; 64-bit
// integers for the integer product).
//
// x: in_shape -> y: keep_shape (the reduced dims set to 1), outputs enumerated row-major over
// the kept dims (Dims `kept`), the elements of one reduction over the reduced dims (Dims
// `reduced`), as reduce_axes.cu. Many short reductions: one thread per output; few or long
// ones: one block per output, combined by block_reduce. Both are deterministic.
#include <cstdint>
#include <limits>

#include "kernels/cuda/block_reduce.cuh"
#include "kernels/math/reduce.h"
#include "ops/op_utils.h"

namespace ortmodule {

namespace {

using cuda::Dims;
using math::Accumulation;

bool per_block(int64_t out_n, int64_t reduced_n) {
  return reduced_n > 1 && (reduced_n >= 256 || out_n <= 1024);
}

// The start of LogSumExp's running maximum, -inf (made on the host: numeric_limits is
// host code).
template <typename A>
A lowest() {
  return std::numeric_limits<A>::has_infinity ? -std::numeric_limits<A>::infinity()
                                              : std::numeric_limits<A>::lowest();
}

struct MaxUpdate {
  template <typename A>
  __device__ A operator()(A a, A b) const {
    return math::extreme_update(a, b, true);
  }
};

struct AccumulateCombine {
  Accumulation kind;
  template <typename A>
  __device__ A operator()(A a, A b) const {
    return math::accumulate_combine(kind, a, b);
  }
};

template <typename T>
__global__ void accumulate_per_thread(int64_t out_n, Dims kept, Dims reduced, int64_t reduced_n,
                                      const T* x, T* y, Accumulation kind,
                                      math::AccumulatorOf<T> low) {
  using A = math::AccumulatorOf<T>;
  const int64_t step = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t o = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; o < out_n;
       o += step) {
    const T* base = x + cuda::dims_offset(kept, o);
    A shift = A(0);
    if (kind == Accumulation::LogSumExp) {
      A m = low;
      for (int64_t j = 0; j < reduced_n; ++j)
        m = math::extreme_update(m, static_cast<A>(base[cuda::dims_offset(reduced, j)]), true);
      shift = math::logsumexp_shift(m);
    }
    A a = math::accumulation_identity<A>(kind);
    for (int64_t j = 0; j < reduced_n; ++j)
      a = math::accumulate(kind, a, static_cast<A>(base[cuda::dims_offset(reduced, j)]), shift);
    y[o] = static_cast<T>(math::accumulate_finish(kind, a, shift));
  }
}

template <typename T>
__global__ void __launch_bounds__(cuda::kRowThreads)
    accumulate_per_block(int64_t out_n, Dims kept, Dims reduced, int64_t reduced_n, const T* x,
                         T* y, Accumulation kind, math::AccumulatorOf<T> low) {
  using A = math::AccumulatorOf<T>;
  __shared__ A shared[cuda::kWarp];
  for (int64_t o = blockIdx.x; o < out_n; o += gridDim.x) {
    const T* base = x + cuda::dims_offset(kept, o);
    A shift = A(0);
    if (kind == Accumulation::LogSumExp) {
      A m = low;
      for (int64_t j = threadIdx.x; j < reduced_n; j += blockDim.x)
        m = math::extreme_update(m, static_cast<A>(base[cuda::dims_offset(reduced, j)]), true);
      shift = math::logsumexp_shift(cuda::block_reduce(m, MaxUpdate(), low, shared));
    }
    const A identity = math::accumulation_identity<A>(kind);
    A a = identity;
    for (int64_t j = threadIdx.x; j < reduced_n; j += blockDim.x)
      a = math::accumulate(kind, a, static_cast<A>(base[cuda::dims_offset(reduced, j)]), shift);
    a = cuda::block_reduce(a, AccumulateCombine{kind}, identity, shared);
    if (threadIdx.x == 0) y[o] = static_cast<T>(math::accumulate_finish(kind, a, shift));
  }
}

struct AxesReduction {
  Dims kept, reduced;
  int64_t out_n = 0, reduced_n = 1;
};

AxesReduction plan(OpContext& ctx, const Shape& in, const Shape& keep, const char* op) {
  AxesReduction p;
  if (!cuda::split_reduction(in, keep, &p.kept, &p.reduced))
    ctx.fail(cuda::rank_limit_message(in.size(), op));
  p.out_n = shape_numel(keep);
  for (int k = 0; k < p.reduced.rank; ++k) p.reduced_n *= p.reduced.size[k];
  return p;
}

template <typename T>
void launch_accumulate(const AxesReduction& p, const T* x, T* y, Accumulation kind, Device device,
                       const char* op) {
  if (p.out_n == 0) return;
  cudaStream_t stream = cuda::stream(device);
  if (per_block(p.out_n, p.reduced_n)) {
    accumulate_per_block<T><<<cuda::row_blocks(p.out_n), cuda::kRowThreads, 0, stream>>>(
        p.out_n, p.kept, p.reduced, p.reduced_n, x, y, kind, lowest<math::AccumulatorOf<T>>());
  } else {
    accumulate_per_thread<T><<<cuda::blocks_for(p.out_n), cuda::kThreads, 0, stream>>>(
        p.out_n, p.kept, p.reduced, p.reduced_n, x, y, kind, lowest<math::AccumulatorOf<T>>());
  }
  cuda::check_launch(op);
}

void run_accumulate(OpContext& ctx, Accumulation kind, const char* op) {
  const Tensor& x = ctx.in(0);
  int64_t count = 1;
  const Shape keep = reduce_keep_shape(ctx, x.shape(), 1, &count);
  const AxesReduction p = plan(ctx, x.shape(), keep, op);
  if (kind == Accumulation::Prod) {
    ORTM_DISPATCH_NUMERIC(x.dtype(), ctx,
                          launch_accumulate(p, x.data<scalar_t>(), ctx.out(0).data<scalar_t>(),
                                            kind, x.device(), op));
  } else {
    ORTM_DISPATCH_FLOAT(x.dtype(), ctx,
                        launch_accumulate(p, x.data<scalar_t>(), ctx.out(0).data<scalar_t>(), kind,
                                          x.device(), op));
  }
}

// ---- ReduceProdGrad(dY, X, Y[, axes]): math::prod_grad over each slice ----

template <typename T>
__global__ void prod_grad_per_thread(int64_t out_n, Dims kept, Dims reduced, int64_t reduced_n,
                                     const T* x, const T* y, const T* dy, T* dx) {
  const int64_t step = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t o = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; o < out_n;
       o += step) {
    const int64_t b = cuda::dims_offset(kept, o);
    long long zeros = 0;
    double nonzero_prod = 1.0;
    for (int64_t j = 0; j < reduced_n; ++j) {
      const T v = x[b + cuda::dims_offset(reduced, j)];
      if (v == T(0)) {
        ++zeros;
      } else {
        nonzero_prod *= static_cast<double>(v);
      }
    }
    const T others = static_cast<T>(nonzero_prod);
    for (int64_t j = 0; j < reduced_n; ++j) {
      const int64_t i = b + cuda::dims_offset(reduced, j);
      dx[i] = math::prod_grad(x[i], y[o], dy[o], zeros, others);
    }
  }
}

template <typename T>
__global__ void __launch_bounds__(cuda::kRowThreads)
    prod_grad_per_block(int64_t out_n, Dims kept, Dims reduced, int64_t reduced_n, const T* x,
                        const T* y, const T* dy, T* dx) {
  __shared__ long long s_zeros[cuda::kWarp];
  __shared__ double s_prod[cuda::kWarp];
  for (int64_t o = blockIdx.x; o < out_n; o += gridDim.x) {
    const int64_t b = cuda::dims_offset(kept, o);
    long long zeros = 0;
    double nonzero_prod = 1.0;
    for (int64_t j = threadIdx.x; j < reduced_n; j += blockDim.x) {
      const T v = x[b + cuda::dims_offset(reduced, j)];
      if (v == T(0)) {
        ++zeros;
      } else {
        nonzero_prod *= static_cast<double>(v);
      }
    }
    zeros = cuda::block_reduce(zeros, cuda::SumOp(), 0LL, s_zeros);
    nonzero_prod =
        cuda::block_reduce(nonzero_prod, AccumulateCombine{Accumulation::Prod}, 1.0, s_prod);
    const T others = static_cast<T>(nonzero_prod);
    for (int64_t j = threadIdx.x; j < reduced_n; j += blockDim.x) {
      const int64_t i = b + cuda::dims_offset(reduced, j);
      dx[i] = math::prod_grad(x[i], y[o], dy[o], zeros, others);
    }
  }
}

template <typename T>
void launch_prod_grad(OpContext& ctx, const AxesReduction& p) {
  if (p.out_n == 0 || p.reduced_n == 0) return;
  const T* x = ctx.in(1).data<T>();
  const T* y = ctx.in(2).data<T>();
  const T* dy = ctx.in(0).data<T>();
  T* dx = ctx.out(0).data<T>();
  cudaStream_t stream = cuda::stream(ctx.out(0).device());
  if (per_block(p.out_n, p.reduced_n)) {
    prod_grad_per_block<T><<<cuda::row_blocks(p.out_n), cuda::kRowThreads, 0, stream>>>(
        p.out_n, p.kept, p.reduced, p.reduced_n, x, y, dy, dx);
  } else {
    prod_grad_per_thread<T><<<cuda::blocks_for(p.out_n), cuda::kThreads, 0, stream>>>(
        p.out_n, p.kept, p.reduced, p.reduced_n, x, y, dy, dx);
  }
  cuda::check_launch("ReduceProdGrad");
}

}  // namespace

void cuda_reduce_prod(OpContext& ctx) { run_accumulate(ctx, Accumulation::Prod, "ReduceProd"); }
void cuda_reduce_l1(OpContext& ctx) { run_accumulate(ctx, Accumulation::L1, "ReduceL1"); }
void cuda_reduce_l2(OpContext& ctx) { run_accumulate(ctx, Accumulation::L2, "ReduceL2"); }
void cuda_reduce_log_sum_exp(OpContext& ctx) {
  run_accumulate(ctx, Accumulation::LogSumExp, "ReduceLogSumExp");
}

void cuda_reduce_prod_grad(OpContext& ctx) {
  const Tensor& x = ctx.in(1);
  int64_t count = 1;
  const Shape keep = reduce_keep_shape(ctx, x.shape(), 3, &count);
  if (ctx.in(0).numel() != shape_numel(keep) || ctx.in(2).numel() != ctx.in(0).numel()) {
    ctx.fail("gradient " + shape_str(ctx.in(0).shape()) + " and result " +
             shape_str(ctx.in(2).shape()) + " do not match the reduction of " +
             shape_str(x.shape()));
  }
  const AxesReduction p = plan(ctx, x.shape(), keep, "ReduceProdGrad");
  ORTM_DISPATCH_FLOAT(x.dtype(), ctx, launch_prod_grad<scalar_t>(ctx, p));
}

}  // namespace ortmodule
