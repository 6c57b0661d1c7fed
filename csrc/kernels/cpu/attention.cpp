// Fused attention on the CPU (see attention.h for the two ways it runs).
//
// Operands are read in place through their offsets and row strides (attention.h), so heads
// laid out [batch, seq, heads, dim] need no transposes. With the softmax kept (probs), heads
// are split over threads, each head's products and softmax rows running on one thread while
// its scores are in cache. Without, heads and blocks of query rows are split over threads; a
// block's scores [rows, T] stay in a per-thread buffer (kBlockElems) through the scale, mask,
// softmax and the product with V, and backward recomputes them block by block, summing dK and
// dV of one head on one thread (heads are split over threads, never a head's blocks).
//
// Key columns dropped for every row of a block by the mask (a boolean mask's false, an additive
// mask's value at most half the dtype's lowest) are left out of the block's products when that
// is exact: the unfused softmax gives them exp(score - max) / sum, which is 0 when score - max
// underflows. A boolean mask's score is its fill (torch writes the dtype's lowest or -inf); an
// additive mask's is bounded by the mask plus |scale| |q| |k|. A block where the bound does not
// underflow (a fill near the scores) runs over all T columns.
#include "kernels/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "kernels/cpu/attention_blocks.h"
#include "kernels/gemm.h"
#include "kernels/math/random.h"
#include "kernels/parallel.h"

namespace ortmodule {
namespace {

using attention_blocks::kDropBelow;
using attention_blocks::key_suffix_norms;
using attention_blocks::row_mask;
using attention_blocks::RowBlocks;

// A per-thread buffer of at least n elements, kept from call to call (a fresh [rows, T]
// vector per call cost the kernel's page clearing of megabytes every call).
template <typename T, int Slot>
T* scratch(int64_t n) {
  thread_local std::vector<T> storage;
  if (storage.size() < static_cast<size_t>(n)) storage.resize(static_cast<size_t>(n));
  return storage.data();
}

// The softmax of block rows [r0, r0 + rows) of head b over key columns [0, cols) into
// p: [rows, cols] (row stride cols). Returns false when leaving out the columns past `cols`
// would not be exact (see the file comment); p is then garbage. key_norms: head b's
// key_suffix_norms (an additive mask; null otherwise).
template <typename T>
bool block_softmax(const AttentionArgs<T>& a, const T* q, const T* k, int64_t b, int64_t r0,
                   int64_t rows, int64_t cols, const double* key_norms, T* p) {
  const T* qb = q + a.q.off[b] + (r0 - b * a.S) * a.q.ld;
  const T* kb = k + a.k.off[b];
  gemm<T>(false, true, rows, cols, a.D, T(1), qb, a.q.ld, kb, a.k.ld, T(0), p, cols);
  // The largest score a left-out column can have: the fill, or for an additive mask
  // kDropBelow plus a bound on |scale * q.k| over the block's rows and the left-out keys
  // (Cauchy-Schwarz, with room for rounding).
  double dropped = static_cast<double>(a.fill);
  if (cols < a.T_ && !a.keep) {
    // A NaN (or inf) among them makes the bound NaN (inf), and the block runs over all
    // columns: the unfused sum of a NaN score and the mask spreads NaN over its row.
    double q_norm = 0;
    for (int64_t i = 0; i < rows && !std::isnan(q_norm); ++i) {
      double sum = 0;
      for (int64_t j = 0; j < a.D; ++j)
        sum += static_cast<double>(qb[i * a.q.ld + j]) * qb[i * a.q.ld + j];
      q_norm = std::isnan(sum) ? sum : std::max(q_norm, sum);
    }
    const double bound =
        std::sqrt(q_norm) * key_norms[cols] * std::abs(static_cast<double>(a.scale));
    dropped = static_cast<double>(kDropBelow<T>) * (1 - 1e-6) + bound * 1.01;
  }
  // exp(dropped - max) must vanish in T (the unfused softmax's exp underflows to 0 below about
  // -104 for float, -745 for double). Any score of the row bounds its max from below, so the
  // first one settles it for almost every row; the max is taken only when it does not.
  const double vanishes = sizeof(T) == 4 ? -110.0 : -750.0;
  for (int64_t i = 0; i < rows; ++i) {
    T* row = p + i * cols;
    attention_scores_row(cols, a.scale, row, row_mask(a, r0 + i), row);
    if (cols < a.T_ && !(dropped - static_cast<double>(row[0]) < vanishes)) {
      T max = row[0];
      for (int64_t j = 1; j < cols; ++j) max = std::max(max, row[j]);
      if (!(dropped - static_cast<double>(max) < vanishes)) return false;
    }
    softmax_row(cols, row);
  }
  return true;
}

// Dropout of p: [rows, cols] (row stride cols), rows [r0, r0 + rows) of the [batch * S, T]
// softmax, into out (which may be p): keep ? p * scale : 0. The same elements a Dropout over
// the whole softmax keeps (its element index is r * T + column).
template <typename T>
void apply_dropout(const AttentionArgs<T>& a, int64_t r0, int64_t rows, int64_t cols, const T* p,
                   T* out) {
  const T scale = static_cast<T>(1.0 / (1.0 - a.dropout_ratio));
  for (int64_t i = 0; i < rows; ++i) {
    const uint64_t base = static_cast<uint64_t>((r0 + i) * a.T_);
    for (int64_t j = 0; j < cols; ++j)
      out[i * cols + j] = math::dropout_keeps(a.dropout_seed, base + j, a.dropout_ratio)
                              ? p[i * cols + j] * scale
                              : T(0);
  }
}

// Backward uses the dropout twice (for dV and for the softmax's gradient): its elements are
// drawn once into bits ([rows, cols], 1 = kept), then applied with apply_bits.
template <typename T>
void dropout_bits(const AttentionArgs<T>& a, int64_t r0, int64_t rows, int64_t cols,
                  uint8_t* bits) {
  for (int64_t i = 0; i < rows; ++i) {
    const uint64_t base = static_cast<uint64_t>((r0 + i) * a.T_);
    for (int64_t j = 0; j < cols; ++j)
      bits[i * cols + j] = math::dropout_keeps(a.dropout_seed, base + j, a.dropout_ratio);
  }
}

template <typename T>
void apply_bits(const AttentionArgs<T>& a, int64_t n, const uint8_t* bits, const T* p, T* out) {
  const T scale = static_cast<T>(1.0 / (1.0 - a.dropout_ratio));
  for (int64_t i = 0; i < n; ++i) out[i] = bits[i] ? p[i] * scale : T(0);
}

// block_softmax over the block's kept extent `cols`, or over all T columns where that is not
// exact. Returns the columns computed.
template <typename T>
int64_t block_probs(const AttentionArgs<T>& a, const T* q, const T* k, int64_t b, int64_t r0,
                    int64_t rows, int64_t cols, const double* key_norms, T* p) {
  if (block_softmax(a, q, k, b, r0, rows, cols, key_norms, p)) return cols;
  block_softmax(a, q, k, b, r0, rows, a.T_, key_norms, p);
  return a.T_;
}

// key_suffix_norms where block_softmax needs them: an additive mask that leaves columns out.
template <typename T>
std::vector<double> norms_if_needed(const AttentionArgs<T>& a, const RowBlocks<T>& blocks,
                                    const T* k) {
  if (!a.mask || a.keep) return {};
  for (int64_t b = 0; b < a.batch; ++b)
    for (int64_t block = 0; block < blocks.count; ++block)
      if (blocks.extent(b, block) < a.T_) return key_suffix_norms(a, k);
  return {};
}

// Heads are split over threads; each runs its head's products (single-threaded GEMMs) and
// softmax rows while its [S, T] scores are in cache.
template <typename T>
void forward_kept(const AttentionArgs<T>& a, const T* q, const T* k, const T* v, T* o, T* probs) {
  const int64_t S = a.S, Tk = a.T_;
  parallel_for(0, a.batch, 1, [&](int64_t begin, int64_t end) {
    std::vector<T> dropped(a.dropout_ratio > 0 ? static_cast<size_t>(S * Tk) : 0);
    for (int64_t b = begin; b < end; ++b) {
      T* p = probs + b * S * Tk;
      gemm<T>(false, true, S, Tk, a.D, T(1), q + a.q.off[b], a.q.ld, k + a.k.off[b], a.k.ld, T(0),
              p, Tk);
      for (int64_t i = 0; i < S; ++i)
        attention_softmax_row(Tk, a.scale, p + i * Tk, row_mask(a, b * S + i), p + i * Tk);
      const T* weights = p;  // the softmax, or its dropout
      if (a.dropout_ratio > 0) {
        apply_dropout(a, b * S, S, Tk, p, dropped.data());
        weights = dropped.data();
      }
      gemm<T>(false, false, S, a.Dv, Tk, T(1), weights, Tk, v + a.v.off[b], a.v.ld, T(0),
              o + a.o.off[b], a.o.ld);
    }
  });
}

template <typename T>
void forward_blocked(const AttentionArgs<T>& a, const RowBlocks<T>& blocks, const T* q, const T* k,
                     const T* v, T* o) {
  const int64_t br = blocks.rows;
  const std::vector<double> norms = norms_if_needed(a, blocks, k);
  parallel_for(0, a.batch * blocks.count, 1, [&](int64_t begin, int64_t end) {
    T* p = scratch<T, 0>(br * a.T_);
    for (int64_t u = begin; u < end; ++u) {
      const int64_t b = u / blocks.count, block = u % blocks.count, s0 = block * br;
      const int64_t rows = std::min(br, a.S - s0), r0 = b * a.S + s0;
      const int64_t cols = block_probs(a, q, k, b, r0, rows, blocks.extent(b, block),
                                       norms.empty() ? nullptr : norms.data() + b * (a.T_ + 1), p);
      if (a.dropout_ratio > 0) apply_dropout(a, r0, rows, cols, p, p);
      gemm<T>(false, false, rows, a.Dv, cols, T(1), p, cols, v + a.v.off[b], a.v.ld, T(0),
              o + a.o.off[b] + s0 * a.o.ld, a.o.ld);
    }
  });
}

template <typename T>
void backward_kept(const AttentionArgs<T>& a, const T* q, const T* k, const T* v, const T* probs,
                   const T* dout, T* dq, T* dk, T* dv) {
  const int64_t S = a.S, Tk = a.T_;
  parallel_for(0, a.batch, 1, [&](int64_t begin, int64_t end) {
    std::vector<T> ds(static_cast<size_t>(S * Tk));
    std::vector<T> dropped(a.dropout_ratio > 0 && dv ? static_cast<size_t>(S * Tk) : 0);
    std::vector<uint8_t> bits(a.dropout_ratio > 0 ? static_cast<size_t>(S * Tk) : 0);
    for (int64_t b = begin; b < end; ++b) {
      const T* p = probs + b * S * Tk;
      const T* dob = dout + a.o.off[b];
      if (!bits.empty()) dropout_bits(a, b * S, S, Tk, bits.data());
      if (dv) {
        const T* weights = p;  // the softmax, or its dropout
        if (!bits.empty()) {
          apply_bits(a, S * Tk, bits.data(), p, dropped.data());
          weights = dropped.data();
        }
        gemm<T>(true, false, Tk, a.Dv, S, T(1), weights, Tk, dob, a.o.ld, T(0), dv + a.dv.off[b],
                a.dv.ld);
      }
      if (!dq && !dk) continue;
      gemm<T>(false, true, S, Tk, a.Dv, T(1), dob, a.o.ld, v + a.v.off[b], a.v.ld, T(0), ds.data(),
              Tk);
      // Through the dropout first (the product's gradient is its output's), then the softmax.
      if (!bits.empty()) apply_bits(a, S * Tk, bits.data(), ds.data(), ds.data());
      for (int64_t i = 0; i < S; ++i)
        attention_softmax_grad_row(Tk, a.scale, ds.data() + i * Tk, p + i * Tk,
                                   row_mask(a, b * S + i), ds.data() + i * Tk);
      if (dq)
        gemm<T>(false, false, S, a.D, Tk, T(1), ds.data(), Tk, k + a.k.off[b], a.k.ld, T(0),
                dq + a.dq.off[b], a.dq.ld);
      if (dk)
        gemm<T>(true, false, Tk, a.D, S, T(1), ds.data(), Tk, q + a.q.off[b], a.q.ld, T(0),
                dk + a.dk.off[b], a.dk.ld);
    }
  });
}

template <typename T>
void backward_blocked(const AttentionArgs<T>& a, const RowBlocks<T>& blocks, const T* q, const T* k,
                      const T* v, const T* dout, T* dq, T* dk, T* dv) {
  const int64_t br = blocks.rows;
  const std::vector<double> norms = norms_if_needed(a, blocks, k);
  parallel_for(0, a.batch, 1, [&](int64_t begin, int64_t end) {
    T* p = scratch<T, 0>(br * a.T_);
    T* ds = scratch<T, 1>(br * a.T_);
    uint8_t* bits = a.dropout_ratio > 0 ? scratch<uint8_t, 2>(br * a.T_) : nullptr;
    for (int64_t b = begin; b < end; ++b) {
      const T* kb = k + a.k.off[b];
      const T* vb = v + a.v.off[b];
      const T* qb = q + a.q.off[b];
      T* dkb = dk ? dk + a.dk.off[b] : nullptr;
      T* dvb = dv ? dv + a.dv.off[b] : nullptr;
      for (int64_t t = 0; t < a.T_; ++t) {
        if (dkb) std::fill(dkb + t * a.dk.ld, dkb + t * a.dk.ld + a.D, T(0));
        if (dvb) std::fill(dvb + t * a.dv.ld, dvb + t * a.dv.ld + a.Dv, T(0));
      }
      for (int64_t s0 = 0; s0 < a.S; s0 += br) {
        const int64_t rows = std::min(br, a.S - s0), r0 = b * a.S + s0;
        const int64_t cols =
            block_probs(a, q, k, b, r0, rows, blocks.extent(b, s0 / br),
                        norms.empty() ? nullptr : norms.data() + b * (a.T_ + 1), p);
        const T* dob = dout + a.o.off[b] + s0 * a.o.ld;
        if (dvb) {
          const T* weights = p;  // the softmax, or its dropout (drawn again, into ds)
          if (a.dropout_ratio > 0) {
            dropout_bits(a, r0, rows, cols, bits);
            apply_bits(a, rows * cols, bits, p, ds);
            weights = ds;
          }
          gemm<T>(true, false, cols, a.Dv, rows, T(1), weights, cols, dob, a.o.ld, T(1), dvb,
                  a.dv.ld);
        }
        if (!dq && !dkb) continue;
        gemm<T>(false, true, rows, cols, a.Dv, T(1), dob, a.o.ld, vb, a.v.ld, T(0), ds, cols);
        if (a.dropout_ratio > 0) {
          if (!dvb) dropout_bits(a, r0, rows, cols, bits);
          apply_bits(a, rows * cols, bits, ds, ds);
        }
        for (int64_t i = 0; i < rows; ++i)
          attention_softmax_grad_row(cols, a.scale, ds + i * cols, p + i * cols,
                                     row_mask(a, r0 + i), ds + i * cols);
        if (dq)
          gemm<T>(false, false, rows, a.D, cols, T(1), ds, cols, kb, a.k.ld, T(0),
                  dq + a.dq.off[b] + s0 * a.dq.ld, a.dq.ld);
        if (dkb)
          gemm<T>(true, false, cols, a.D, rows, T(1), ds, cols, qb + s0 * a.q.ld, a.q.ld, T(1), dkb,
                  a.dk.ld);
      }
    }
  });
}

// Zeros an operand's matrices ([rows, cols] per batch entry).
template <typename T>
void fill_rows(const AttentionArgs<T>& a, const AttentionOperand& x, int64_t rows, int64_t cols,
               T* data) {
  for (int64_t b = 0; b < a.batch; ++b)
    for (int64_t i = 0; i < rows; ++i) {
      T* row = data + x.off[b] + i * x.ld;
      std::fill(row, row + cols, T(0));
    }
}

}  // namespace

template <typename T>
void attention_forward(const AttentionArgs<T>& a, const T* q, const T* k, const T* v, T* o,
                       T* probs) {
  if (a.batch == 0 || a.S == 0 || a.Dv == 0) return;
  if (a.T_ == 0) {  // a softmax over no keys: no weights, nothing to sum
    fill_rows(a, a.o, a.S, a.Dv, o);
    return;
  }
  if (probs && !a.mask && !a.keep) return forward_kept(a, q, k, v, o, probs);
  const RowBlocks<T> blocks(a);
  if (probs && !blocks.blocked_is_cheaper()) {
    forward_kept(a, q, k, v, o, probs);
  } else {
    forward_blocked(a, blocks, q, k, v, o);
  }
}

template <typename T>
void attention_backward(const AttentionArgs<T>& a, const T* q, const T* k, const T* v,
                        const T* probs, const T* dout, T* dq, T* dk, T* dv) {
  if (a.T_ == 0 || a.S == 0 || a.batch == 0) {
    if (dq) fill_rows(a, a.dq, a.S, a.D, dq);
    if (dk) fill_rows(a, a.dk, a.T_, a.D, dk);
    if (dv) fill_rows(a, a.dv, a.T_, a.Dv, dv);
    return;
  }
  if (probs && !a.mask && !a.keep) return backward_kept(a, q, k, v, probs, dout, dq, dk, dv);
  const RowBlocks<T> blocks(a);
  if (probs && !blocks.blocked_is_cheaper()) {
    backward_kept(a, q, k, v, probs, dout, dq, dk, dv);
  } else {
    backward_blocked(a, blocks, q, k, v, dout, dq, dk, dv);
  }
}

template void attention_forward<float>(const AttentionArgs<float>&, const float*, const float*,
                                       const float*, float*, float*);
template void attention_forward<double>(const AttentionArgs<double>&, const double*, const double*,
                                        const double*, double*, double*);
template void attention_backward<float>(const AttentionArgs<float>&, const float*, const float*,
                                        const float*, const float*, const float*, float*, float*,
                                        float*);
template void attention_backward<double>(const AttentionArgs<double>&, const double*, const double*,
                                         const double*, const double*, const double*, double*,
                                         double*, double*);

}  // namespace ortmodule
