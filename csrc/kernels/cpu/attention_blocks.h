// The row blocks of the CPU fused attention's blocked way (attention.cpp): how many query rows
// a block holds, and which key columns the mask lets each block leave out of its products
// (the file comment of attention.cpp says when that is exact).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/broadcast.h"
#include "kernels/parallel.h"

namespace ortmodule {
namespace attention_blocks {

// Scores per row block: 256 KiB of float, so a block and its gradient stay in L2 ...
constexpr int64_t kBlockElems = 1 << 16;
// ... but never fewer rows than this: each product of a block packs its other operand (K, V,
// or Q's block rows) once for the block's rows, so that a long sequence's blocks of 16 rows
// spent as long packing as multiplying (GPT-2 4x256 at 4096 tokens: attention 1185 -> 677
// ms per step with 112 rows, Zen 5). 112 rows are 8 of the AVX-512 micro-kernel's 14-row
// panels; the blocks' buffers stay O(T) per thread.
constexpr int64_t kMinBlockRows = 112;

template <typename T>
int64_t block_rows(const AttentionArgs<T>& a) {
  const int64_t rows = std::max(kMinBlockRows, kBlockElems / std::max<int64_t>(1, a.T_));
  return std::min(rows, std::max<int64_t>(1, a.S));
}

// The mask of scores row r (over [batch * S]), from column 0.
template <typename T>
RowMask<T> row_mask(const AttentionArgs<T>& a, int64_t r) {
  RowMask<T> m;
  if (!a.mask && !a.keep) return m;
  const int64_t offset =
      broadcast_offset(a.scores_shape, a.mask_strides, r, a.scores_shape.size() - 1);
  m.step = a.mask_strides.back();
  m.fill = a.fill;
  if (a.keep) {
    m.keep = a.keep + offset;
  } else {
    m.add = a.mask + offset;
  }
  return m;
}

// An additive mask drops a score when it is at most half the dtype's lowest value (torch and
// transformers write torch.finfo(dtype).min or -inf there).
template <typename T>
constexpr T kDropBelow = -std::numeric_limits<T>::max() / 2;

// One past the last element i in [floor, n) that the row's mask keeps (keep[i * step] non-zero,
// or add[i * step] above kDropBelow), or -1 when it keeps none there. Contiguous boolean rows
// are scanned eight bytes at a time.
template <typename T>
int64_t last_kept_above(const RowMask<T>& m, int64_t n, int64_t floor) {
  int64_t i = n;
  if (m.keep) {
    if (m.step == 1) {
      while (i - floor >= 8) {
        uint64_t word;
        std::memcpy(&word, m.keep + i - 8, sizeof(word));
        if (word) break;
        i -= 8;
      }
    }
    for (; i > floor; --i)
      if (m.keep[(i - 1) * m.step]) return i;
    return -1;
  }
  if (m.step == 1) {
    // Sixteen at a time without a branch per element (the compiler's vector compares).
    while (i - floor >= 16) {
      bool kept = false;
      for (int64_t j = i - 16; j < i; ++j) kept |= !(m.add[j] <= kDropBelow<T>);
      if (kept) break;
      i -= 16;
    }
  }
  for (; i > floor; --i)
    if (!(m.add[(i - 1) * m.step] <= kDropBelow<T>)) return i;
  return -1;
}

// Columns [0, extent) of the block's rows [r0, r0 + rows) hold every element the mask keeps;
// T when a row keeps nothing (its softmax spreads over all T) or without a mask.
template <typename T>
int64_t kept_extent(const AttentionArgs<T>& a, int64_t r0, int64_t rows) {
  if (!a.keep && !a.mask) return a.T_;
  int64_t extent = 0;
  // The last rows first: under a causal mask they reach furthest.
  for (int64_t i = rows - 1; i >= 0; --i) {
    const RowMask<T> m = row_mask(a, r0 + i);
    const int64_t last = last_kept_above(m, a.T_, extent);
    if (last == a.T_) return a.T_;
    if (last > 0) {
      extent = last;
    } else if (extent == 0 || last_kept_above(m, extent, 0) < 0) {
      return a.T_;  // the row keeps nothing
    }
  }
  return extent;
}

// The row blocks of the blocked way and the key columns each block's products cover (its
// kept extent). The extents are scanned once per distinct mask among the batch entries: a
// mask broadcast over the heads is scanned once per sample, not once per head and block call.
template <typename T>
class RowBlocks {
 public:
  explicit RowBlocks(const AttentionArgs<T>& a)
      : T_(a.T_), rows(block_rows(a)), count((a.S + rows - 1) / rows) {
    if (!a.keep && !a.mask) return;
    // Batch entries whose first row's mask starts at one offset have the same mask rows (row
    // i of an entry lies i mask rows further on).
    std::vector<int64_t> firsts;  // the first entry of each distinct mask
    entry_.resize(static_cast<size_t>(a.batch));
    for (int64_t b = 0; b < a.batch; ++b) {
      const int64_t offset = mask_offset(a, b);
      size_t d = 0;
      while (d < firsts.size() && mask_offset(a, firsts[d]) != offset) ++d;
      if (d == firsts.size()) firsts.push_back(b);
      entry_[static_cast<size_t>(b)] = static_cast<int64_t>(d);
    }
    extents_.resize(firsts.size() * static_cast<size_t>(count));
    parallel_for(0, static_cast<int64_t>(extents_.size()), 1, [&](int64_t u0, int64_t u1) {
      for (int64_t u = u0; u < u1; ++u) {
        const int64_t b = firsts[static_cast<size_t>(u / count)], s0 = (u % count) * rows;
        extents_[static_cast<size_t>(u)] = kept_extent(a, b * a.S + s0, std::min(rows, a.S - s0));
      }
    });
  }

  // Columns [0, extent) of block `block` of batch entry b hold every key its mask keeps.
  int64_t extent(int64_t b, int64_t block) const {
    if (extents_.empty()) return T_;
    return extents_[static_cast<size_t>(entry_[static_cast<size_t>(b)] * count + block)];
  }

  // Whether the blocked way (recomputing in backward) is cheaper than keeping the softmax: a
  // block's products cover its kept extent, so with the mean extent a fraction f of T,
  // blocked costs 7f products of [S, T] (forward 2, backward 5 with the recomputation)
  // against 6. Estimated on the first batch entry's blocks, the same way in forward and
  // backward.
  bool blocked_is_cheaper() const {
    if (extents_.empty()) return false;
    int64_t covered = 0;
    for (int64_t block = 0; block < count; ++block) covered += extent(0, block);
    return 4 * covered < 3 * count * T_;
  }

 private:
  static int64_t mask_offset(const AttentionArgs<T>& a, int64_t b) {
    return broadcast_offset(a.scores_shape, a.mask_strides, b * a.S, a.scores_shape.size() - 1);
  }

  int64_t T_;

 public:
  const int64_t rows, count;

 private:
  std::vector<int64_t> entry_;    // batch entry -> its distinct mask
  std::vector<int64_t> extents_;  // [distinct mask][block]
};

// For an additive mask, the largest norm of the keys [c, T) of each batch entry ([batch][T +
// 1], the last 0): the bound on the scores of the columns a block leaves out (block_softmax).
// NaN where a NaN (or an overflow to inf) lies among them.
template <typename T>
std::vector<double> key_suffix_norms(const AttentionArgs<T>& a, const T* k) {
  std::vector<double> out(static_cast<size_t>(a.batch * (a.T_ + 1)));
  parallel_for(0, a.batch, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      double* suffix = out.data() + b * (a.T_ + 1);
      suffix[a.T_] = 0;
      for (int64_t t = a.T_ - 1; t >= 0; --t) {
        const T* key = k + a.k.off[b] + t * a.k.ld;
        double sum = 0;
        for (int64_t j = 0; j < a.D; ++j) sum += static_cast<double>(key[j]) * key[j];
        const double norm = std::sqrt(sum), after = suffix[t + 1];
        suffix[t] = std::isnan(norm) || std::isnan(after) ? norm + after : std::max(norm, after);
      }
    }
  });
  return out;
}

}  // namespace attention_blocks
}  // namespace ortmodule
