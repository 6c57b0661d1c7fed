// Entry points the CUDA kernel files share with each other (host code; defined in the named
// .cu files). The op table's kernels themselves are declared in ops/cuda_ops.h.
#pragma once

#include <cstdint>

#include "ops/op_table.h"

namespace ortmodule {

// reduce.cu: y = x summed down to y's shape (SumToShape's kernel; y must not alias x).
void cuda_sum_to_shape_into(OpContext& ctx, const Tensor& x, Tensor& y);

// matmul.cu: out = FusedMatMul(in 0, in 1; transA, transB, alpha) of the node in `ctx`,
// written to `out` (shaped as the product, on the inputs' device; of the inputs' dtype, or
// float32 for float16/bfloat16 inputs: the float32 accumulation, unrounded).
void cuda_fused_matmul_into(OpContext& ctx, Tensor& out);

// lt_gemm.cu: y[..., N] = alpha * x[..., K] op(w) + bias[N] (op(w) = w^T when trans_w, w
// [N, K]; else w [K, N]) through cuBLASLt's bias epilogue, x's leading dims as rows; all of
// y's dtype (float32, float16, bfloat16). Returns false, computing nothing, where cuBLASLt is
// switched off (ORTMODULE_CUDA_BLASLT=0), for other dtypes, empty products, or when cuBLASLt
// has no algorithm: the caller's GEMM and bias kernel then compute the same values.
bool cuda_lt_matmul_bias(OpContext& ctx, const Tensor& x, const Tensor& w, const Tensor& bias,
                         bool trans_w, double alpha, Tensor& y);

// matmul.cu: y (float16 or bfloat16) = x (float32, y's shape) rounded to nearest even.
void cuda_round_float32_into(OpContext& ctx, const Tensor& x, Tensor& y);

// matmul.cu: row-major Y_i[M, N] = alpha * op(A_i) op(B_i) for i < batch in one strided cuBLAS
// call, A_i = a + i * sa, B_i = b + i * sb (elements), Y_i = y + i * M * N; op(A_i) is
// [M, K], op(B_i) [K, N]. a, b and y share y's dtype (float32, float64, or float16/bfloat16:
// tensor cores, float32 accumulation, one rounding).
void cuda_strided_gemm(OpContext& ctx, Tensor& y, bool ta, bool tb, int64_t batch, int64_t M,
                       int64_t N, int64_t K, double alpha, const Tensor& a, int64_t sa,
                       const Tensor& b, int64_t sb);

// A [batch, rows, cols] operand of cuda_matrix_batched_gemm, read where it lies: matrix i
// starts at data + (i / heads) * batch_stride + (i % heads) * head_stride (elements) and its
// rows are ld elements apart. A contiguous [batch, rows, cols] tensor is
// {t, 1, rows * cols, 0, cols}; a [B, S, H, D] tensor read as [B * H, S, D] is
// {t, H, S * H * D, D, H * D}.
struct GemmOperand {
  const Tensor* t = nullptr;
  int64_t heads = 1, batch_stride = 0, head_stride = 0, ld = 0;
};

// matmul.cu: Y_i = alpha * op(A_i) op(B_i) for i < batch (op(A_i) [M, N], op(B_i) [K, N]),
// one cuBLAS call through arrays of matrix pointers filled on the device; a, b and y share
// y's dtype (float32 or float64).
void cuda_matrix_batched_gemm(OpContext& ctx, const GemmOperand& y, bool ta, bool tb, int64_t batch,
                              int64_t M, int64_t N, int64_t K, double alpha, const GemmOperand& a,
                              const GemmOperand& b);

}  // namespace ortmodule
