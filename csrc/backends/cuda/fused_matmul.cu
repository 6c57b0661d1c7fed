// CUDA twins of the fused products of passes/matmul_bias_fusion.h:
//   FusedMatMulBias(a, b, bias; transA, transB, alpha, activation) -> y, pre?
//     rows of a times a weight matrix: cuBLASLt's GEMM with its bias epilogue into pre (or
//     y, lt_gemm.cu), then the activation (math::matmul_activate, the CPU epilogue's
//     per-element math); otherwise (float64, a transposed or batched weight) cuBLAS's GEMM
//     (matmul.cu) and one kernel adding the bias and applying the activation. float16 and
//     bfloat16: the sum computed in float32 and rounded once, the activation computed in
//     float32 from the rounded sum and rounded once;
//   FusedMatMulSumToShape(a, b, shape) -> the product summed down to `shape` (host input):
//     the product directly when nothing is summed, one GEMM over the stacked batches when
//     every batch sums into one matrix (a Linear's weight gradient), else the product into a
//     temporary and SumToShape's kernel (reduce.cu); for float16/bfloat16 operands that
//     temporary and its sum are float32, rounded once at the end.
#include <algorithm>
#include <cstdint>

#include "backends/cuda/cublas_gemm.h"
#include "backends/cuda/cuda_ops_internal.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cuda/cuda_common.h"
#include "kernels/math/matmul_epilogue.h"
#include "ops/op_utils.h"

namespace ortmodule {

namespace {

// An element of T from a value computed in T's arithmetic (float for the 16-bit tags):
// rounded to nearest even for the tags, unchanged otherwise.
template <typename T, typename W>
__device__ T to_element(W v) {
  if constexpr (cuda::kIs16Bit<T>) {
    return cuda::from_float<T>(v);
  } else {
    return v;
  }
}

// x: [rows, N] of X (T, or the float32 accumulation of a 16-bit product); y, pre: [rows, N]
// of T. v = x + bias[col] (x alone without a bias), rounded to T; pre = v (when given),
// y = act(v), computed from v widened and rounded to T: for 16-bit T the sum is rounded once
// and the activation reads the rounded sum, as eager's Linear and activation do (the CPU
// kernel's arithmetic, ops/matmul_ops.cpp). x may be pre or y (each element is read before
// it is written, by the same thread).
template <typename T, typename X>
__global__ void bias_activation_kernel(int64_t n, int64_t N, const X* x, const T* bias,
                                       MatMulActivation act, T* pre, T* y) {
  const int64_t step = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    const T v =
        to_element<T>(bias ? cuda::widen(x[i]) + cuda::widen(bias[i % N]) : cuda::widen(x[i]));
    if (pre) pre[i] = v;
    y[i] = to_element<T>(math::matmul_activate(act, cuda::widen(v)));
  }
}

// with_bias: acc is the product (bias and activation to apply, the sum written to the
// pre-activation output when there is one); otherwise acc holds the biased sum already and
// only the activation remains.
template <typename T, typename X>
void launch_bias_activation(OpContext& ctx, const Tensor& acc, MatMulActivation act,
                            bool with_bias) {
  Tensor& y = ctx.out(0);
  const int64_t n = y.numel();
  const int64_t N = y.shape().back();
  if (n == 0) return;
  T* pre = with_bias && ctx.has_output(1) ? ctx.out(1).data<T>() : nullptr;
  const T* bias = with_bias ? ctx.in(2).data<T>() : nullptr;
  bias_activation_kernel<T, X>
      <<<cuda::blocks_for(n), cuda::kThreads, 0, cuda::stream(y.device())>>>(
          n, N, acc.data<X>(), bias, act, pre, y.data<T>());
  cuda::check_launch("FusedMatMulBias (bias, activation)");
}

}  // namespace

void cuda_fused_matmul_bias(OpContext& ctx) {
  expect_same_dtype(ctx, 2);
  const MatMulActivation act = matmul_activation(ctx);
  // The product goes where the bias add reads it: the pre-activation output when there is
  // one, else y (activated in place).
  Tensor& acc = ctx.has_output(1) ? ctx.out(1) : ctx.out(0);
  const Tensor& a = ctx.in(0);
  const Tensor& b = ctx.in(1);
  // Every row of a times one weight matrix: cuBLASLt's GEMM with the bias epilogue (16-bit
  // sums rounded once), then the activation alone.
  if (!ctx.node.attr_int("transA", 0) && a.rank() >= 2 && b.rank() == 2 &&
      cuda_lt_matmul_bias(ctx, a, b, ctx.in(2), ctx.node.attr_int("transB", 0) != 0,
                          ctx.node.attr_float("alpha", 1.0), acc)) {
    // No activation and no pre-activation output: the sum is y already. With one, y is
    // act(pre) (pre itself without an activation).
    if (act == MatMulActivation::kNone && !ctx.has_output(1)) return;
    ORTM_DISPATCH_GEMM(a.dtype(), ctx,
                       launch_bias_activation<scalar_t, scalar_t>(ctx, acc, act,
                                                                  /*with_bias=*/false));
    return;
  }
  if (dtype_is_low_precision(a.dtype())) {
    // The product's float32 accumulation, the bias added to it and the sum rounded once.
    Tensor product = Tensor::empty(DType::Float32, acc.shape(), acc.device());
    cuda_fused_matmul_into(ctx, product);
    ORTM_DISPATCH_GEMM(a.dtype(), ctx,
                       launch_bias_activation<scalar_t, float>(ctx, product, act,
                                                               /*with_bias=*/true));
    return;
  }
  cuda_fused_matmul_into(ctx, acc);
  ORTM_DISPATCH_GEMM(a.dtype(), ctx,
                     launch_bias_activation<scalar_t, scalar_t>(ctx, acc, act,
                                                                /*with_bias=*/true));
}

void cuda_fused_matmul_sum(OpContext& ctx) {
  expect_same_dtype(ctx, 1);
  const Tensor& a = ctx.in(0);
  const Tensor& b = ctx.in(1);
  Tensor& y = ctx.out(0);
  const Shape& as = a.shape();
  const Shape& bs = b.shape();
  const Shape& ys = y.shape();
  const bool ta = ctx.node.attr_int("transA", 0), tb = ctx.node.attr_int("transB", 0);
  const double alpha = ctx.node.attr_float("alpha", 1.0);
  const size_t ra = as.size(), rb = bs.size(), ry = ys.size();
  const int64_t M = ys[ry - 2], N = ys[ry - 1];
  const int64_t K = ta ? as[ra - 2] : as[ra - 1];
  Shape full = matmul_batch_shape(as, bs);
  const int64_t batches = dims_product(full, 0, full.size());
  const int64_t kept = dims_product(ys, 0, ry - 2);
  if (kept == batches) {  // nothing to sum: y has the product's layout
    cuda_fused_matmul_into(ctx, y);
    return;
  }
  // Every batch sums into one matrix: sum_i a_i^T b_i is one GEMM of the stacked
  // [batches * K, M]^T and [batches * K, N] matrices.
  if (kept == 1 && ta && !tb && ra == rb && std::equal(as.begin(), as.end() - 2, bs.begin())) {
    cuda_strided_gemm(ctx, y, true, false, 1, M, N, batches * K, alpha, a, 0, b, 0);
    return;
  }
  full.push_back(M);
  full.push_back(N);
  if (dtype_is_low_precision(y.dtype())) {
    // 16-bit operands: the products and their sum in float32, rounded once.
    Tensor product = Tensor::empty(DType::Float32, full, y.device());
    cuda_fused_matmul_into(ctx, product);
    Tensor sum = Tensor::empty(DType::Float32, ys, y.device());
    cuda_sum_to_shape_into(ctx, product, sum);
    cuda_round_float32_into(ctx, sum, y);
    return;
  }
  Tensor product = Tensor::empty(y.dtype(), full, y.device());
  cuda_fused_matmul_into(ctx, product);
  cuda_sum_to_shape_into(ctx, product, y);
}

}  // namespace ortmodule
