// Constant folding: a node whose inputs are all constants (Constant nodes, initializers that
// are not fed per call, outputs of nodes folded before it) is run once, with the engine's own
// kernels, when the graph is built, and its outputs become initializers. Shape and Size of a
// value whose shape cannot change between the calls sharing the graph (an initializer fed per
// call: a parameter) fold too. The shape arithmetic that exporters write (Shape, Gather,
// Unsqueeze, Concat, Cast, Range, ConstantOfShape, Equal, Where, Expand chains, constant
// Reshape targets) and the shapes that gradient rules read of parameters then cost nothing
// per step. Nodes left with no reader are dropped.
#pragma once

#include <cstdint>
#include <unordered_set>
#include <vector>

#include "ir/graph.h"

namespace ortmodule {

struct ConstantFoldingResult {
  int folded_forward = 0;   // nodes of `forward` replaced by initializers
  int folded_backward = 0;  // other nodes replaced by initializers
  int removed_dead = 0;     // nodes dropped because nothing read their outputs
};

// `static_shape_values`: values whose declared shape holds on every call (Shape/Size of
// them fold). Values in `keep` (state updates, gradients the caller reads) and graph outputs
// keep their producers. Random, host-call and state-writing nodes never fold or drop. A node
// whose folded output would exceed kMaxFoldedElements stays, so that folding never bloats
// the graph with large tensors.
ConstantFoldingResult fold_constants(Graph& graph,
                                     const std::unordered_set<const Value*>& static_shape_values,
                                     const std::vector<Value*>& keep,
                                     const std::unordered_set<const Node*>& forward = {});

constexpr int64_t kMaxFoldedElements = int64_t{1} << 16;

// The value of `v` computed now, when it and everything it depends on are constants by the
// rules above (Constant nodes, initializers not fed per call, foldable nodes over them; no
// graph input, no Shape of one), with no tensor of the computation above max_elements (each
// released after its last use); an undefined tensor otherwise. The graph is not changed.
Tensor evaluate_constant(const Value* v, int64_t max_elements);

}  // namespace ortmodule
