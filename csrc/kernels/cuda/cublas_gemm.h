// cuBLAS's strided-batched GEMM by element type (float32, float64), in cuBLAS's
// column-major argument order: the row-major product Y = op(A) op(B) is computed as
// Y^T = op(B)^T op(A)^T, so callers pass B before A. Host code (.cu files).
#pragma once

#include <cublas_v2.h>

namespace ortmodule {
namespace cuda {

inline cublasStatus_t gemm_strided(cublasHandle_t h, cublasOperation_t ob, cublasOperation_t oa,
                                   int n, int m, int k, const float* alpha, const float* b, int ldb,
                                   long long sb, const float* a, int lda, long long sa,
                                   const float* beta, float* c, int ldc, long long sc, int batch) {
  return cublasSgemmStridedBatched(h, ob, oa, n, m, k, alpha, b, ldb, sb, a, lda, sa, beta, c, ldc,
                                   sc, batch);
}
inline cublasStatus_t gemm_strided(cublasHandle_t h, cublasOperation_t ob, cublasOperation_t oa,
                                   int n, int m, int k, const double* alpha, const double* b,
                                   int ldb, long long sb, const double* a, int lda, long long sa,
                                   const double* beta, double* c, int ldc, long long sc,
                                   int batch) {
  return cublasDgemmStridedBatched(h, ob, oa, n, m, k, alpha, b, ldb, sb, a, lda, sa, beta, c, ldc,
                                   sc, batch);
}

// Batched through arrays of matrix pointers (in device memory).
inline cublasStatus_t gemm_batched(cublasHandle_t h, cublasOperation_t ob, cublasOperation_t oa,
                                   int n, int m, int k, const float* alpha, const float* const* b,
                                   int ldb, const float* const* a, int lda, const float* beta,
                                   float* const* c, int ldc, int batch) {
  return cublasSgemmBatched(h, ob, oa, n, m, k, alpha, b, ldb, a, lda, beta, c, ldc, batch);
}
inline cublasStatus_t gemm_batched(cublasHandle_t h, cublasOperation_t ob, cublasOperation_t oa,
                                   int n, int m, int k, const double* alpha, const double* const* b,
                                   int ldb, const double* const* a, int lda, const double* beta,
                                   double* const* c, int ldc, int batch) {
  return cublasDgemmBatched(h, ob, oa, n, m, k, alpha, b, ldb, a, lda, beta, c, ldc, batch);
}

}  // namespace cuda
}  // namespace ortmodule
