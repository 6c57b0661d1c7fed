// A constant attention mask that depends only on the distance between key and query, as
// causal and sliding-window masks do (mask[..., i, j] a function of j - i, the same for every
// batch entry and head), is replaced by its one diagonal row: FusedAttention and
// FusedAttentionDropout (passes/attention_fusion.h) take the S + T - 1 values W, with W[S - 1
// - i + j] the mask of query i and key j, and attribute mask_window = 1
// (ops/attention_ops.cpp). The [S, T] mask a model builds from positions each step (Hugging
// Face's causal masks) is then neither built nor held: attention's memory grows with the
// sequence length, not its square. The mask's values are those the model computes (additive
// or boolean, fill unchanged), evaluated once when the graph is built; masks that depend on
// an input (padding) or differ along a diagonal stay as they are.
#pragma once

#include <cstdint>

#include "ir/graph.h"

namespace ortmodule {

// Masks of at most this many elements are evaluated at build time (larger ones stay).
constexpr int64_t kMaxWindowedMaskElements = int64_t{1} << 28;

// Returns the number of masks replaced. Runs after fuse_attention, before gradient building.
int window_attention_masks(Graph& graph);

}  // namespace ortmodule
