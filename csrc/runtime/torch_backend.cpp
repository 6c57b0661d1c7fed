// The engine's thread pool and CPU GEMM, borrowed from libtorch so there is one
// pool (governed by torch.set_num_threads) and one BLAS; float32 GEMMs take the engine's
// packed GEMM instead where runtime/cpu_gemm.h says so.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "base/profiler.h"
#include "kernels/cpu/sgemm.h"
#include "kernels/gemm.h"
#include "kernels/parallel.h"
#include "runtime/cpu_gemm.h"

namespace ortmodule {

void parallel_for(int64_t begin, int64_t end, int64_t grain,
                  const std::function<void(int64_t, int64_t)>& fn) {
  if (end <= begin) return;
  if (end - begin <= grain || at::in_parallel_region() || at::get_num_threads() == 1) {
    fn(begin, end);
    return;
  }
  at::parallel_for(begin, end, grain, fn);
}

int parallel_threads() { return at::in_parallel_region() ? 1 : at::get_num_threads(); }

namespace {

// The Fortran BLAS GEMM that libtorch_cpu exports (MKL or OpenBLAS, the one at::mm calls):
// called directly, a product skips ATen's tensor wrapping and dispatch (a few microseconds a
// call, which the many small products of Winograd convolutions and blocked attention add up).
// Looked up in libtorch_cpu itself, so no other library's sgemm_ is taken; null where torch
// has no BLAS, and at::mm runs instead.
using SgemmFn = void (*)(const char*, const char*, const int*, const int*, const int*, const float*,
                         const float*, const int*, const float*, const int*, const float*, float*,
                         const int*);
using DgemmFn = void (*)(const char*, const char*, const int*, const int*, const int*,
                         const double*, const double*, const int*, const double*, const int*,
                         const double*, double*, const int*);

void* torch_blas_symbol(const char* name) {
  static void* const library = dlopen("libtorch_cpu.so", RTLD_LAZY | RTLD_NOLOAD);
  return library ? dlsym(library, name) : nullptr;
}

template <typename T>
auto torch_blas_gemm() {
  if constexpr (std::is_same_v<T, float>) {
    static const auto fn = reinterpret_cast<SgemmFn>(torch_blas_symbol("sgemm_"));
    return fn;
  } else {
    static const auto fn = reinterpret_cast<DgemmFn>(torch_blas_symbol("dgemm_"));
    return fn;
  }
}

// Row-major C = alpha op(A) op(B) + beta C through the Fortran GEMM, as its column-major
// transpose C^T = op(B)^T op(A)^T. False (nothing done) without one or with dims past int.
template <typename T>
bool direct_gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T* A,
                 int64_t lda, const T* B, int64_t ldb, T beta, T* C, int64_t ldc) {
  const auto fn = torch_blas_gemm<T>();
  constexpr int64_t kMax = std::numeric_limits<int>::max();
  if (!fn || M > kMax || N > kMax || K > kMax || lda > kMax || ldb > kMax || ldc > kMax)
    return false;
  const int m = static_cast<int>(M), n = static_cast<int>(N), k = static_cast<int>(K);
  // Leading dims of at least one row, as BLAS requires even where a dim is 1.
  const int la = static_cast<int>(std::max<int64_t>(lda, trans_a ? M : K));
  const int lb = static_cast<int>(std::max<int64_t>(ldb, trans_b ? K : N));
  const int lc = static_cast<int>(std::max<int64_t>(ldc, N));
  const char ta = trans_a ? 'T' : 'N', tb = trans_b ? 'T' : 'N';
  fn(&tb, &ta, &n, &m, &k, &alpha, B, &lb, A, &la, &beta, C, &lc);
  return true;
}

template <typename T>
constexpr at::ScalarType scalar_type();
template <>
constexpr at::ScalarType scalar_type<float>() {
  return at::kFloat;
}
template <>
constexpr at::ScalarType scalar_type<double>() {
  return at::kDouble;
}
}  // namespace

bool gemm_uses_packed_kernels() { return use_packed_micro_kernels(); }

bool conv_gradients_use_winograd() { return winograd_conv_gradients(); }

template <typename T>
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T* A,
          int64_t lda, const T* B, int64_t ldb, T beta, T* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  GemmTimer timer(trans_a, trans_b, 1, M, N, K);
  if constexpr (std::is_same_v<T, float>) {
    if (use_packed_sgemm()) {
      packed_sgemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
      return;
    }
  }
  if (K > 0 && direct_gemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc)) return;
  auto opts = at::TensorOptions().dtype(scalar_type<T>());
  at::Tensor c = at::from_blob(C, {M, N}, {ldc, 1}, opts);
  if (K == 0) {
    if (beta == T(0))
      c.zero_();
    else
      c.mul_(beta);
    return;
  }
  at::Tensor a = trans_a ? at::from_blob(const_cast<T*>(A), {K, M}, {lda, 1}, opts).t()
                         : at::from_blob(const_cast<T*>(A), {M, K}, {lda, 1}, opts);
  at::Tensor b = trans_b ? at::from_blob(const_cast<T*>(B), {N, K}, {ldb, 1}, opts).t()
                         : at::from_blob(const_cast<T*>(B), {K, N}, {ldb, 1}, opts);
  if (beta == T(0) && ldc == N) {
    at::mm_out(c, a, b);
    if (alpha != T(1)) c.mul_(alpha);
  } else if (beta == T(0)) {
    c.copy_(at::mm(a, b).mul_(alpha));
  } else {
    c.addmm_(a, b, beta, alpha);
  }
}

template <typename T>
void gemm_batched(bool trans_a, bool trans_b, int64_t batch, int64_t M, int64_t N, int64_t K,
                  T alpha, const T* A, int64_t lda, int64_t stride_a, const T* B, int64_t ldb,
                  int64_t stride_b, T beta, T* C, int64_t ldc, int64_t stride_c) {
  if (batch == 0 || M == 0 || N == 0) return;
  if (K == 0 || batch == 1) {
    for (int64_t i = 0; i < batch; ++i)
      gemm<T>(trans_a, trans_b, M, N, K, alpha, A + i * stride_a, lda, B + i * stride_b, ldb, beta,
              C + i * stride_c, ldc);
    return;
  }
  GemmTimer timer(trans_a, trans_b, batch, M, N, K);
  if constexpr (std::is_same_v<T, float>) {
    if (use_packed_sgemm()) {
      // Products in parallel, each on one thread, when there are enough of them to share out;
      // else one after the other, each product using every thread.
      const int64_t grain = batch >= at::get_num_threads() ? 1 : batch;
      parallel_for(0, batch, grain, [&](int64_t b0, int64_t b1) {
        for (int64_t i = b0; i < b1; ++i)
          packed_sgemm(trans_a, trans_b, M, N, K, alpha, A + i * stride_a, lda, B + i * stride_b,
                       ldb, beta, C + i * stride_c, ldc);
      });
      return;
    }
  }
  auto opts = at::TensorOptions().dtype(scalar_type<T>());
  // Strided views over the caller's memory (a stride of 0 repeats one matrix); ATen's bmm
  // hands the whole batch to the BLAS's batched GEMM.
  at::Tensor a = trans_a
                     ? at::from_blob(const_cast<T*>(A), {batch, K, M}, {stride_a, lda, 1}, opts)
                           .transpose(1, 2)
                     : at::from_blob(const_cast<T*>(A), {batch, M, K}, {stride_a, lda, 1}, opts);
  at::Tensor b = trans_b
                     ? at::from_blob(const_cast<T*>(B), {batch, N, K}, {stride_b, ldb, 1}, opts)
                           .transpose(1, 2)
                     : at::from_blob(const_cast<T*>(B), {batch, K, N}, {stride_b, ldb, 1}, opts);
  at::Tensor c = at::from_blob(C, {batch, M, N}, {stride_c, ldc, 1}, opts);
  if (beta == T(0) && alpha == T(1) && c.is_contiguous()) {
    at::bmm_out(c, a, b);
  } else {
    // beta == 0: baddbmm ignores C's old contents (garbage and NaN included).
    c.baddbmm_(a, b, beta, alpha);
  }
}

template void gemm<float>(bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t,
                          const float*, int64_t, float, float*, int64_t);
template void gemm<double>(bool, bool, int64_t, int64_t, int64_t, double, const double*, int64_t,
                           const double*, int64_t, double, double*, int64_t);

template void gemm_batched<float>(bool, bool, int64_t, int64_t, int64_t, int64_t, float,
                                  const float*, int64_t, int64_t, const float*, int64_t, int64_t,
                                  float, float*, int64_t, int64_t);
template void gemm_batched<double>(bool, bool, int64_t, int64_t, int64_t, int64_t, double,
                                   const double*, int64_t, int64_t, const double*, int64_t, int64_t,
                                   double, double*, int64_t, int64_t);

}  // namespace ortmodule
