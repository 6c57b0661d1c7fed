// A language model's head and its loss in one: cross_entropy(x @ op(w) + bias, labels)
// computed a block of rows at a time, so the [rows, classes] logits, their log-softmax and
// their gradient never exist whole (what passes/linear_cross_entropy_fusion.h makes of
// MatMul (+ Add) -> SoftmaxCrossEntropyLoss).
//
// Shapes: x: [rows, hidden]; w: [classes, hidden] when trans_w (a Linear's weight, a tied
// embedding), else [hidden, classes]; bias: [classes] or nullptr; labels: [rows] int64;
// lse: [rows], the logsumexp of each row's logits (forward's output for backward).
// `block`: scratch of block_rows * classes elements, one block of logits.
//
// Semantics are SoftmaxCrossEntropyLoss's (kernels/cpu/loss.h, without class weights): a row
// whose label is ignore_index (when has_ignore_index) contributes 0 and is left out of the
// Mean divisor (Mean with every row ignored is 0/0 = NaN, as in PyTorch); any other label
// outside [0, classes) throws std::invalid_argument naming it. Row losses are summed in
// double in row order: the result does not depend on the thread count or the block size.
#pragma once

#include <cstdint>

#include "kernels/math/loss.h"

namespace ortmodule {

struct LinearCrossEntropyDims {
  int64_t rows = 0, hidden = 0, classes = 0;
  bool trans_w = true;
  Reduction reduction = Reduction::Mean;
  int64_t ignore_index = -100;
  bool has_ignore_index = false;
  int64_t block_rows = 1;
};

// Rows per block: about kLinearCrossEntropyBlockElements logits, at least 16 rows (so
// that the block's products stay GEMMs, not matrix-vector products), at most `rows`.
constexpr int64_t kLinearCrossEntropyBlockElements = int64_t{1} << 23;
int64_t linear_cross_entropy_block_rows(int64_t rows, int64_t classes);

// x, w, bias?, labels -> loss: [rows] (None) or [1]; lse: [rows]
// logits = x op(w) + bias; lse[r] = logsumexp(logits[r]); loss[r] = lse[r] - logits[r, label].
template <typename T>
void linear_cross_entropy_forward(const LinearCrossEntropyDims& d, const T* x, const T* w,
                                  const T* bias, const int64_t* labels, T* loss, T* lse, T* block);

// dloss: [rows] (None) or [1], x, w, bias?, labels, lse -> dx: [rows, hidden]?, dw: w's
// shape?, dbias: [classes]? (a null output is not computed).
// Each block's logits are computed again; dlogits = (exp(logits - lse) - onehot(label)) * g,
// g = dloss (scaled as the reduction was; 0 for ignored rows); dx = dlogits op(w)^T,
// dw = sum over blocks of dlogits^T x (or x^T dlogits), dbias = column sums of dlogits.
template <typename T>
void linear_cross_entropy_backward(const LinearCrossEntropyDims& d, const T* dloss, const T* x,
                                   const T* w, const T* bias, const int64_t* labels, const T* lse,
                                   T* dx, T* dw, T* dbias, T* block);

}  // namespace ortmodule
