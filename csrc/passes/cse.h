// Common-subexpression elimination: nodes with the same op, inputs and attributes
// compute the same values, so later duplicates are removed and their consumers
// rewired to the first one. Gradient rules emit many identical Shape nodes (one per
// broadcast undo); this pass keeps one of each.
#pragma once

#include <unordered_map>

#include "ir/graph.h"

namespace ortmodule {

// Returns the number of nodes removed; `replaced` (optional) receives, for every value
// of a removed node, the value that now stands for it. Random ops are never merged.
int eliminate_common_subexpressions(Graph& graph,
                                    std::unordered_map<Value*, Value*>* replaced = nullptr);

}  // namespace ortmodule
