// Rewrites the engine's own gradient helpers (domain ai.ortmodule) in a training graph into
// standard ONNX ops and the com.microsoft ops that ONNX Runtime Training publishes, so that
// training artifacts built here also run in that runtime. Helpers with no such form stay;
// engine_only_ops() lists them.
#pragma once

#include <string>
#include <vector>

#include "ir/graph.h"

namespace ortmodule {

void lower_to_interchange_ops(Graph& graph);
// Sorted, distinct "Op (ai.ortmodule)" names of the ops left that only this engine runs.
std::vector<std::string> engine_only_ops(const Graph& graph);

}  // namespace ortmodule
