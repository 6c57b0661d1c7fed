// Linear cross-entropy fusion: a language model's head and its loss,
//   SoftmaxCrossEntropyLoss(Reshape(MatMul(x, op(W)) [+ bias], [-1, V]), labels),
// become one ai.ortmodule FusedLinearCrossEntropy(x, W, labels, bias?), which computes the
// logits a block of rows at a time and reduces each block to its rows' logsumexp and target
// logit at once (ops/linear_cross_entropy_ops.cpp): the [rows, V] logits, the
// log-probabilities the unfused loss keeps for backward and their gradient never exist
// whole; backward computes each block's logits again from x, W and the saved logsumexp.
//
// The product is MatMul or FusedMatMul (transB: a Linear's weight, GPT-2's tied embedding)
// or Gemm over a [K, V] or [V, K] weight of known shape, optionally through a Transpose of
// the weight; the bias an Add of a [V] vector (or Gemm's C); between product and loss only
// Identity, Casts that keep the dtype and a Reshape to [N, V]. Label sparsity's gathered
// rows (passes/label_sparsity.h, which runs first) match alike. Left alone: the logits read
// elsewhere (a model that returns them), class weights, a loss whose log_prob is read,
// 16-bit products (autocast: float32 and float64 only), nodes in checkpoint regions. Runs
// before gradient building, whose rule for the fused node emits FusedLinearCrossEntropyGrad.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ir/graph.h"

namespace ortmodule {

// Rewrites the losses it can whose [rows, V] logits would hold at least `min_logits_bytes`
// (0: every one; rows unknown when the graph is built count as too few); returns one line per
// fused loss, for the log. Values in `keep` (state updates) are never removed.
std::vector<std::string> fuse_linear_cross_entropy(Graph& graph,
                                                   const std::vector<Value*>& keep = {},
                                                   int64_t min_logits_bytes = 0);

}  // namespace ortmodule
