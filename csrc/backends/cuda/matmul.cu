// CUDA twins of MatMul, FusedMatMul and Gemm through cuBLAS (torch's handle on torch's
// stream). Row-major products are computed as their column-major transposes:
//   C[M,N] = op(A) op(B)  <=>  C^T[N,M] = op(B)^T op(A)^T,
// so B is cuBLAS's first operand and A its second, with the same transpose flags.
// float16 and bfloat16 products run on tensor cores (cublasGemmStridedBatchedEx, float32
// accumulation, each result rounded once); where a result is added to (Gemm's C) or summed
// further (FusedMatMulSumToShape), they accumulate into float32 and are rounded at the end.
#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>

#include "backends/cuda/cublas_gemm.h"
#include "backends/cuda/cuda_ops_internal.h"
#include "kernels/cuda/cuda_common.h"
#include "ops/op_utils.h"

namespace ortmodule {

namespace {

// cuBLAS takes int dims: larger ones are refused rather than truncated.
int as_int(const OpContext& ctx, int64_t v, const char* what) {
  if (v > INT32_MAX) {
    ctx.fail(std::string(what) + " " + std::to_string(v) +
             " is above cuBLAS's int limit in the CUDA MatMul kernel");
  }
  return static_cast<int>(v);
}

using cuda::blas_scalar_t;

// Row-major C[i] = alpha * op(A[i]) op(B[i]) + beta * C[i] for i < batch, A[i] = A + i * sa.
// C has the operands' type, or float32 for 16-bit operands.
template <typename T, typename Out = T>
void strided_product(OpContext& ctx, Device device, bool ta, bool tb, int64_t batch, int64_t M,
                     int64_t N, int64_t K, blas_scalar_t<T> alpha, const T* A, int64_t sa,
                     const T* B, int64_t sb, blas_scalar_t<T> beta, Out* C) {
  if (batch == 0 || M == 0 || N == 0) return;
  const int m = as_int(ctx, M, "M"), n = as_int(ctx, N, "N"), k = as_int(ctx, K, "K");
  // Leading dims are at least 1 even for an empty K (cuBLAS then computes C = beta * C).
  const int lda = std::max(1, ta ? m : k), ldb = std::max(1, tb ? k : n), ldc = std::max(1, n);
  cublasHandle_t handle = cuda::blas_handle(device);
  const cublasOperation_t op_b = tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                          op_a = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  if (batch == 1) {
    cuda::check_blas(
        cuda::gemm_one(handle, op_b, op_a, n, m, k, &alpha, B, ldb, A, lda, &beta, C, ldc),
        "MatMul (cublas<t>gemm)");
    return;
  }
  cuda::check_blas(
      cuda::gemm_strided(handle, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, n,
                         m, k, &alpha, B, ldb, sb, A, lda, sa, &beta, C, ldc, M * N,
                         as_int(ctx, batch, "batch")),
      "MatMul (cublas<t>gemmStridedBatched)");
}

// Batch dims that broadcast otherwise ([2, 1] against [3], [2, 1] against [1, 2]): one strided
// batch along the output's last batch dim (an operand's stride 0 where it broadcasts there)
// per index of the dims before it.
template <typename T, typename Out>
void broadcast_product(OpContext& ctx, Tensor& out, bool ta, bool tb, Shape a_batch, Shape b_batch,
                       int64_t M, int64_t N, int64_t K) {
  const size_t rank = std::max(a_batch.size(), b_batch.size());
  a_batch.insert(a_batch.begin(), rank - a_batch.size(), 1);
  b_batch.insert(b_batch.begin(), rank - b_batch.size(), 1);
  Shape out_batch(rank), a_stride(rank), b_stride(rank);
  int64_t a_step = M * K, b_step = K * N;
  for (size_t d = rank; d-- > 0;) {
    if (a_batch[d] != b_batch[d] && a_batch[d] != 1 && b_batch[d] != 1) {
      ctx.fail("batch dims " + shape_str(a_batch) + " and " + shape_str(b_batch) +
               " do not broadcast");
    }
    out_batch[d] = std::max(a_batch[d], b_batch[d]);
    a_stride[d] = a_batch[d] == 1 ? 0 : a_step;
    b_stride[d] = b_batch[d] == 1 ? 0 : b_step;
    a_step *= a_batch[d];
    b_step *= b_batch[d];
  }
  const int64_t inner = out_batch[rank - 1];
  const int64_t outer = dims_product(out_batch, 0, rank - 1);
  const auto alpha = static_cast<blas_scalar_t<T>>(ctx.node.attr_float("alpha", 1.0));
  const T* A = ctx.in(0).data<T>();
  const T* B = ctx.in(1).data<T>();
  for (int64_t o = 0; o < outer; ++o) {
    int64_t a_off = 0, b_off = 0;
    for (int64_t d = static_cast<int64_t>(rank) - 2, rest = o; d >= 0; --d) {
      const int64_t at = rest % out_batch[d];
      rest /= out_batch[d];
      a_off += at * a_stride[d];
      b_off += at * b_stride[d];
    }
    strided_product<T, Out>(ctx, out.device(), ta, tb, inner, M, N, K, alpha, A + a_off,
                            a_stride[rank - 1], B + b_off, b_stride[rank - 1], 0,
                            out.data<Out>() + o * inner * M * N);
  }
}

template <typename T, typename Out>
void run_fused_matmul(OpContext& ctx, Tensor& out) {
  Shape a = ctx.in(0).shape(), b = ctx.in(1).shape();
  const bool ta = ctx.node.attr_int("transA", 0), tb = ctx.node.attr_int("transB", 0);
  if (a.size() == 1) a = {1, a[0]};
  if (b.size() == 1) b = {b[0], 1};
  const Shape a_batch(a.begin(), a.end() - 2), b_batch(b.begin(), b.end() - 2);
  const int64_t M = ta ? a[a.size() - 1] : a[a.size() - 2];
  const int64_t K = ta ? a[a.size() - 2] : a[a.size() - 1];
  const int64_t N = tb ? b[b.size() - 2] : b[b.size() - 1];
  const int64_t na = dims_product(a_batch, 0, a_batch.size());
  const int64_t nb = dims_product(b_batch, 0, b_batch.size());
  // One strided batch: equal batch dims, or one operand without batch (a Linear's weight).
  int64_t batch = 0, sa = M * K, sb = K * N;
  if (a_batch == b_batch || (na == nb && (a_batch.empty() || b_batch.empty()))) {
    batch = std::max(na, nb);
    if (a_batch.empty()) sa = 0;
    if (b_batch.empty()) sb = 0;
  } else if (nb == 1 && !ta) {
    // One weight matrix for every batch of a (nn.Linear over [batch, seq, features]): a's
    // batches stacked are one [na * M, K] matrix, so one GEMM, as torch's Linear runs it.
    const auto alpha = static_cast<blas_scalar_t<T>>(ctx.node.attr_float("alpha", 1.0));
    strided_product<T, Out>(ctx, out.device(), ta, tb, 1, na * M, N, K, alpha, ctx.in(0).data<T>(),
                            0, ctx.in(1).data<T>(), 0, 0, out.data<Out>());
    return;
  } else if (nb == 1) {
    batch = na;
    sb = 0;
  } else if (na == 1) {
    batch = nb;
    sa = 0;
  } else {
    broadcast_product<T, Out>(ctx, out, ta, tb, a_batch, b_batch, M, N, K);
    return;
  }
  const auto alpha = static_cast<blas_scalar_t<T>>(ctx.node.attr_float("alpha", 1.0));
  strided_product<T, Out>(ctx, out.device(), ta, tb, batch, M, N, K, alpha, ctx.in(0).data<T>(), sa,
                          ctx.in(1).data<T>(), sb, 0, out.data<Out>());
}

// Matrix pointers of the three operands of a pointer-array batched GEMM.
struct PointerDesc {
  const char* base;
  int64_t heads, batch_stride, head_stride;  // in bytes
};

__global__ void fill_matrix_pointers(int64_t batch, PointerDesc a, PointerDesc b, PointerDesc y,
                                     const void** pa, const void** pb, void** py) {
  const int64_t step = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < batch;
       i += step) {
    auto at = [i](const PointerDesc& d) {
      return d.base + (i / d.heads) * d.batch_stride + (i % d.heads) * d.head_stride;
    };
    pa[i] = at(a);
    pb[i] = at(b);
    py[i] = const_cast<char*>(at(y));
  }
}

template <typename T>
void matrix_batched_product(OpContext& ctx, const GemmOperand& y, bool ta, bool tb, int64_t batch,
                            int64_t M, int64_t N, int64_t K, T alpha, const GemmOperand& a,
                            const GemmOperand& b) {
  if (batch == 0 || M == 0 || N == 0) return;
  const int m = as_int(ctx, M, "M"), n = as_int(ctx, N, "N"), k = as_int(ctx, K, "K");
  const Device device = y.t->device();
  Tensor pointers = Tensor::empty(DType::Int64, {3 * batch}, device);
  void** p = static_cast<void**>(pointers.raw());
  auto desc = [](const GemmOperand& o) {
    const int64_t size = static_cast<int64_t>(sizeof(T));
    return PointerDesc{static_cast<const char*>(o.t->raw()), o.heads, o.batch_stride * size,
                       o.head_stride * size};
  };
  cudaStream_t stream = cuda::stream(device);
  fill_matrix_pointers<<<cuda::blocks_for(batch), cuda::kThreads, 0, stream>>>(
      batch, desc(a), desc(b), desc(y), const_cast<const void**>(p),
      const_cast<const void**>(p + batch), p + 2 * batch);
  cuda::check_launch("MatMul (matrix pointers)");
  const T beta = 0;
  cuda::check_blas(
      cuda::gemm_batched(
          cuda::blas_handle(device), tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N,
          n, m, k, &alpha, reinterpret_cast<const T* const*>(p + batch),
          std::max(1, as_int(ctx, b.ld, "ld")), reinterpret_cast<const T* const*>(p),
          std::max(1, as_int(ctx, a.ld, "ld")), &beta, reinterpret_cast<T* const*>(p + 2 * batch),
          std::max(1, as_int(ctx, y.ld, "ld")), as_int(ctx, batch, "batch")),
      "MatMul (cublas<t>gemmBatched)");
}

// y[i, j] = beta * c[i or 0, j or 0]: Gemm's C broadcast to [M, N] ([], [N], [1, N], [M, 1]
// or [M, N]), computed in c's arithmetic type (float for 16-bit C) and stored as Y.
template <typename T, typename Y>
__global__ void fill_scaled(int64_t M, int64_t N, const T* c, int64_t c_rows, int64_t c_cols,
                            blas_scalar_t<T> beta, Y* y) {
  const int64_t step = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < M * N;
       i += step) {
    const int64_t r = c_rows == 1 ? 0 : i / N, col = c_cols == 1 ? 0 : i % N;
    y[i] = static_cast<Y>(beta * cuda::widen(c[r * c_cols + col]));
  }
}

template <typename T>
__global__ void round_float_kernel(int64_t n, const float* x, T* y) {
  const int64_t step = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step)
    y[i] = cuda::from_float<T>(x[i]);
}

template <typename T>
void round_float(const Tensor& x, Tensor& y) {
  const int64_t n = y.numel();
  if (n == 0) return;
  round_float_kernel<T><<<cuda::blocks_for(n), cuda::kThreads, 0, cuda::stream(y.device())>>>(
      n, x.data<float>(), y.data<T>());
  cuda::check_launch("rounding a float32 product to 16 bits");
}

template <typename T>
void run_gemm(OpContext& ctx) {
  const Tensor& a = ctx.in(0);
  const Tensor& b = ctx.in(1);
  Tensor& y = ctx.out(0);
  const bool ta = ctx.node.attr_int("transA", 0), tb = ctx.node.attr_int("transB", 0);
  const double alpha = ctx.node.attr_float("alpha", 1.0), beta = ctx.node.attr_float("beta", 1.0);
  const int64_t M = y.dim(0), N = y.dim(1), K = ta ? a.dim(0) : a.dim(1);
  using S = blas_scalar_t<T>;
  if (!ctx.has_input(2) || beta == 0.0 || M * N == 0) {
    strided_product<T>(ctx, y.device(), ta, tb, 1, M, N, K, static_cast<S>(alpha), a.data<T>(), 0,
                       b.data<T>(), 0, S(0), y.data<T>());
    return;
  }
  // y = beta * C, then the product accumulated onto it (beta = 1); 16-bit products
  // accumulate onto a float32 beta * C and are rounded once.
  const Tensor& c = ctx.in(2);
  const int64_t rows = c.rank() == 2 ? c.dim(0) : 1;
  const int64_t cols = c.rank() >= 1 ? c.dim(c.rank() - 1) : 1;
  using Acc = std::conditional_t<cuda::kIs16Bit<T>, float, T>;
  Tensor acc = cuda::kIs16Bit<T> ? Tensor::empty(DType::Float32, y.shape(), y.device()) : y;
  fill_scaled<T, Acc><<<cuda::blocks_for(M * N), cuda::kThreads, 0, cuda::stream(y.device())>>>(
      M, N, c.data<T>(), rows, cols, static_cast<S>(beta), acc.data<Acc>());
  cuda::check_launch("Gemm (C)");
  strided_product<T, Acc>(ctx, y.device(), ta, tb, 1, M, N, K, static_cast<S>(alpha), a.data<T>(),
                          0, b.data<T>(), 0, S(1), acc.data<Acc>());
  if constexpr (cuda::kIs16Bit<T>) round_float<T>(acc, y);
}

}  // namespace

void cuda_fused_matmul_into(OpContext& ctx, Tensor& out) {
  expect_same_dtype(ctx, 1);
  const DType in = ctx.in(0).dtype();
  if (out.dtype() != in && !(dtype_is_low_precision(in) && out.dtype() == DType::Float32)) {
    ctx.fail("a " + dtype_name(in) + " product cannot be written as " + dtype_name(out.dtype()));
  }
  ORTM_DISPATCH_GEMM(in, ctx, {
    if constexpr (cuda::kIs16Bit<scalar_t>) {
      if (out.dtype() == DType::Float32) return run_fused_matmul<scalar_t, float>(ctx, out);
    }
    run_fused_matmul<scalar_t, scalar_t>(ctx, out);
  });
}

void cuda_strided_gemm(OpContext& ctx, Tensor& y, bool ta, bool tb, int64_t batch, int64_t M,
                       int64_t N, int64_t K, double alpha, const Tensor& a, int64_t sa,
                       const Tensor& b, int64_t sb) {
  ORTM_DISPATCH_GEMM(
      y.dtype(), ctx,
      strided_product<scalar_t>(ctx, y.device(), ta, tb, batch, M, N, K,
                                static_cast<blas_scalar_t<scalar_t>>(alpha), a.data<scalar_t>(), sa,
                                b.data<scalar_t>(), sb, 0, y.data<scalar_t>()));
}

void cuda_round_float32_into(OpContext& ctx, const Tensor& x, Tensor& y) {
  switch (y.dtype()) {
    case DType::Float16:
      return round_float<cuda::F16>(x, y);
    case DType::BFloat16:
      return round_float<cuda::BF16>(x, y);
    default:
      ctx.fail("rounding float32 to " + dtype_name(y.dtype()) + " (float16 or bfloat16 only)");
  }
}

void cuda_matrix_batched_gemm(OpContext& ctx, const GemmOperand& y, bool ta, bool tb, int64_t batch,
                              int64_t M, int64_t N, int64_t K, double alpha, const GemmOperand& a,
                              const GemmOperand& b) {
  ORTM_DISPATCH_FLOAT(y.t->dtype(), ctx,
                      matrix_batched_product<scalar_t>(ctx, y, ta, tb, batch, M, N, K,
                                                       static_cast<scalar_t>(alpha), a, b));
}

void cuda_fused_matmul(OpContext& ctx) { cuda_fused_matmul_into(ctx, ctx.out(0)); }

void cuda_gemm(OpContext& ctx) {
  expect_same_dtype(ctx, 1);
  if (ctx.has_input(2)) expect_same_dtype(ctx, 2);
  ORTM_DISPATCH_GEMM(ctx.in(0).dtype(), ctx, run_gemm<scalar_t>(ctx));
}

}  // namespace ortmodule
