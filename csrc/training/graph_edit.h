// Small helpers for passes that add nodes to a Graph outside the gradient builder.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "ir/graph.h"

namespace ortmodule {

// Adds `op` (resolved in the op table at the graph's opset) with one output: `out` when
// given (it gets this node as producer), otherwise a new value named after `name`.
Value* add_op(Graph& g, const std::string& op, const std::string& domain,
              const std::vector<Value*>& inputs,
              std::initializer_list<std::pair<const char*, Attribute>> attrs,
              const std::string& name, Value* out = nullptr);
// An int64 1-D constant.
Value* int64_constant(Graph& g, const std::string& name, const std::vector<int64_t>& values);
// A 0-d float32 constant.
Value* float_constant(Graph& g, const std::string& name, float value);

}  // namespace ortmodule
