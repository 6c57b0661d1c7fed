// The blocking and threading of the engine's packed GEMMs (kernels/cpu/sgemm.h for float32
// operands, kernels/cpu/bgemm.h for bfloat16 ones), over any operand type and micro-kernel:
//   C[M,N] (float32) = alpha * op(A)[M,K] * op(B)[K,N] + beta * C
// Panels of op(B) (K blocks of up to kKc columns of K, nr columns of N) are packed once per
// call and shared by the threads; each thread packs blocks of mr-row panels of op(A) (or,
// when several threads split one block's B panels, the panels of A are packed once and shared
// too) and runs the micro-kernel over them, so transposed operands cost nothing beyond the
// packing. A panel holds `depth(kc)` steps of the micro-kernel for kc columns of K: kc for
// float32 (one value per step), ceil(kc / 2) for bfloat16 (pairs of values per step). A long
// K against a small C (weight gradients) is first split among the threads (split_k_parts).
//
// A Kernel provides (a copyable struct with public `float alpha, beta`):
//   using In;      the operands' element type
//   using Packed;  a packed panel's element type
//   int mr, nr;    the micro-kernel's tile
//   int64_t k_step;   columns of K per step (K blocks start at multiples of it)
//   int64_t kc_target;  columns of K per block, about (kKc * k_step for one or two columns a
//                       step; an AMX tile's 32 columns a step would make that too deep)
//   void pack(const In* X, int64_t ld, bool trans, int64_t r0, int64_t rows, int64_t k0,
//             int64_t kc, int width, Packed* dst) const;
//       rows [r0, r0 + rows) x columns [k0, k0 + kc) of op(X) (op(X) = X^T when trans) as a
//       panel of `width` rows, rows past `rows` zero: A's panels
//   void pack_b(same arguments) const;
//       the same rows of op(B)^T as a panel of B (pack's layout, or another where the
//       micro-kernel reads its two operands differently)
//   void tile(int64_t kc, const Packed* a, const Packed* b, float* c, int64_t ldc, int m,
//             int n, bool first) const;
//       one mr x nr tile of C from an A panel and a B panel of kc columns of K (the first m
//       rows and n columns written; `first`: C = alpha*ab + beta*C, else C += alpha*ab)
//   bool direct_a(bool trans_a, int64_t n_panels) const;
//       whether tile_a reads A's full panels in place (instead of packing them) in a product
//       with op(A) so and n_panels panels of B
//   void tile_a(int64_t kc, const In* a, int64_t lda, bool trans, const Packed* b, float* c,
//               int64_t ldc, int m, int n, bool first) const;
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "kernels/parallel.h"

namespace ortmodule {
namespace packed_gemm {

// Columns of K per block: a packed B panel (kKc x 32 floats with AVX-512: 32 KiB) and an A
// panel stream through L1 and L2 per micro-kernel call. K up to 1.25 blocks stays whole.
constexpr int64_t kKc = 256;
// A panels per thread task: 8 x 14 rows x kKc floats = 112 KiB of packed A, kept in L2 while
// the task sweeps every B panel.
constexpr int64_t kPanelsPerTask = 8;
// Blocks of A panels from which the tasks are these blocks alone. With fewer, B's panels are
// split too, into kSplitTasks tasks at least (when the panels allow): a few tasks per thread
// of a small machine, so that none waits long for the last one.
constexpr int64_t kMinTasks = 8;
constexpr int64_t kSplitTasks = 16;
// Up to this many B panels, A's full panels are read in place (Kernel::tile_a) instead of
// packed: each A element then serves at most two micro-kernel calls, too few to repay writing
// and reading back a packed copy (a convolution's weights against the few columns of a small
// output: ResNet's 2x2 layers, 32-64 columns per product).
constexpr int64_t kDirectAPanels = 2;
// Up to this many bytes of packed A per K block, every thread packs all of A and takes a share
// of B's panels on its own (the path of a batch of rows). A block this size stays in L2 while
// it serves each B panel, and the threads need not meet between K blocks nor read panels
// another core packed: a weight gradient X^T dY with 256 input features (M = 256, K = tokens)
// ran at 284 GFLOP/s in a GPT-2 step on the shared-panel path, 348 so (Zen 5, 2 threads).
constexpr int64_t kStreamABytes = 320 * 1024;
// split_k_parts: K is split where it is at least this many times N, and the partial products
// stay within this many floats (2 MiB).
constexpr int64_t kSplitKRatio = 3;
constexpr int64_t kSplitKPartial = 1 << 19;

// A 64-byte aligned buffer of at least `count` elements in `storage`.
template <typename P>
P* aligned_buffer(std::vector<P>& storage, size_t count) {
  const size_t pad = 64 / sizeof(P);
  if (storage.size() < count + pad) storage.resize(count + pad);
  auto p = reinterpret_cast<uintptr_t>(storage.data());
  return reinterpret_cast<P*>((p + 63) & ~static_cast<uintptr_t>(63));
}

// How K is cut into blocks: `blocks` blocks of kc_max columns (the last one shorter), each
// `depth(kc)` micro-kernel steps deep; blocks of about kc_target columns.
struct KBlocks {
  int64_t step, kc_max, blocks, d_max;
  KBlocks(int64_t K, int64_t k_step, int64_t kc_target) : step(k_step) {
    const int64_t even = K <= kc_target + kc_target / 4 ? 1 : (K + kc_target - 1) / kc_target;
    // Blocks start at multiples of the step: each but the last holds whole steps.
    kc_max = ((K + even - 1) / even + step - 1) / step * step;
    blocks = (K + kc_max - 1) / kc_max;
    d_max = depth(kc_max);
  }
  int64_t depth(int64_t kc) const { return (kc + step - 1) / step; }
};

// C = alpha * op(A) op(B) + beta * C for M, N, K > 0 over all of K at once (run() below may
// split K first).
template <typename Kernel>
void run_whole_k(const Kernel& kern, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                 const typename Kernel::In* A, int64_t lda, const typename Kernel::In* B,
                 int64_t ldb, float* C, int64_t ldc) {
  using Packed = typename Kernel::Packed;
  const int MR = kern.mr, NR = kern.nr;
  const KBlocks kb(K, kern.k_step, kern.kc_target);
  const auto depth = [&kb](int64_t kc) { return kb.depth(kc); };
  const int64_t m_panels = (M + MR - 1) / MR, n_panels = (N + NR - 1) / NR;
  const int64_t kc_max = kb.kc_max, blocks = kb.blocks, d_max = kb.d_max;
  // Tasks: blocks of A panels, each over a range of B panels.
  const int64_t m_tasks = (m_panels + kPanelsPerTask - 1) / kPanelsPerTask;
  // The A panels shared out evenly among the m tasks (19 panels: 7, 6 and 6, not 8, 8 and 3).
  const auto m_range = [&](int64_t mt, int64_t& i0, int64_t& i1) {
    i0 = m_panels * mt / m_tasks;
    i1 = m_panels * (mt + 1) / m_tasks;
  };
  const int64_t n_split =
      m_tasks >= kMinTasks ? 1 : std::min(n_panels, (kSplitTasks + m_tasks - 1) / m_tasks);
  const bool direct_a = kern.direct_a(trans_a, n_panels);
  const auto full = [&](int64_t i) { return (i + 1) * MR <= M; };
  const auto tile = [&](int64_t i, int64_t j, const Packed* a_panel, const Packed* b_panel,
                        int64_t k0, int64_t kc, bool first) {
    const int rows = static_cast<int>(std::min<int64_t>(MR, M - i * MR));
    const int cols = static_cast<int>(std::min<int64_t>(NR, N - j * NR));
    float* c = C + i * MR * ldc + j * NR;
    if (direct_a && full(i)) {
      const auto* a = trans_a ? A + k0 * lda + i * MR : A + i * MR * lda + k0;
      kern.tile_a(kc, a, lda, trans_a, b_panel, c, ldc, rows, cols, first);
    } else {
      kern.tile(kc, a_panel, b_panel, c, ldc, rows, cols, first);
    }
  };
  const auto pack_a = [&](int64_t i, int64_t k0, int64_t kc, Packed* dst) {
    kern.pack(A, lda, trans_a, i * MR, std::min<int64_t>(MR, M - i * MR), k0, kc, MR, dst);
  };
  // op(B)[k, j] is op(B^T)[j, k]: B's panels pack like A's with the transpose flipped.
  const auto pack_b = [&](int64_t j, int64_t k0, int64_t kc, Packed* dst) {
    kern.pack_b(B, ldb, !trans_b, j * NR, std::min<int64_t>(NR, N - j * NR), k0, kc, NR, dst);
  };
  const int64_t a_bytes = m_panels * MR * d_max * static_cast<int64_t>(sizeof(Packed));
  if (m_tasks == 1 || a_bytes <= kStreamABytes) {
    // Few rows (a batch of up to 112, or A's packed K block within kStreamABytes): the threads
    // split B's panels and run every K block on their own, each packing all of A, so no thread
    // waits on another between K blocks (one parallel region instead of two per K block: the
    // MLP's products have four).
    parallel_for(0, n_panels, 1, [&](int64_t j0, int64_t j1) {
      thread_local std::vector<Packed> a_storage, b_storage_one;
      Packed* ap = aligned_buffer(a_storage, static_cast<size_t>(m_panels * MR * d_max));
      Packed* bq = aligned_buffer(b_storage_one, static_cast<size_t>(NR * d_max));
      for (int64_t blk = 0; blk < blocks; ++blk) {
        const int64_t k0 = blk * kc_max, kc = std::min(kc_max, K - k0), d = depth(kc);
        for (int64_t i = 0; i < m_panels; ++i) {
          if (direct_a && full(i)) continue;  // read in place
          pack_a(i, k0, kc, ap + i * MR * d);
        }
        for (int64_t j = j0; j < j1; ++j) {
          pack_b(j, k0, kc, bq);
          for (int64_t i = 0; i < m_panels; ++i) tile(i, j, ap + i * MR * d, bq, k0, kc, blk == 0);
        }
      }
    });
    return;
  }
  // Split B panels share their A block: then A is packed once per K block, before the tasks
  // (a small M, e.g. a batch of 64 rows, would otherwise pack all of A once per task).
  const bool shared_a = !direct_a && n_split > 1;
  thread_local std::vector<Packed> b_storage, shared_a_storage;
  Packed* bp = aligned_buffer(b_storage, static_cast<size_t>(n_panels * NR * d_max));
  Packed* ap_shared =
      shared_a ? aligned_buffer(shared_a_storage, static_cast<size_t>(m_panels * MR * d_max))
               : nullptr;
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t k0 = blk * kc_max, kc = std::min(kc_max, K - k0), d = depth(kc);
    // One parallel region packs B's panels, then A's when they are shared.
    const int64_t packs = n_panels + (shared_a ? m_panels : 0);
    parallel_for(0, packs, 4, [&](int64_t p0, int64_t p1) {
      for (int64_t q = p0; q < p1; ++q) {
        if (q < n_panels)
          pack_b(q, k0, kc, bp + q * NR * d);
        else
          pack_a(q - n_panels, k0, kc, ap_shared + (q - n_panels) * MR * d);
      }
    });
    parallel_for(0, m_tasks * n_split, 1, [&](int64_t t0, int64_t t1) {
      thread_local std::vector<Packed> a_storage;
      Packed* ap = shared_a
                       ? nullptr
                       : aligned_buffer(a_storage, static_cast<size_t>(kPanelsPerTask * MR * d));
      for (int64_t t = t0; t < t1; ++t) {
        const int64_t mt = t / n_split, part = t % n_split;
        int64_t i0, i1;
        m_range(mt, i0, i1);
        const int64_t j0 = n_panels * part / n_split, j1 = n_panels * (part + 1) / n_split;
        const Packed* a_block = shared_a ? ap_shared + i0 * MR * d : ap;
        if (!shared_a) {
          for (int64_t i = i0; i < i1; ++i) {
            if (direct_a && full(i)) continue;  // read in place
            pack_a(i, k0, kc, ap + (i - i0) * MR * d);
          }
        }
        for (int64_t j = j0; j < j1; ++j)
          for (int64_t i = i0; i < i1; ++i)
            tile(i, j, a_block + (i - i0) * MR * d, bp + j * NR * d, k0, kc, blk == 0);
      }
    });
  }
}

// Into how many parts run() splits K (1: none). Unsplit, where A has fewer than kMinTasks
// tasks of panels the threads divide B's panels, and each packs all of A (few rows) or they
// meet twice per K block to share A's panels; both cost most where K is long against C's
// N: a weight gradient X^T dY over the tokens (M, N the features, K the tokens). Split, each
// thread multiplies a share of K on its own, packing its share of both operands once; the
// partial products, (parts - 1) * M * N floats, are written, read and summed after. Per
// thread that saves about M * K / 2 packed elements and adds 1.5 * M * N moved ones (2
// threads): the split pays for K from kSplitKRatio times N.
inline int64_t split_k_parts(int64_t M, int64_t N, int64_t K, int mr, int64_t kc_target) {
  const int64_t threads = parallel_threads();
  if (threads < 2) return 1;
  const int64_t m_tasks = ((M + mr - 1) / mr + kPanelsPerTask - 1) / kPanelsPerTask;
  if (m_tasks >= kMinTasks || K < kSplitKRatio * N) return 1;
  // Each part at least one whole K block, the partial products at most kSplitKPartial floats.
  const int64_t parts = std::min<int64_t>(threads, K / kc_target);
  return parts >= 2 && (parts - 1) * M * N <= kSplitKPartial ? parts : 1;
}

// run_whole_k over parts of K, one part per thread: part 0 into C (with beta), the others into
// partial products, then summed into C row by row.
template <typename Kernel>
void run_split_k(const Kernel& kern, int64_t parts, bool trans_a, bool trans_b, int64_t M,
                 int64_t N, int64_t K, const typename Kernel::In* A, int64_t lda,
                 const typename Kernel::In* B, int64_t ldb, float* C, int64_t ldc) {
  // Parts start at multiples of the kernel's step (bfloat16 pairs, AMX tiles) and of 16 (cache
  // lines).
  const int64_t unit = kern.k_step * 16;
  const int64_t chunk = ((K + parts - 1) / parts + unit - 1) / unit * unit;
  parts = (K + chunk - 1) / chunk;
  thread_local std::vector<float> partial_storage;
  float* partial = aligned_buffer(partial_storage, static_cast<size_t>((parts - 1) * M * N));
  parallel_for(0, parts, 1, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t k0 = p * chunk, kc = std::min(chunk, K - k0);
      const auto* a = trans_a ? A + k0 * lda : A + k0;
      const auto* b = trans_b ? B + k0 : B + k0 * ldb;
      if (p == 0) {
        run_whole_k(kern, trans_a, trans_b, M, N, kc, a, lda, b, ldb, C, ldc);
      } else {
        Kernel alone = kern;  // alpha * this part alone
        alone.beta = 0.0f;
        run_whole_k(alone, trans_a, trans_b, M, N, kc, a, lda, b, ldb, partial + (p - 1) * M * N,
                    N);
      }
    }
  });
  parallel_for(0, M, 8, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      float* c = C + r * ldc;
      for (int64_t p = 1; p < parts; ++p) {
        const float* part = partial + (p - 1) * M * N + r * N;
        for (int64_t j = 0; j < N; ++j) c[j] += part[j];
      }
    }
  });
}

// C = alpha * op(A) op(B) + beta * C for M, N, K > 0 (the kernel holds alpha and beta).
template <typename Kernel>
void run(const Kernel& kern, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
         const typename Kernel::In* A, int64_t lda, const typename Kernel::In* B, int64_t ldb,
         float* C, int64_t ldc) {
  const int64_t parts = split_k_parts(M, N, K, kern.mr, kern.kc_target);
  if (parts > 1) return run_split_k(kern, parts, trans_a, trans_b, M, N, K, A, lda, B, ldb, C, ldc);
  run_whole_k(kern, trans_a, trans_b, M, N, K, A, lda, B, ldb, C, ldc);
}

// Every panel of op(B) [K, N], packed once for many products with it (PackedSgemmB, sgemm.h):
// panel j of K block blk at (blk * n_panels + j) * nr * d_max.
template <typename Kernel>
void pack_all_b(const Kernel& kern, bool trans_b, int64_t K, int64_t N,
                const typename Kernel::In* B, int64_t ldb, typename Kernel::Packed* out) {
  const int NR = kern.nr;
  const KBlocks kb(K, kern.k_step, kern.kc_target);
  const int64_t n_panels = (N + NR - 1) / NR;
  parallel_for(0, kb.blocks * n_panels, 4, [&](int64_t u0, int64_t u1) {
    for (int64_t u = u0; u < u1; ++u) {
      const int64_t blk = u / n_panels, j = u % n_panels, k0 = blk * kb.kc_max;
      kern.pack_b(B, ldb, !trans_b, j * NR, std::min<int64_t>(NR, N - j * NR), k0,
                  std::min(kb.kc_max, K - k0), NR, out + u * NR * kb.d_max);
    }
  });
}

// run() with op(B)'s panels from pack_all_b: the threads split B's panels, each packing all
// of A per K block (the path of few rows, without B's packing). M, N, K > 0.
template <typename Kernel>
void run_packed_b(const Kernel& kern, bool trans_a, int64_t M, int64_t N, int64_t K,
                  const typename Kernel::In* A, int64_t lda, const typename Kernel::Packed* bp,
                  float* C, int64_t ldc) {
  using Packed = typename Kernel::Packed;
  const int MR = kern.mr, NR = kern.nr;
  const KBlocks kb(K, kern.k_step, kern.kc_target);
  const int64_t m_panels = (M + MR - 1) / MR, n_panels = (N + NR - 1) / NR;
  parallel_for(0, n_panels, 1, [&](int64_t j0, int64_t j1) {
    thread_local std::vector<Packed> a_storage;
    Packed* ap = aligned_buffer(a_storage, static_cast<size_t>(m_panels * MR * kb.d_max));
    for (int64_t blk = 0; blk < kb.blocks; ++blk) {
      const int64_t k0 = blk * kb.kc_max, kc = std::min(kb.kc_max, K - k0), d = kb.depth(kc);
      for (int64_t i = 0; i < m_panels; ++i)
        kern.pack(A, lda, trans_a, i * MR, std::min<int64_t>(MR, M - i * MR), k0, kc, MR,
                  ap + i * MR * d);
      for (int64_t j = j0; j < j1; ++j) {
        const Packed* b_panel = bp + (blk * n_panels + j) * NR * kb.d_max;
        const int cols = static_cast<int>(std::min<int64_t>(NR, N - j * NR));
        for (int64_t i = 0; i < m_panels; ++i) {
          const int rows = static_cast<int>(std::min<int64_t>(MR, M - i * MR));
          kern.tile(kc, ap + i * MR * d, b_panel, C + i * MR * ldc + j * NR, ldc, rows, cols,
                    blk == 0);
        }
      }
    }
  });
}

// C = beta * C (K == 0: the product is empty).
inline void scale_only(int64_t M, int64_t N, float beta, float* C, int64_t ldc) {
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) C[i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[i * ldc + j];
}

}  // namespace packed_gemm
}  // namespace ortmodule
