// Shape subgraphs: forward steps whose results depend only on the shapes of the fed
// inputs (and on constants), such as Shape -> Gather -> Unsqueeze -> Concat -> Reshape
// target, ConstantOfShape masks or Expand shapes in exported transformer graphs. The
// executor computes them once per set of fed input shapes and reuses the results.
#pragma once

#include "ir/graph.h"
#include "plan/plan.h"

namespace ortmodule {

// Whether the VALUE of `node`'s input `input` can change the SHAPE of its outputs
// (Reshape's target, Slice's starts, ConstantOfShape's input, ...). Ops the engine
// does not know count as reading every input that way.
bool input_value_determines_shape(const Node& node, size_t input);

// Sets PlanStep::shape_cached on the forward steps of `plan` (built from `graph`)
// whose outputs are a function of the fed inputs' shapes alone, and
// PlanStep::shape_memo on the forward and backward steps whose output shapes are.
void mark_shape_cached_steps(const Graph& graph, Plan& plan);

}  // namespace ortmodule
