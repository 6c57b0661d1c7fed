// CUDA twins of ReduceSum, ReduceMean, ReduceMax, ReduceMin (axes from the attribute or a
// host input; keepdims, noop_with_empty_axes), their gradients ReduceGrad and
// ReduceExtremeGrad, and ArgMax / ArgMin (select_last_index).
//
// x: in_shape -> y: keep_shape (in_shape with the reduced dims set to 1; keepdims only names
// the output's shape). Outputs are enumerated row-major over the kept dims (Dims `kept`), the
// elements of one reduction over the reduced dims (Dims `reduced`), as the CPU kernels do.
// Two launch shapes, both deterministic (no atomics; a fixed combination order):
//   many short reductions: one thread per output, walking its elements in order;
//   few or long reductions: one block per output, threads striding over its elements and a
//   block_reduce (warp shuffles) combining them.
// Sums accumulate in double for floating types (as the CPU's sum_to_shape) and in 64-bit
// integers for integer types (the same result modulo the type's width as the CPU's wrap).
// The NaN and tie rules of the extremes are kernels/math/reduce.h's, shared with the CPU.
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>

#include "kernels/cuda/block_reduce.cuh"
#include "kernels/math/reduce.h"
#include "ops/op_utils.h"

namespace ortmodule {

namespace {

using cuda::Dims;

// Wider accumulators: shuffles exist for 32- and 64-bit types only.
template <typename T>
using SumAcc =
    std::conditional_t<std::is_floating_point<T>::value, double,
                       std::conditional_t<std::is_signed<T>::value, long long, unsigned long long>>;
template <typename T>
using ExtremeAcc =
    std::conditional_t<(sizeof(T) < 4), std::conditional_t<std::is_signed<T>::value, int, unsigned>,
                       T>;

template <typename T>
struct SumReducer {
  using Acc = SumAcc<T>;
  bool mean;
  int64_t count;  // elements per output
  Acc identity;
  __device__ Acc add(Acc a, T v) const { return a + static_cast<Acc>(v); }
  __device__ Acc combine(Acc a, Acc b) const { return a + b; }
  // As the CPU: the sum in T, then the mean in double (integer means truncate; the integer
  // mean of no elements is 0, the float one 0 / 0 = NaN).
  __device__ T finish(Acc a) const {
    const T s = static_cast<T>(a);
    if (!mean || count == 1) return s;
    if (count == 0 && !std::is_floating_point<T>::value) return T(0);
    return static_cast<T>(static_cast<double>(s) / static_cast<double>(count));
  }
};

template <typename T>
struct ExtremeReducer {
  using Acc = ExtremeAcc<T>;
  bool is_max;
  bool is_bool;  // max is any, min is all: the uint8 extreme becomes 0 or 1
  Acc identity;  // -inf / +inf, or the type's lowest / highest: an empty reduction's result
  __device__ Acc add(Acc a, T v) const {
    return math::extreme_update(a, static_cast<Acc>(v), is_max);
  }
  __device__ Acc combine(Acc a, Acc b) const { return math::extreme_update(a, b, is_max); }
  __device__ T finish(Acc a) const {
    const T v = static_cast<T>(a);
    return is_bool ? static_cast<T>(v != T(0)) : v;
  }
};

template <typename R>
struct Combine {
  R r;
  template <typename A>
  __device__ A operator()(A a, A b) const {
    return r.combine(a, b);
  }
};

template <typename T, typename R>
__global__ void reduce_per_thread(int64_t out_n, Dims kept, Dims reduced, int64_t reduced_n,
                                  const T* x, T* y, R r) {
  const int64_t step = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t o = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; o < out_n;
       o += step) {
    const T* base = x + cuda::dims_offset(kept, o);
    typename R::Acc a = r.identity;
    for (int64_t j = 0; j < reduced_n; ++j) a = r.add(a, base[cuda::dims_offset(reduced, j)]);
    y[o] = r.finish(a);
  }
}

template <typename T, typename R>
__global__ void __launch_bounds__(cuda::kRowThreads)
    reduce_per_block(int64_t out_n, Dims kept, Dims reduced, int64_t reduced_n, const T* x, T* y,
                     R r) {
  __shared__ typename R::Acc shared[cuda::kWarp];
  for (int64_t o = blockIdx.x; o < out_n; o += gridDim.x) {
    const T* base = x + cuda::dims_offset(kept, o);
    typename R::Acc a = r.identity;
    for (int64_t j = threadIdx.x; j < reduced_n; j += blockDim.x)
      a = r.add(a, base[cuda::dims_offset(reduced, j)]);
    a = cuda::block_reduce(a, Combine<R>{r}, r.identity, shared);
    if (threadIdx.x == 0) y[o] = r.finish(a);
  }
}

// One block per output when each reduction is long enough to occupy one, or when there are
// too few outputs to occupy the device with a thread each.
bool per_block(int64_t out_n, int64_t reduced_n) {
  return reduced_n > 1 && (reduced_n >= 256 || out_n <= 1024);
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

template <typename T, typename R>
void launch_reduce(const AxesReduction& p, const T* x, T* y, const R& r, Device device,
                   const char* op) {
  if (p.out_n == 0) return;
  cudaStream_t stream = cuda::stream(device);
  if (per_block(p.out_n, p.reduced_n)) {
    reduce_per_block<T, R><<<cuda::row_blocks(p.out_n), cuda::kRowThreads, 0, stream>>>(
        p.out_n, p.kept, p.reduced, p.reduced_n, x, y, r);
  } else {
    reduce_per_thread<T, R><<<cuda::blocks_for(p.out_n), cuda::kThreads, 0, stream>>>(
        p.out_n, p.kept, p.reduced, p.reduced_n, x, y, r);
  }
  cuda::check_launch(op);
}

void run_reduce_sum(OpContext& ctx, bool mean) {
  const Tensor& x = ctx.in(0);
  int64_t count = 1;
  const Shape keep = reduce_keep_shape(ctx, x.shape(), 1, &count);
  const char* op = mean ? "ReduceMean" : "ReduceSum";
  const AxesReduction p = plan(ctx, x.shape(), keep, op);
  ORTM_DISPATCH_NUMERIC(x.dtype(), ctx, {
    const SumReducer<scalar_t> r{mean, count, 0};
    launch_reduce(p, x.data<scalar_t>(), ctx.out(0).data<scalar_t>(), r, x.device(), op);
  });
}

template <typename T>
ExtremeReducer<T> extreme_reducer(bool is_max, bool is_bool) {
  using Acc = ExtremeAcc<T>;
  using L = std::numeric_limits<T>;
  Acc identity;
  if (L::has_infinity) {
    identity = static_cast<Acc>(is_max ? -L::infinity() : L::infinity());
  } else {
    identity = static_cast<Acc>(is_max ? L::lowest() : L::max());
  }
  return ExtremeReducer<T>{is_max, is_bool, identity};
}

void run_reduce_extreme(OpContext& ctx, bool is_max) {
  const Tensor& x = ctx.in(0);
  int64_t count = 1;
  const Shape keep = reduce_keep_shape(ctx, x.shape(), 1, &count);
  const char* op = is_max ? "ReduceMax" : "ReduceMin";
  const AxesReduction p = plan(ctx, x.shape(), keep, op);
  const bool is_bool = x.dtype() == DType::Bool;
  ORTM_DISPATCH_ALL(x.dtype(), ctx,
                    launch_reduce(p, x.data<scalar_t>(), ctx.out(0).data<scalar_t>(),
                                  extreme_reducer<scalar_t>(is_max, is_bool), x.device(), op));
}

// ---- ReduceGrad(dY, x_shape[, axes]): dx = dy broadcast back, times 1/count for the mean ----

// dx: x_shape; `to_dy` enumerates x_shape with dy's strides (0 along the reduced dims).
template <typename T>
__global__ void reduce_grad_kernel(int64_t n, Dims to_dy, T scale, const T* dy, T* dx) {
  const int64_t step = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step)
    dx[i] = dy[cuda::dims_offset(to_dy, i)] * scale;
}

template <typename T>
void launch_reduce_grad(OpContext& ctx, const Shape& x_shape, const Shape& keep, int64_t count) {
  if (x_shape.size() > static_cast<size_t>(cuda::kMaxRank))
    ctx.fail(cuda::rank_limit_message(x_shape.size(), "ReduceGrad"));
  Dims to_dy;
  to_dy.rank = static_cast<int>(x_shape.size());
  int64_t stride = 1;
  for (size_t k = x_shape.size(); k-- > 0;) {
    to_dy.size[k] = x_shape[k];
    to_dy.stride[k] = keep[k] == x_shape[k] ? stride : 0;
    stride *= keep[k];
  }
  const bool mean = ctx.node.attr_int("mean", 0) != 0;
  const T scale = mean ? static_cast<T>(1.0 / static_cast<double>(count)) : T(1);
  Tensor& dx = ctx.out(0);
  const int64_t n = dx.numel();
  if (n == 0) return;
  reduce_grad_kernel<T><<<cuda::blocks_for(n), cuda::kThreads, 0, cuda::stream(dx.device())>>>(
      n, to_dy, scale, ctx.in(0).data<T>(), dx.data<T>());
  cuda::check_launch("ReduceGrad");
}

// ---- ReduceExtremeGrad(dY, X, Y[, axes]): dY split evenly among the tied extremes ----

template <typename T>
__global__ void extreme_grad_per_thread(int64_t out_n, Dims kept, Dims reduced, int64_t reduced_n,
                                        const T* x, const T* y, const T* dy, T* dx) {
  const int64_t step = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t o = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; o < out_n;
       o += step) {
    const int64_t b = cuda::dims_offset(kept, o);
    long long ties = 0;
    for (int64_t j = 0; j < reduced_n; ++j) ties += x[b + cuda::dims_offset(reduced, j)] == y[o];
    const T share = ties ? dy[o] / static_cast<T>(ties) : T(0);
    for (int64_t j = 0; j < reduced_n; ++j) {
      const int64_t i = b + cuda::dims_offset(reduced, j);
      dx[i] = x[i] == y[o] ? share : T(0);
    }
  }
}

template <typename T>
__global__ void __launch_bounds__(cuda::kRowThreads)
    extreme_grad_per_block(int64_t out_n, Dims kept, Dims reduced, int64_t reduced_n, const T* x,
                           const T* y, const T* dy, T* dx) {
  __shared__ long long shared[cuda::kWarp];
  for (int64_t o = blockIdx.x; o < out_n; o += gridDim.x) {
    const int64_t b = cuda::dims_offset(kept, o);
    const T yo = y[o];
    long long ties = 0;
    for (int64_t j = threadIdx.x; j < reduced_n; j += blockDim.x)
      ties += x[b + cuda::dims_offset(reduced, j)] == yo;
    ties = cuda::block_reduce(ties, cuda::SumOp(), 0LL, shared);
    const T share = ties ? dy[o] / static_cast<T>(ties) : T(0);
    for (int64_t j = threadIdx.x; j < reduced_n; j += blockDim.x) {
      const int64_t i = b + cuda::dims_offset(reduced, j);
      dx[i] = x[i] == yo ? share : T(0);
    }
  }
}

template <typename T>
void launch_extreme_grad(OpContext& ctx, const AxesReduction& p) {
  if (p.out_n == 0 || p.reduced_n == 0) return;
  const T* x = ctx.in(1).data<T>();
  const T* y = ctx.in(2).data<T>();
  const T* dy = ctx.in(0).data<T>();
  T* dx = ctx.out(0).data<T>();
  cudaStream_t stream = cuda::stream(ctx.out(0).device());
  if (per_block(p.out_n, p.reduced_n)) {
    extreme_grad_per_block<T><<<cuda::row_blocks(p.out_n), cuda::kRowThreads, 0, stream>>>(
        p.out_n, p.kept, p.reduced, p.reduced_n, x, y, dy, dx);
  } else {
    extreme_grad_per_thread<T><<<cuda::blocks_for(p.out_n), cuda::kThreads, 0, stream>>>(
        p.out_n, p.kept, p.reduced, p.reduced_n, x, y, dy, dx);
  }
  cuda::check_launch("ReduceExtremeGrad");
}

// ---- ArgMax / ArgMin: x [outer, dim, inner] -> y [outer, inner] int64 ----

// One thread per (outer, inner) column scanning the axis in order, as the CPU does.
// (inner == 1 with long rows: arg_extreme_rows below.)
template <typename T>
__global__ void arg_extreme_kernel(int64_t outer, int64_t dim, int64_t inner, const T* x,
                                   int64_t* y, bool is_max, bool select_last) {
  const int64_t columns = outer * inner;
  const int64_t step = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < columns;
       c += step) {
    const T* col = x + (c / inner) * dim * inner + c % inner;
    int64_t best = 0;
    for (int64_t j = 1; j < dim; ++j)
      if (math::arg_extreme_takes(col[j * inner], col[best * inner], is_max, select_last)) best = j;
    y[c] = best;
  }
}

// The winner of two scan candidates (value, index; index < 0: none) under the scan's rule:
// the later index wins when the scan would move to it (math::arg_extreme_takes). That rule
// is a total order with index tie-breaks, so candidates combine in any grouping.
template <typename V>
__device__ void arg_merge(V& v, int64_t& i, V ov, int64_t oi, bool is_max, bool select_last) {
  if (oi < 0 || oi == i) return;
  if (i < 0) {
    v = ov;
    i = oi;
    return;
  }
  const bool later = oi > i;
  const V lo = later ? v : ov, hi = later ? ov : v;
  const int64_t lo_i = later ? i : oi, hi_i = later ? oi : i;
  const bool take = math::arg_extreme_takes(hi, lo, is_max, select_last);
  v = take ? hi : lo;
  i = take ? hi_i : lo_i;
}

// inner == 1 with long or few rows: one block per row. Each thread scans its indices in
// increasing order, then the candidates merge by warp shuffles and across warps.
template <typename T>
__global__ void __launch_bounds__(cuda::kRowThreads)
    arg_extreme_rows(int64_t rows, int64_t dim, const T* x, int64_t* y, bool is_max,
                     bool select_last) {
  using V = ExtremeAcc<T>;
  __shared__ V s_val[cuda::kWarp];
  __shared__ int64_t s_idx[cuda::kWarp];
  const int lane = threadIdx.x % cuda::kWarp, warp = threadIdx.x / cuda::kWarp;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* xr = x + row * dim;
    V v = V();
    int64_t i = -1;
    for (int64_t j = threadIdx.x; j < dim; j += blockDim.x) {
      const V xj = static_cast<V>(xr[j]);
      if (i < 0 || math::arg_extreme_takes(xj, v, is_max, select_last)) {
        v = xj;
        i = j;
      }
    }
    for (int offset = cuda::kWarp / 2; offset > 0; offset /= 2) {
      const V ov = __shfl_down_sync(0xffffffffu, v, offset);
      const int64_t oi = __shfl_down_sync(0xffffffffu, i, offset);
      arg_merge(v, i, ov, oi, is_max, select_last);
    }
    if (lane == 0) {
      s_val[warp] = v;
      s_idx[warp] = i;
    }
    __syncthreads();
    if (warp == 0) {
      const bool present = lane < static_cast<int>(blockDim.x / cuda::kWarp);
      v = present ? s_val[lane] : V();
      i = present ? s_idx[lane] : -1;
      for (int offset = cuda::kWarp / 2; offset > 0; offset /= 2) {
        const V ov = __shfl_down_sync(0xffffffffu, v, offset);
        const int64_t oi = __shfl_down_sync(0xffffffffu, i, offset);
        arg_merge(v, i, ov, oi, is_max, select_last);
      }
      if (lane == 0) y[row] = i;
    }
    __syncthreads();  // s_val / s_idx are rewritten for the next row
  }
}

void run_arg_extreme(OpContext& ctx, bool is_max) {
  const Tensor& x = ctx.in(0);
  const size_t axis = static_cast<size_t>(
      normalize_axis(ctx, ctx.node.attr_int("axis", 0), static_cast<int64_t>(x.rank())));
  const bool last = ctx.node.attr_int("select_last_index", 0) != 0;
  const int64_t outer = dims_product(x.shape(), 0, axis);
  const int64_t inner = dims_product(x.shape(), axis + 1, x.rank());
  const int64_t dim = x.dim(axis);
  if (outer * inner == 0) return;
  int64_t* y = ctx.out(0).data<int64_t>();
  cudaStream_t stream = cuda::stream(x.device());
  if (inner == 1 && per_block(outer, dim)) {
    ORTM_DISPATCH_NUMERIC(x.dtype(), ctx, {
      arg_extreme_rows<scalar_t><<<cuda::row_blocks(outer), cuda::kRowThreads, 0, stream>>>(
          outer, dim, x.data<scalar_t>(), y, is_max, last);
    });
  } else {
    ORTM_DISPATCH_NUMERIC(x.dtype(), ctx, {
      arg_extreme_kernel<scalar_t><<<cuda::blocks_for(outer * inner), cuda::kThreads, 0, stream>>>(
          outer, dim, inner, x.data<scalar_t>(), y, is_max, last);
    });
  }
  cuda::check_launch(is_max ? "ArgMax" : "ArgMin");
}

}  // namespace

void cuda_reduce_sum(OpContext& ctx) { run_reduce_sum(ctx, false); }
void cuda_reduce_mean(OpContext& ctx) { run_reduce_sum(ctx, true); }
void cuda_reduce_max(OpContext& ctx) { run_reduce_extreme(ctx, true); }
void cuda_reduce_min(OpContext& ctx) { run_reduce_extreme(ctx, false); }

void cuda_reduce_grad(OpContext& ctx) {
  const Shape x_shape = ctx.in(1).to_int_vector();
  int64_t count = 1;
  const Shape keep = reduce_keep_shape(ctx, x_shape, 2, &count);
  ORTM_DISPATCH_FLOAT(ctx.in(0).dtype(), ctx,
                      launch_reduce_grad<scalar_t>(ctx, x_shape, keep, count));
}

void cuda_reduce_extreme_grad(OpContext& ctx) {
  const Tensor& x = ctx.in(1);
  int64_t count = 1;
  const Shape keep = reduce_keep_shape(ctx, x.shape(), 3, &count);
  if (ctx.in(0).numel() != shape_numel(keep) || ctx.in(2).numel() != ctx.in(0).numel()) {
    ctx.fail("gradient " + shape_str(ctx.in(0).shape()) + " and result " +
             shape_str(ctx.in(2).shape()) + " do not match the reduction of " +
             shape_str(x.shape()));
  }
  const AxesReduction p = plan(ctx, x.shape(), keep, "ReduceExtremeGrad");
  ORTM_DISPATCH_FLOAT(x.dtype(), ctx, launch_extreme_grad<scalar_t>(ctx, p));
}

void cuda_arg_max(OpContext& ctx) { run_arg_extreme(ctx, true); }
void cuda_arg_min(OpContext& ctx) { run_arg_extreme(ctx, false); }

}  // namespace ortmodule
