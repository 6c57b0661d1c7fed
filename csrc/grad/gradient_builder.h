// Builds the backward part of a training graph from the forward graph.
//
// For each forward output y that may carry a gradient, a graph input "y_grad" is
// added; walking the nodes in reverse order, each op's gradient rule (from the op
// table) emits nodes computing the gradients of the inputs that need them. Several
// contributions to one value are summed. Nodes are only emitted for values on a
// path from a requested input to an output.
#pragma once

#include <vector>

#include "grad/grad_context.h"
#include "ir/graph.h"

namespace ortmodule {

struct GradientGraphInfo {
  std::vector<Value*> output_grads;  // one per forward output (nullptr: not differentiable)
  std::vector<Value*> input_grads;   // one per requested input (nullptr: gradient is zero)
};

// Extends `graph` in place. `wrt` are graph inputs needing gradients.
GradientGraphInfo build_gradient_graph(Graph& graph, const std::vector<Value*>& wrt);

}  // namespace ortmodule
