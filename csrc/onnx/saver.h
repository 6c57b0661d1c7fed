// Serialises an engine Graph (forward plus gradient nodes) back to ONNX bytes,
// for inspection with standard tools (DebugOptions.save_onnx).
#pragma once

#include <string>
#include <vector>

#include "ir/graph.h"

namespace ortmodule {

// extra_inputs / extra_outputs: values to list as graph inputs/outputs besides the
// graph's own (the output gradients fed to backward and the input gradients it returns).
// extra_input_like / extra_output_like (empty, or one per extra value): a value of the same
// dtype and shape, whose type is written where the extra value's own is unknown (a gradient
// is shaped like what it is the gradient of). ONNX requires a shape on every graph input and
// output (onnx.checker: "Field 'shape' of 'type' is required").
std::string save_onnx_model(const Graph& graph, const std::vector<Value*>& extra_inputs = {},
                            const std::vector<Value*>& extra_outputs = {},
                            const std::vector<const Value*>& extra_input_like = {},
                            const std::vector<const Value*>& extra_output_like = {});

}  // namespace ortmodule
