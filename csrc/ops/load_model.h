// A model the engine runs: the ONNX loader's graph (onnx/loader.h checks its structure and
// dtypes) with every node bound to its row of the op table at the model's opset.
#pragma once

#include <memory>
#include <string>

#include "ir/graph.h"
#include "onnx/loader.h"

namespace ortmodule {

// Binds every node of a loaded graph to its op-table row and numbers its random ops in
// the model's own order (their random streams). An op without a row at the graph's opset
// is an error naming the node, with the list of supported ops.
void bind_ops(Graph& graph);

std::unique_ptr<Graph> load_model(const std::string& bytes, const LoadOptions& options = {});
std::unique_ptr<Graph> load_model_file(const std::string& path, const LoadOptions& options = {});

}  // namespace ortmodule
