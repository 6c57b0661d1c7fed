// General matrix multiply over raw row-major pointers:
//   C[M,N] = alpha * op(A)[M,K] * op(B)[K,N] + beta * C
// op(X) is X or its transpose. lda/ldb/ldc are row strides (elements) of the
// stored matrices. When beta == 0, C is write-only (it may hold garbage).
//
// The CPU implementation delegates to the BLAS that libtorch links (see
// runtime/torch_backend.cpp); only these declarations are visible to kernels.
#pragma once

#include <cstdint>

namespace ortmodule {

template <typename T>
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T* A,
          int64_t lda, const T* B, int64_t ldb, T beta, T* C, int64_t ldc);

// `batch` independent products with constant strides between the matrices:
//   C + i*stride_c = alpha * op(A + i*stride_a) * op(B + i*stride_b) + beta * (C + i*stride_c).
// A stride of 0 repeats one matrix for every product (a broadcast operand). One call lets the
// BLAS run the whole batch (one batched call instead of `batch` small ones).
template <typename T>
void gemm_batched(bool trans_a, bool trans_b, int64_t batch, int64_t M, int64_t N, int64_t K,
                  T alpha, const T* A, int64_t lda, int64_t stride_a, const T* B, int64_t ldb,
                  int64_t stride_b, T beta, T* C, int64_t ldc, int64_t stride_c);

// True where a kernel may write its float32 operands as packed panels and call the engine's
// micro-kernel (kernels/cpu/sgemm.h, VecKernels::gemm_tile) itself (Winograd convolutions):
// the backend's choice (runtime/cpu_gemm.h's use_packed_micro_kernels for the torch backend,
// which may hold where gemm() itself runs on the BLAS), not only whether the instruction set
// has the micro-kernel.
bool gemm_uses_packed_kernels();

// Whether the gradients of float32 convolutions the Winograd kernels compute
// (conv2d_winograd_applies) take them rather than im2col + GEMM: the backend's choice
// (runtime/cpu_gemm.h's winograd_conv_gradients for the torch backend; always elsewhere).
bool conv_gradients_use_winograd();

// gemm_batched as a loop of gemm calls: the implementation of backends without a batched BLAS.
template <typename T>
void gemm_batched_by_loop(bool trans_a, bool trans_b, int64_t batch, int64_t M, int64_t N,
                          int64_t K, T alpha, const T* A, int64_t lda, int64_t stride_a, const T* B,
                          int64_t ldb, int64_t stride_b, T beta, T* C, int64_t ldc,
                          int64_t stride_c) {
  for (int64_t i = 0; i < batch; ++i)
    gemm<T>(trans_a, trans_b, M, N, K, alpha, A + i * stride_a, lda, B + i * stride_b, ldb, beta,
            C + i * stride_c, ldc);
}

}  // namespace ortmodule
