// Recognises the rotary position embedding of GPT-NeoX, Llama, Mistral, Qwen and Gemma,
//   x * cos + Concat(-x[..., h:], x[..., :h]) * sin     (rotate_half, torch.cat's order)
// and replaces its seven nodes (two Slices, Neg, Concat, two Muls, Add) with one FusedRotary
// (ops/rotary_ops.cpp): one pass over memory forward and one backward instead of seven and
// about ten, and no sliced halves kept for backward.
#pragma once

#include <vector>

#include "ir/graph.h"

namespace ortmodule {

// Returns the number of embeddings fused. Only float32/float64 x, cos and sin of one dtype;
// chains whose intermediate values are read elsewhere or are in `keep` are left alone.
int fuse_rotary(Graph& graph, const std::vector<Value*>& keep = {});

}  // namespace ortmodule
