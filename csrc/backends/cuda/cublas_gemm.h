// cuBLAS's strided-batched GEMM by element type (float32, float64, and float16/bfloat16
// through the tags F16/BF16: 16-bit operands, float32 accumulation on tensor cores, float
// alpha/beta, results in the 16-bit type or in float32), in cuBLAS's column-major argument
// order: the row-major product Y = op(A) op(B) is computed as Y^T = op(B)^T op(A)^T, so
// callers pass B before A. Host code (.cu files), plus the tags' element conversions.
#pragma once

#include <cublas_v2.h>

#include <cstdint>
#include <type_traits>

#include "kernels/math/bfloat16.h"
#include "kernels/math/float16.h"
#include "ops/op_utils.h"

namespace ortmodule {
namespace cuda {

// Element tags of the 16-bit float types (the engine stores both as uint16_t bits).
struct F16 {
  uint16_t bits;
};
struct BF16 {
  uint16_t bits;
};
template <typename T>
constexpr bool kIs16Bit = std::is_same_v<T, F16> || std::is_same_v<T, BF16>;

// cuBLAS's name of an element type, and the type of alpha and beta for its products.
template <typename T>
struct BlasType;
template <>
struct BlasType<float> {
  static constexpr cudaDataType kType = CUDA_R_32F;
  using Scalar = float;
};
template <>
struct BlasType<double> {
  static constexpr cudaDataType kType = CUDA_R_64F;
  using Scalar = double;
};
template <>
struct BlasType<F16> {
  static constexpr cudaDataType kType = CUDA_R_16F;
  using Scalar = float;
};
template <>
struct BlasType<BF16> {
  static constexpr cudaDataType kType = CUDA_R_16BF;
  using Scalar = float;
};
template <typename T>
using blas_scalar_t = typename BlasType<T>::Scalar;

// An element as a value to compute with (the 16-bit tags as float), and float rounded to
// nearest even into an element type.
ORTM_HOST_DEVICE float widen(F16 v) { return math::half_to_float(v.bits); }
ORTM_HOST_DEVICE float widen(BF16 v) { return math::bf16_to_float(v.bits); }
ORTM_HOST_DEVICE float widen(float v) { return v; }
ORTM_HOST_DEVICE double widen(double v) { return v; }
template <typename T>
ORTM_HOST_DEVICE T from_float(float v) {
  if constexpr (std::is_same_v<T, F16>) {
    return F16{math::float_to_half(v)};
  } else if constexpr (std::is_same_v<T, BF16>) {
    return BF16{math::float_to_bf16(v)};
  } else {
    return v;
  }
}

// Runs the body with `scalar_t` bound to float, double or the 16-bit tags F16/BF16: the
// dtypes of the CUDA products and of their epilogues.
#define ORTM_DISPATCH_GEMM(DTYPE, CTX, ...)                                                       \
  switch (DTYPE) {                                                                                \
    ORTM_DTYPE_CASE(Float32, float, __VA_ARGS__)                                                  \
    ORTM_DTYPE_CASE(Float64, double, __VA_ARGS__)                                                 \
    ORTM_DTYPE_CASE(Float16, cuda::F16, __VA_ARGS__)                                              \
    ORTM_DTYPE_CASE(BFloat16, cuda::BF16, __VA_ARGS__)                                            \
    default:                                                                                      \
      (CTX).fail("dtype " + dtype_name(DTYPE) +                                                   \
                 " is not supported by the CUDA products (float32, float64, float16, bfloat16)"); \
  }

// 16-bit operands A and B, C (and the result) of type Out: the operands' type or float32.
template <typename T, typename Out, std::enable_if_t<kIs16Bit<T>, int> = 0>
inline cublasStatus_t gemm_strided(cublasHandle_t h, cublasOperation_t ob, cublasOperation_t oa,
                                   int n, int m, int k, const float* alpha, const T* b, int ldb,
                                   long long sb, const T* a, int lda, long long sa,
                                   const float* beta, Out* c, int ldc, long long sc, int batch) {
  static_assert(std::is_same_v<Out, T> || std::is_same_v<Out, float>, "16-bit or float32 C");
  return cublasGemmStridedBatchedEx(h, ob, oa, n, m, k, alpha, b, BlasType<T>::kType, ldb, sb, a,
                                    BlasType<T>::kType, lda, sa, beta, c, BlasType<Out>::kType, ldc,
                                    sc, batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
}

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

// One product (cublas<t>gemm, cublasGemmEx for 16-bit operands): the calls torch's mm makes,
// whose kernel choices can differ from a strided batch of one.
inline cublasStatus_t gemm_one(cublasHandle_t h, cublasOperation_t ob, cublasOperation_t oa, int n,
                               int m, int k, const float* alpha, const float* b, int ldb,
                               const float* a, int lda, const float* beta, float* c, int ldc) {
  return cublasSgemm(h, ob, oa, n, m, k, alpha, b, ldb, a, lda, beta, c, ldc);
}
inline cublasStatus_t gemm_one(cublasHandle_t h, cublasOperation_t ob, cublasOperation_t oa, int n,
                               int m, int k, const double* alpha, const double* b, int ldb,
                               const double* a, int lda, const double* beta, double* c, int ldc) {
  return cublasDgemm(h, ob, oa, n, m, k, alpha, b, ldb, a, lda, beta, c, ldc);
}
template <typename T, typename Out, std::enable_if_t<kIs16Bit<T>, int> = 0>
inline cublasStatus_t gemm_one(cublasHandle_t h, cublasOperation_t ob, cublasOperation_t oa, int n,
                               int m, int k, const float* alpha, const T* b, int ldb, const T* a,
                               int lda, const float* beta, Out* c, int ldc) {
  static_assert(std::is_same_v<Out, T> || std::is_same_v<Out, float>, "16-bit or float32 C");
  return cublasGemmEx(h, ob, oa, n, m, k, alpha, b, BlasType<T>::kType, ldb, a, BlasType<T>::kType,
                      lda, beta, c, BlasType<Out>::kType, ldc, CUBLAS_COMPUTE_32F,
                      CUBLAS_GEMM_DEFAULT);
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
