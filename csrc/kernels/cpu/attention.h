// Fused attention: O = softmax(scale * Q K^T (+ mask)) V in one op, forward and backward
// (ops/attention_ops.cpp, made by passes/attention_fusion.h from MatMul(Q, Transpose(K)) ->
// ScaledMaskedSoftmax -> MatMul(., V)).
//
// Q: [batch, S, D], K: [batch, T, D], V: [batch, T, Dv] -> O: [batch, S, Dv] (batch: the
// product of the leading dims, heads included), each where its AttentionOperand says. The mask
// (additive, or boolean with a fill) broadcasts to the scores, [batch, S, T], through
// `mask_strides`.
//
// Two ways to run, chosen per call by the caller:
// - probs given ([batch, S, T]): the softmax output is kept for backward (for moderate
//   S * T);
// - probs null: rows are processed in blocks that keep their [rows, T] scores in cache, and
//   backward recomputes them, so memory stays O(S) per head instead of O(S * T). Key columns
//   that the mask drops for every row of a block (a causal mask's upper triangle, boolean or
//   additive with the dtype's lowest value) are skipped by the products when their softmax
//   weight is exactly zero.
// Where the mask leaves so many columns out that the blocked way is cheaper even with
// its recomputation (a causal mask), it is taken although probs is given (which then stays
// unwritten, and backward recomputes: the choice depends only on the mask and the shapes).
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/cpu/softmax.h"

namespace ortmodule {

// Batch entry b's matrix of an operand: row i starts at element off[b] + i * ld (a
// contiguous [batch, rows, cols] tensor: off[b] = b * rows * cols, ld = cols; a [B, rows, H,
// cols] one read as [B * H, rows, cols]: off[b] = (b / H) * rows * H * cols + (b % H) * cols,
// ld = H * cols; a broadcast leading dim repeats offsets).
struct AttentionOperand {
  std::vector<int64_t> off;  // one per batch entry
  int64_t ld = 0;
};

template <typename T>
struct AttentionArgs {
  int64_t batch = 0, S = 0, T_ = 0, D = 0, Dv = 0;
  T scale = T(1);
  // The scores' shape, [lead..., S, T] (lead: the leading dims of the output), and the mask's
  // strides broadcast to it (empty without a mask).
  std::vector<int64_t> scores_shape, mask_strides;
  // Where each operand's matrices lie: q, k, v, o (the output, and dO in backward) and the
  // gradients dq, dk, dv (over the output's leading dims; the caller sums broadcast ones).
  AttentionOperand q, k, v, o, dq, dk, dv;
  const T* mask = nullptr;        // additive mask, or null
  const uint8_t* keep = nullptr;  // boolean mask (one byte per element), or null
  T fill = T(0);                  // the value of dropped scores (boolean mask)
  // Dropout on the softmax (ratio 0: none): element i of the [batch, S, T] softmax is kept
  // when math::dropout_keeps(dropout_seed, i, ratio), and scaled by 1 / (1 - ratio), as the
  // Dropout op it replaces draws it; backward draws the same elements again.
  double dropout_ratio = 0;
  uint64_t dropout_seed = 0;
};

// q, k, v -> o, and probs (the softmax, [batch, S, T], contiguous) when not null.
template <typename T>
void attention_forward(const AttentionArgs<T>& a, const T* q, const T* k, const T* v, T* o,
                       T* probs);

// dO -> dQ, dK, dV (each nullable: not wanted; each [batch, ...], summed over broadcast dims
// by the caller). probs: the forward's, or null to recompute.
template <typename T>
void attention_backward(const AttentionArgs<T>& a, const T* q, const T* k, const T* v,
                        const T* probs, const T* dout, T* dq, T* dk, T* dv);

}  // namespace ortmodule
