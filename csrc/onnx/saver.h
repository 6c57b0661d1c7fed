// Serialises an engine Graph (forward plus gradient nodes) back to ONNX bytes,
// for inspection with standard tools (DebugOptions.save_onnx).
#pragma once

#include <string>
#include <vector>

#include "ir/graph.h"

namespace ortmodule {

// extra_inputs / extra_outputs: values to list as graph inputs/outputs besides the
// graph's own (the output gradients fed to backward and the input gradients it returns).
std::string save_onnx_model(const Graph& graph, const std::vector<Value*>& extra_inputs = {},
                            const std::vector<Value*>& extra_outputs = {});

}  // namespace ortmodule
