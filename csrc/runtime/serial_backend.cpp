// A plain serial backend: parallel_for runs its loop on the calling thread and gemm is a
// straightforward triple loop. It replaces torch_backend.cpp in builds without libtorch
// (the fuzz target, sanitizer builds); the product links torch_backend.cpp.
#include <cstdint>
#include <functional>

#include "kernels/gemm.h"
#include "kernels/parallel.h"

namespace ortmodule {

void parallel_for(int64_t begin, int64_t end, int64_t grain,
                  const std::function<void(int64_t, int64_t)>& fn) {
  if (end <= begin) return;
  fn(begin, end);
}

int parallel_threads() { return 1; }

bool gemm_uses_packed_kernels() { return false; }

bool conv_gradients_use_winograd() { return true; }

template <typename T>
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T* A,
          int64_t lda, const T* B, int64_t ldb, T beta, T* C, int64_t ldc) {
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t n = 0; n < N; ++n) {
      T acc = T(0);
      for (int64_t k = 0; k < K; ++k) {
        const T a = trans_a ? A[k * lda + m] : A[m * lda + k];
        const T b = trans_b ? B[n * ldb + k] : B[k * ldb + n];
        acc += a * b;
      }
      T& c = C[m * ldc + n];
      // beta == 0: C is write-only (it may hold garbage, NaN included).
      c = beta == T(0) ? alpha * acc : alpha * acc + beta * c;
    }
  }
}

template <typename T>
void gemm_batched(bool trans_a, bool trans_b, int64_t batch, int64_t M, int64_t N, int64_t K,
                  T alpha, const T* A, int64_t lda, int64_t stride_a, const T* B, int64_t ldb,
                  int64_t stride_b, T beta, T* C, int64_t ldc, int64_t stride_c) {
  gemm_batched_by_loop(trans_a, trans_b, batch, M, N, K, alpha, A, lda, stride_a, B, ldb, stride_b,
                       beta, C, ldc, stride_c);
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
