// MatMul + bias (+ activation) fusion: a product by a weight matrix (MatMul or FusedMatMul,
// as nn.Linear exports over 3-D inputs), the Add of a bias of its last dim and a Relu or Gelu
// reading the sum become one ai.ortmodule FusedMatMulBias, whose GEMM accumulates onto the
// bias and activates each block of rows while it is in cache. Runs after gradient building
// (the rules of the original nodes built backward): the sum stays available as the fused
// node's second output when a gradient rule (GeluGrad, ReluGrad) or another node reads it.
// Under autocast (16-bit products, every other op in float32 between Casts,
// passes/low_precision.h) the product, the widening of its result, the Add of the widened
// 16-bit bias, the rounding of the sum and optionally the widened activation and its rounding
// become one 16-bit FusedMatMulBias: the sum rounded once, the activation computed from the
// rounded sum, as eager's addmm and activation round.
#pragma once

#include <vector>

#include "ir/graph.h"

namespace ortmodule {

// Returns the fused nodes: each product node is rewritten in place (keeping its name, source
// location and place in the order) and the Add and the activation leave the graph. Products read
// elsewhere, values in `keep`, nodes in checkpoint regions and operands of unknown shape are left
// alone.
std::vector<Node*> fuse_matmul_bias(Graph& graph, const std::vector<Value*>& keep = {});

}  // namespace ortmodule
