// Entry points the CUDA kernel files share with each other (host code; defined in the named
// .cu files). The op table's kernels themselves are declared in ops/cuda_ops.h.
#pragma once

#include <cstdint>

#include "ops/op_table.h"

namespace ortmodule {

// reduce.cu: y = x summed down to y's shape (SumToShape's kernel; y must not alias x).
void cuda_sum_to_shape_into(OpContext& ctx, const Tensor& x, Tensor& y);

// matmul.cu: out = FusedMatMul(in 0, in 1; transA, transB, alpha) of the node in `ctx`,
// written to `out` (shaped as the product, on the inputs' device).
void cuda_fused_matmul_into(OpContext& ctx, Tensor& out);

// matmul.cu: row-major Y_i[M, N] = alpha * op(A_i) op(B_i) for i < batch in one strided cuBLAS
// call, A_i = a + i * sa, B_i = b + i * sb (elements), Y_i = y + i * M * N; op(A_i) is
// [M, K], op(B_i) [K, N]. a, b and y share y's dtype (float32 or float64).
void cuda_strided_gemm(OpContext& ctx, Tensor& y, bool ta, bool tb, int64_t batch, int64_t M,
                       int64_t N, int64_t K, double alpha, const Tensor& a, int64_t sa,
                       const Tensor& b, int64_t sb);

}  // namespace ortmodule
