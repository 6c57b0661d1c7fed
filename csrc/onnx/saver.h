// Serialises an engine Graph (forward plus gradient nodes) back to ONNX bytes,
// for inspection with standard tools (DebugOptions.save_onnx).
#pragma once

#include <string>

#include "ir/graph.h"

namespace ortmodule {

std::string save_onnx_model(const Graph& graph);

}  // namespace ortmodule
