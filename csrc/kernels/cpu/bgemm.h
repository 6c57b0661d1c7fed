// The engine's packed bfloat16 GEMM, on CPUs with AVX512-BF16 (the avx512bf16 instruction set,
// kernels/cpu/cpu_isa.h): bfloat16 operands, float32 sums and C. Row-major
//   C[M,N] = alpha * op(A)[M,K] * op(B)[K,N] + beta * C    (beta == 0: C is not read)
// A and B hold bfloat16 bits. The blocking and threading are the float32 packed GEMM's
// (kernels/cpu/packed_gemm.h); panels hold pairs of values along K and the micro-kernel
// (VecKernels::bf16_gemm_tile) adds two products per vdpbf16ps lane. The products of two
// bfloat16 values are exact in float32; the sums are float32 sums in another order than a
// float32 GEMM's, and bfloat16 subnormals read as zero, as the instruction does (and as
// eager PyTorch's bfloat16 GEMMs on such CPUs do).
#pragma once

#include <cstdint>

namespace ortmodule {

// Whether the active instruction set has the bfloat16 micro-kernel; without it the 16-bit
// products widen their operands to float32 (ops/widened_kernel.h).
bool packed_bgemm_available();

// Requires packed_bgemm_available().
void packed_bgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                  const uint16_t* A, int64_t lda, const uint16_t* B, int64_t ldb, float beta,
                  float* C, int64_t ldc);

// `batch` products with constant strides between the matrices (kernels/gemm.h's
// gemm_batched): in parallel, one per thread, when there are enough of them to share out,
// else one after the other with every thread on each.
void packed_bgemm_batched(bool trans_a, bool trans_b, int64_t batch, int64_t M, int64_t N,
                          int64_t K, float alpha, const uint16_t* A, int64_t lda, int64_t stride_a,
                          const uint16_t* B, int64_t ldb, int64_t stride_b, float beta, float* C,
                          int64_t ldc, int64_t stride_c);

// packed_bgemm_batched's products (beta = 0) rounded to bfloat16 into Y (round to nearest even,
// as math::float_to_bf16), for `batch` >= the threads: each product runs on one thread into a
// float32 scratch of M x N (kept per thread) and is rounded at once, while it is in cache,
// instead of a batch of float32 sums written out and read back by a rounding pass. The sums are
// those packed_bgemm_batched computes, so Y holds the same bits as rounding its C.
void packed_bgemm_batched_round(bool trans_a, bool trans_b, int64_t batch, int64_t M, int64_t N,
                                int64_t K, float alpha, const uint16_t* A, int64_t lda,
                                int64_t stride_a, const uint16_t* B, int64_t ldb, int64_t stride_b,
                                uint16_t* Y, int64_t ldy, int64_t stride_y);

}  // namespace ortmodule
