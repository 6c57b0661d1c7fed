// Loads an ONNX ModelProto (bytes or file) into the engine's Graph and validates
// it: known dtypes, every value produced before use, graph outputs produced, no cycles.
// Errors name the offending node/value. Which ops the engine runs is the op table's to say:
// ops/load_model.h binds the nodes to it (load_model), as everything that runs a model does.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "ir/graph.h"

namespace ortmodule {

struct LoadOptions {
  // Initializers that become graph inputs fed on every run (parameters and buffers
  // owned by PyTorch). Their stored data is dropped. Appended after the model's own
  // inputs, in this order.
  std::vector<std::string> feed_initializers;
};

std::unique_ptr<Graph> load_onnx_model(const std::string& bytes, const LoadOptions& options = {});
std::unique_ptr<Graph> load_onnx_file(const std::string& path, const LoadOptions& options = {});

}  // namespace ortmodule
