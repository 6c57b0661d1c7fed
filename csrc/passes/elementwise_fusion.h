// Collapses trees of element-wise ops into single FusedElementwise nodes (ai.ortmodule): one
// pass over memory per tree instead of one per op, with every intermediate kept in a
// cache-resident block (kernels/cpu/fused_elementwise.h).
//
// Runs after gradient building, so forward and backward chains (RMSNorm's Pow, Add, Sqrt,
// Reciprocal and Mul, SiLU's Sigmoid and Mul and their gradients, residual Adds) fuse and
// no gradient rule is needed. A tree's intermediate values have exactly one reader, are no
// graph output, are not in `keep`, and stay on one side of the forward/backward split, so
// nothing forward keeps for backward is absorbed.
#pragma once

#include <vector>

#include "ir/graph.h"

namespace ortmodule {

struct ElementwiseFusionCounts {
  int forward_nodes = 0;   // forward nodes replaced
  int backward_nodes = 0;  // backward nodes replaced
  int fused_nodes = 0;     // FusedElementwise nodes created
};

// `output_grads` are the backward's inputs (null entries allowed): nodes that depend on
// them are backward nodes.
ElementwiseFusionCounts fuse_elementwise(Graph& graph, const std::vector<Value*>& keep,
                                         const std::vector<Value*>& output_grads);

}  // namespace ortmodule
