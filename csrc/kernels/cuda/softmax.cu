// CUDA twins of Softmax, LogSoftmax and their gradients (SoftmaxGrad(_13),
// LogSoftmaxGrad(_13)), over the [outer, dim, inner] layout the CPU kernels use.
//
// inner == 1 (the softmax axis is the last, or rows before opset 13): one block per row,
// max and sum by warp shuffles and a shared-memory step across warps. inner > 1: one thread
// per (outer, inner) column, walking the axis with stride `inner` (reads of consecutive
// threads are consecutive). The gradient formulas are kernels/math/softmax.h, as on the CPU.
#include <cmath>
#include <cstdint>

#include "kernels/cuda/cuda_common.h"
#include "kernels/math/softmax.h"
#include "ops/op_utils.h"

namespace ortmodule {

namespace {

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
// the block must call it (it synchronizes).
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

// float accumulates in float, double in double.
template <typename T>
__global__ void __launch_bounds__(kRowThreads)
    softmax_rows(int64_t outer, int64_t dim, const T* x, T* y, bool log) {
  __shared__ T shared[kWarp];
  for (int64_t row = blockIdx.x; row < outer; row += gridDim.x) {
    const T* xr = x + row * dim;
    T* yr = y + row * dim;
    T m = -INFINITY;
    for (int64_t k = threadIdx.x; k < dim; k += blockDim.x) m = MaxOp()(m, xr[k]);
    m = block_reduce(m, MaxOp(), T(-INFINITY), shared);
    T s = 0;
    for (int64_t k = threadIdx.x; k < dim; k += blockDim.x) s += std::exp(xr[k] - m);
    s = block_reduce(s, SumOp(), T(0), shared);
    if (log) {
      const T log_sum = std::log(s);
      for (int64_t k = threadIdx.x; k < dim; k += blockDim.x) yr[k] = (xr[k] - m) - log_sum;
    } else {
      const T inv_sum = T(1) / s;
      for (int64_t k = threadIdx.x; k < dim; k += blockDim.x) yr[k] = std::exp(xr[k] - m) * inv_sum;
    }
  }
}

template <typename T>
__global__ void softmax_columns(int64_t outer, int64_t dim, int64_t inner, const T* x, T* y,
                                bool log) {
  const int64_t columns = outer * inner;
  const int64_t step = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < columns;
       c += step) {
    const int64_t base = (c / inner) * dim * inner + c % inner;
    T m = -INFINITY;
    for (int64_t d = 0; d < dim; ++d) m = MaxOp()(m, x[base + d * inner]);
    T s = 0;
    for (int64_t d = 0; d < dim; ++d) s += std::exp(x[base + d * inner] - m);
    const T log_sum = std::log(s), inv_sum = T(1) / s;
    for (int64_t d = 0; d < dim; ++d) {
      const T v = x[base + d * inner] - m;
      y[base + d * inner] = log ? v - log_sum : std::exp(v) * inv_sum;
    }
  }
}

// s = sum(dy * y) for softmax, sum(dy) for log-softmax; dx from kernels/math/softmax.h.
template <typename T>
__device__ T grad_term(T dy, T y, bool log) {
  return log ? dy : dy * y;
}
template <typename T>
__device__ T grad_value(T dy, T y, T s, bool log) {
  return log ? log_softmax_grad(dy, y, s) : softmax_grad(dy, y, s);
}

template <typename T>
__global__ void __launch_bounds__(kRowThreads)
    softmax_grad_rows(int64_t outer, int64_t dim, const T* dy, const T* y, T* dx, bool log) {
  __shared__ T shared[kWarp];
  for (int64_t row = blockIdx.x; row < outer; row += gridDim.x) {
    const int64_t off = row * dim;
    T s = 0;
    for (int64_t k = threadIdx.x; k < dim; k += blockDim.x)
      s += grad_term(dy[off + k], y[off + k], log);
    s = block_reduce(s, SumOp(), T(0), shared);
    for (int64_t k = threadIdx.x; k < dim; k += blockDim.x)
      dx[off + k] = grad_value(dy[off + k], y[off + k], s, log);
  }
}

template <typename T>
__global__ void softmax_grad_columns(int64_t outer, int64_t dim, int64_t inner, const T* dy,
                                     const T* y, T* dx, bool log) {
  const int64_t columns = outer * inner;
  const int64_t step = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < columns;
       c += step) {
    const int64_t base = (c / inner) * dim * inner + c % inner;
    T s = 0;
    for (int64_t d = 0; d < dim; ++d)
      s += grad_term(dy[base + d * inner], y[base + d * inner], log);
    for (int64_t d = 0; d < dim; ++d) {
      const int64_t i = base + d * inner;
      dx[i] = grad_value(dy[i], y[i], s, log);
    }
  }
}

// Row blocks for a grid-stride loop over `outer` rows.
unsigned row_blocks(int64_t outer) {
  return static_cast<unsigned>(std::min<int64_t>(outer, int64_t(1) << 20));
}

template <typename T>
void launch_softmax(OpContext& ctx, bool log) {
  const Tensor& x = ctx.in(0);
  int64_t outer, dim, inner;
  softmax_layout(ctx, x.shape(), &outer, &dim, &inner);
  if (outer == 0 || dim == 0 || inner == 0) return;
  cudaStream_t stream = cuda::stream(x.device());
  T* y = ctx.out(0).data<T>();
  if (inner == 1) {
    softmax_rows<T><<<row_blocks(outer), kRowThreads, 0, stream>>>(outer, dim, x.data<T>(), y, log);
  } else {
    softmax_columns<T><<<cuda::blocks_for(outer * inner), cuda::kThreads, 0, stream>>>(
        outer, dim, inner, x.data<T>(), y, log);
  }
  cuda::check_launch(log ? "LogSoftmax" : "Softmax");
}

template <typename T>
void launch_softmax_grad(OpContext& ctx, bool log) {
  const Tensor& dy = ctx.in(0);
  const Tensor& y = ctx.in(1);
  int64_t outer, dim, inner;
  softmax_layout(ctx, y.shape(), &outer, &dim, &inner);
  if (outer == 0 || dim == 0 || inner == 0) return;
  cudaStream_t stream = cuda::stream(y.device());
  T* dx = ctx.out(0).data<T>();
  if (inner == 1) {
    softmax_grad_rows<T><<<row_blocks(outer), kRowThreads, 0, stream>>>(outer, dim, dy.data<T>(),
                                                                        y.data<T>(), dx, log);
  } else {
    softmax_grad_columns<T><<<cuda::blocks_for(outer * inner), cuda::kThreads, 0, stream>>>(
        outer, dim, inner, dy.data<T>(), y.data<T>(), dx, log);
  }
  cuda::check_launch(log ? "LogSoftmaxGrad" : "SoftmaxGrad");
}

void run_softmax(OpContext& ctx, bool log) {
  ORTM_DISPATCH_FLOAT(ctx.in(0).dtype(), ctx, launch_softmax<scalar_t>(ctx, log));
}

void run_softmax_grad(OpContext& ctx, bool log) {
  expect_same_dtype(ctx, 1);
  if (ctx.in(0).shape() != ctx.in(1).shape()) {
    ctx.fail("input 0 (dY) has shape " + shape_str(ctx.in(0).shape()) + ", input 1 (Y) has " +
             shape_str(ctx.in(1).shape()));
  }
  ORTM_DISPATCH_FLOAT(ctx.in(0).dtype(), ctx, launch_softmax_grad<scalar_t>(ctx, log));
}

}  // namespace

void cuda_softmax(OpContext& ctx) { run_softmax(ctx, false); }
void cuda_log_softmax(OpContext& ctx) { run_softmax(ctx, true); }
void cuda_softmax_grad(OpContext& ctx) { run_softmax_grad(ctx, false); }
void cuda_log_softmax_grad(OpContext& ctx) { run_softmax_grad(ctx, true); }

}  // namespace ortmodule
