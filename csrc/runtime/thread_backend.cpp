// The backend of the standalone C++ training library (libortmodule_training.so, no torch):
// parallel_for over std::threads (ORTMODULE_NUM_THREADS, default: the hardware threads) and a
// gemm: the packed float32 kernel (kernels/cpu/sgemm.h) where the CPU has one, else a blocked,
// row-parallel loop. The Python extension links torch_backend.cpp instead.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "kernels/cpu/sgemm.h"
#include "kernels/gemm.h"
#include "kernels/parallel.h"

namespace ortmodule {

namespace {

thread_local bool in_parallel_region = false;

int num_threads() {
  static const int n = [] {
    if (const char* env = std::getenv("ORTMODULE_NUM_THREADS")) {
      int v = std::atoi(env);
      if (v >= 1) return v;
    }
    unsigned hw = std::thread::hardware_concurrency();
    return hw == 0 ? 1 : static_cast<int>(hw);
  }();
  return n;
}

}  // namespace

int parallel_threads() { return in_parallel_region ? 1 : num_threads(); }

void parallel_for(int64_t begin, int64_t end, int64_t grain,
                  const std::function<void(int64_t, int64_t)>& fn) {
  if (end <= begin) return;
  const int64_t n = end - begin;
  grain = std::max<int64_t>(grain, 1);
  const int64_t chunks = std::min<int64_t>(num_threads(), (n + grain - 1) / grain);
  if (chunks <= 1 || in_parallel_region) {
    fn(begin, end);
    return;
  }
  const int64_t step = (n + chunks - 1) / chunks;
  std::vector<std::thread> workers;
  workers.reserve(static_cast<size_t>(chunks - 1));
  for (int64_t c = 1; c < chunks; ++c) {
    const int64_t b = begin + c * step, e = std::min(end, b + step);
    if (b >= e) break;
    workers.emplace_back([&fn, b, e] {
      in_parallel_region = true;
      fn(b, e);
    });
  }
  in_parallel_region = true;
  fn(begin, std::min(end, begin + step));
  in_parallel_region = false;
  for (std::thread& t : workers) t.join();
}

bool gemm_uses_packed_kernels() { return packed_sgemm_available(); }

bool conv_gradients_use_winograd() { return true; }

template <typename T>
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T* A,
          int64_t lda, const T* B, int64_t ldb, T beta, T* C, int64_t ldc) {
  if constexpr (std::is_same_v<T, float>) {
    if (packed_sgemm_available()) {
      packed_sgemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
      return;
    }
  }
  // Without the packed kernel (baseline ISA, double): rows of C in parallel; per row,
  // C[m,:] += A[m,k] * B[k,:] streams rows of B (or, for a transposed B, dot products of
  // rows), in blocks of K that stay in cache.
  const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, N * K));
  parallel_for(0, M, grain, [&](int64_t m0, int64_t m1) {
    std::vector<T> row(static_cast<size_t>(N));
    for (int64_t m = m0; m < m1; ++m) {
      std::fill(row.begin(), row.end(), T(0));
      if (!trans_b) {
        for (int64_t k = 0; k < K; ++k) {
          const T a = trans_a ? A[k * lda + m] : A[m * lda + k];
          const T* b = B + k * ldb;
          for (int64_t n = 0; n < N; ++n) row[n] += a * b[n];
        }
      } else {
        for (int64_t n = 0; n < N; ++n) {
          const T* b = B + n * ldb;
          T acc = T(0);
          if (trans_a) {
            for (int64_t k = 0; k < K; ++k) acc += A[k * lda + m] * b[k];
          } else {
            const T* a = A + m * lda;
            for (int64_t k = 0; k < K; ++k) acc += a[k] * b[k];
          }
          row[n] = acc;
        }
      }
      T* c = C + m * ldc;
      for (int64_t n = 0; n < N; ++n)
        c[n] = beta == T(0) ? alpha * row[n] : alpha * row[n] + beta * c[n];
    }
  });
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
