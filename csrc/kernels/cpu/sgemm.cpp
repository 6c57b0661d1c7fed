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
// Blocks of A panels from which the tasks are these blocks alone. With fewer, B's panels are
// split too, into kSplitTasks tasks at least (when the panels allow): a few tasks per thread
// of a small machine, so that none waits long for the last one.
constexpr int64_t kMinTasks = 8;
constexpr int64_t kSplitTasks = 16;
// Up to this many B panels, A's full panels are read in place (VecKernels::gemm_tile_a)
// instead of packed: each A element then serves at most two micro-kernel calls, too few to
// repay writing and reading back a packed copy (a convolution's weights against the few
// columns of a small output: ResNet's 2x2 layers, 32-64 columns per product).
constexpr int64_t kDirectAPanels = 2;

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
  // op(X)[r, k] = X[r, k]: a transpose, in registers.
  vec_kernels().pack_transposed(X + r0 * ld + k0, ld, rows, kc, width, dst);
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
  // Tasks: blocks of A panels, each over a range of B panels.
  const int64_t m_tasks = (m_panels + kPanelsPerTask - 1) / kPanelsPerTask;
  const int64_t n_split =
      m_tasks >= kMinTasks ? 1 : std::min(n_panels, (kSplitTasks + m_tasks - 1) / m_tasks);
  const bool direct_a = n_panels <= kDirectAPanels && vk.gemm_tile_a != nullptr;
  const auto full = [&](int64_t i) { return (i + 1) * MR <= M; };
  const auto tile = [&](int64_t i, int64_t j, const float* a_panel, const float* b_panel,
                        int64_t k0, int64_t kc, bool first) {
    const int rows = static_cast<int>(std::min<int64_t>(MR, M - i * MR));
    const int cols = static_cast<int>(std::min<int64_t>(NR, N - j * NR));
    float* c = C + i * MR * ldc + j * NR;
    if (direct_a && full(i)) {
      const float* a = trans_a ? A + k0 * lda + i * MR : A + i * MR * lda + k0;
      vk.gemm_tile_a(kc, a, lda, trans_a, b_panel, c, ldc, rows, cols, alpha, beta, first);
    } else {
      vk.gemm_tile(kc, a_panel, b_panel, c, ldc, rows, cols, alpha, beta, first);
    }
  };
  if (m_tasks == 1) {
    // Few rows (a batch of up to 112): the threads split B's panels and run every K block on
    // their own, each packing all of A, so no thread waits on another between K blocks (one
    // parallel region instead of two per K block: the MLP's products have four).
    parallel_for(0, n_panels, 1, [&](int64_t j0, int64_t j1) {
      thread_local std::vector<float> a_storage, b_storage_one;
      float* ap = aligned_buffer(a_storage, static_cast<size_t>(m_panels * MR * kc_max));
      float* bq = aligned_buffer(b_storage_one, static_cast<size_t>(NR * kc_max));
      for (int64_t blk = 0; blk < blocks; ++blk) {
        const int64_t k0 = blk * kc_max, kc = std::min(kc_max, K - k0);
        for (int64_t i = 0; i < m_panels; ++i) {
          if (direct_a && full(i)) continue;  // read in place
          pack_panel(A, lda, trans_a, i * MR, std::min<int64_t>(MR, M - i * MR), k0, kc, MR,
                     ap + i * MR * kc);
        }
        for (int64_t j = j0; j < j1; ++j) {
          pack_panel(B, ldb, !trans_b, j * NR, std::min<int64_t>(NR, N - j * NR), k0, kc, NR, bq);
          for (int64_t i = 0; i < m_panels; ++i) tile(i, j, ap + i * MR * kc, bq, k0, kc, blk == 0);
        }
      }
    });
    return;
  }
  // Split B panels share their A block: then A is packed once per K block, before the tasks
  // (a small M, e.g. a batch of 64 rows, would otherwise pack all of A once per task).
  const bool shared_a = !direct_a && n_split > 1;
  thread_local std::vector<float> b_storage, shared_a_storage;
  float* bp = aligned_buffer(b_storage, static_cast<size_t>(n_panels * NR * kc_max));
  float* ap_shared =
      shared_a ? aligned_buffer(shared_a_storage, static_cast<size_t>(m_panels * MR * kc_max))
               : nullptr;
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t k0 = blk * kc_max, kc = std::min(kc_max, K - k0);
    // op(B)[k, j] is op(B^T)[j, k]: B's panels pack like A's with the transpose flipped.
    // One parallel region packs B's panels, then A's when they are shared.
    const int64_t packs = n_panels + (shared_a ? m_panels : 0);
    parallel_for(0, packs, 4, [&](int64_t p0, int64_t p1) {
      for (int64_t q = p0; q < p1; ++q) {
        if (q < n_panels) {
          pack_panel(B, ldb, !trans_b, q * NR, std::min<int64_t>(NR, N - q * NR), k0, kc, NR,
                     bp + q * NR * kc);
        } else {
          const int64_t i = q - n_panels;
          pack_panel(A, lda, trans_a, i * MR, std::min<int64_t>(MR, M - i * MR), k0, kc, MR,
                     ap_shared + i * MR * kc);
        }
      }
    });
    parallel_for(0, m_tasks * n_split, 1, [&](int64_t t0, int64_t t1) {
      thread_local std::vector<float> a_storage;
      float* ap = shared_a
                      ? nullptr
                      : aligned_buffer(a_storage, static_cast<size_t>(kPanelsPerTask * MR * kc));
      for (int64_t t = t0; t < t1; ++t) {
        const int64_t mt = t / n_split, part = t % n_split;
        const int64_t i0 = mt * kPanelsPerTask, i1 = std::min(m_panels, i0 + kPanelsPerTask);
        const int64_t j0 = n_panels * part / n_split, j1 = n_panels * (part + 1) / n_split;
        const float* a_block = shared_a ? ap_shared + i0 * MR * kc : ap;
        if (!shared_a) {
          for (int64_t i = i0; i < i1; ++i) {
            if (direct_a && full(i)) continue;  // read in place
            pack_panel(A, lda, trans_a, i * MR, std::min<int64_t>(MR, M - i * MR), k0, kc, MR,
                       ap + (i - i0) * MR * kc);
          }
        }
        for (int64_t j = j0; j < j1; ++j)
          for (int64_t i = i0; i < i1; ++i)
            tile(i, j, a_block + (i - i0) * MR * kc, bp + j * NR * kc, k0, kc, blk == 0);
      }
    });
  }
}

}  // namespace ortmodule
