// Fuses attention, as the exporter writes it and attention_softmax_fusion leaves it,
//   MatMul(ScaledMaskedSoftmax(MatMul(Q, Transpose(K)), mask?, fill?; scale), V)
// (the Transpose swapping the last two axes; Identity nodes, dropout at p = 0, may sit between
// the softmax and the second MatMul, and one Dropout: FusedAttentionDropout), into one
// FusedAttention(Q, K, V, mask?, fill?; scale) node (ai.ortmodule): the [..., S, T] scores and
// softmax stay in cache, and are kept for backward only while they are small
// (ops/attention_ops.cpp). Runs after fuse_attention_softmax and before gradient building. Chains
// whose scores or softmax are read elsewhere, are graph outputs or are in `keep` are left alone.
#pragma once

#include <vector>

#include "ir/graph.h"

namespace ortmodule {

// Returns the number of attentions fused.
int fuse_attention(Graph& graph, const std::vector<Value*>& keep = {});

}  // namespace ortmodule
