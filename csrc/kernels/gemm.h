// General matrix multiply over raw row-major pointers:
//   C[M,N] = alpha * op(A)[M,K] * op(B)[K,N] + beta * C
// op(X) is X or its transpose. lda/ldb/ldc are row strides (elements) of the
// stored matrices. When beta == 0, C is write-only (it may hold garbage).
//
// The CPU implementation delegates to the BLAS that libtorch links (see
// runtime/torch_gemm.cpp); only this declaration is visible to kernels.
#pragma once

#include <cstdint>

namespace ortmodule {

template <typename T>
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T* A,
          int64_t lda, const T* B, int64_t ldb, T beta, T* C, int64_t ldc);

}  // namespace ortmodule
