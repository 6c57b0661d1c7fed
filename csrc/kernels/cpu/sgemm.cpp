#include "kernels/cpu/sgemm.h"

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <vector>

#include "kernels/cpu/cpu_isa.h"
#include "kernels/parallel.h"

namespace ortmodule {
namespace {

// Rows of op(B) per block: a packed B panel (kKc x gemm_nr floats, 32 KiB with AVX-512) and
// an A panel stream through L1 and L2 per micro-kernel call. K up to 1.25 blocks stays whole.
constexpr int64_t kKc = 256;
// A panels per thread task: 8 x 14 rows x kKc floats = 112 KiB of packed A, kept in L2 while
// the task sweeps every B panel.
constexpr int64_t kPanelsPerTask = 8;
// Tasks a call is cut into at least (when the B panels allow): enough for the threads of a
// small machine to share out evenly.
constexpr int64_t kMinTasks = 8;

// Rows [r0, r0 + rows) x columns [k0, k0 + kc) of op(X) as a panel: dst[k * width + r],
// rows past `rows` (up to width) zero.
void pack_panel(const float* X, int64_t ld, bool trans, int64_t r0, int64_t rows, int64_t k0,
                int64_t kc, int width, float* dst) {
  if (trans) {
    // op(X)[r, k] = X[k, r]: each k is a contiguous run of rows.
    for (int64_t k = 0; k < kc; ++k) {
      const float* src = X + (k0 + k) * ld + r0;
      float* out = dst + k * width;
      for (int64_t r = 0; r < rows; ++r) out[r] = src[r];
      for (int64_t r = rows; r < width; ++r) out[r] = 0.0f;
    }
    return;
  }
  for (int64_t r = 0; r < rows; ++r) {
    const float* src = X + (r0 + r) * ld + k0;
    for (int64_t k = 0; k < kc; ++k) dst[k * width + r] = src[k];
  }
  for (int64_t r = rows; r < width; ++r)
    for (int64_t k = 0; k < kc; ++k) dst[k * width + r] = 0.0f;
}

float* aligned_buffer(std::vector<float>& storage, size_t floats) {
  if (storage.size() < floats + 16) storage.resize(floats + 16);
  auto p = reinterpret_cast<uintptr_t>(storage.data());
  return reinterpret_cast<float*>((p + 63) & ~static_cast<uintptr_t>(63));
}

}  // namespace

bool packed_sgemm_available() { return vec_kernels().gemm_tile != nullptr; }

void packed_sgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                  const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
                  int64_t ldc) {
  const VecKernels& vk = vec_kernels();
  if (!vk.gemm_tile) throw std::logic_error("packed_sgemm: the active ISA has no GEMM kernel");
  if (M == 0 || N == 0) return;
  if (K == 0) {
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) C[i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[i * ldc + j];
    return;
  }
  const int MR = vk.gemm_mr, NR = vk.gemm_nr;
  const int64_t m_panels = (M + MR - 1) / MR, n_panels = (N + NR - 1) / NR;
  const int64_t blocks = K <= kKc + kKc / 4 ? 1 : (K + kKc - 1) / kKc;
  const int64_t kc_max = (K + blocks - 1) / blocks;
  // Tasks: blocks of A panels, each over a range of B panels; when A has fewer than
  // kMinTasks blocks, the B panels are split too (each part packs its A block again).
  const int64_t m_tasks = (m_panels + kPanelsPerTask - 1) / kPanelsPerTask;
  const int64_t n_split =
      std::min<int64_t>(n_panels, std::max<int64_t>(1, (kMinTasks + m_tasks - 1) / m_tasks));
  thread_local std::vector<float> b_storage;
  float* bp = aligned_buffer(b_storage, static_cast<size_t>(n_panels * NR * kc_max));
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t k0 = blk * kc_max, kc = std::min(kc_max, K - k0);
    parallel_for(0, n_panels, 4, [&](int64_t j0, int64_t j1) {
      // op(B)[k, j] is op(B^T)[j, k]: B's panels pack like A's with the transpose flipped.
      for (int64_t j = j0; j < j1; ++j)
        pack_panel(B, ldb, !trans_b, j * NR, std::min<int64_t>(NR, N - j * NR), k0, kc, NR,
                   bp + j * NR * kc);
    });
    parallel_for(0, m_tasks * n_split, 1, [&](int64_t t0, int64_t t1) {
      thread_local std::vector<float> a_storage;
      float* ap = aligned_buffer(a_storage, static_cast<size_t>(kPanelsPerTask * MR * kc));
      for (int64_t t = t0; t < t1; ++t) {
        const int64_t mt = t / n_split, part = t % n_split;
        const int64_t i0 = mt * kPanelsPerTask, i1 = std::min(m_panels, i0 + kPanelsPerTask);
        const int64_t j0 = n_panels * part / n_split, j1 = n_panels * (part + 1) / n_split;
        for (int64_t i = i0; i < i1; ++i)
          pack_panel(A, lda, trans_a, i * MR, std::min<int64_t>(MR, M - i * MR), k0, kc, MR,
                     ap + (i - i0) * MR * kc);
        for (int64_t j = j0; j < j1; ++j)
          for (int64_t i = i0; i < i1; ++i)
            vk.gemm_tile(kc, ap + (i - i0) * MR * kc, bp + j * NR * kc, C + i * MR * ldc + j * NR,
                         ldc, static_cast<int>(std::min<int64_t>(MR, M - i * MR)),
                         static_cast<int>(std::min<int64_t>(NR, N - j * NR)), alpha, beta,
                         blk == 0);
      }
    });
  }
}

}  // namespace ortmodule
