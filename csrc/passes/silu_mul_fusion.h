// Recognises the gated unit of Llama's (and Mistral's, Qwen's) MLP, silu(gate) * up, as the
// exporter writes silu: Mul(Mul(g, Sigmoid(g)), u) in any operand order, and replaces its
// three nodes with one SiluMul (ops/silu_mul_ops.cpp): one pass over memory forward and one
// backward instead of three and about seven, and no silu(gate) kept for backward.
#pragma once

#include <vector>

#include "ir/graph.h"

namespace ortmodule {

// Returns the number of units fused. Only float32/float64 g and u of one dtype; chains whose
// intermediate values are read elsewhere or are in `keep` are left alone.
int fuse_silu_mul(Graph& graph, const std::vector<Value*>& keep = {});

}  // namespace ortmodule
