// Recognises GELU's tanh approximation written out elementwise,
//   0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x^3)))
// (Hugging Face's NewGELUActivation / gelu_new, GPT-2's activation), and replaces the eight
// nodes with one Gelu(approximate="tanh"): one pass over memory forward and one backward
// instead of eight and about twenty.
#pragma once

#include <vector>

#include "ir/graph.h"

namespace ortmodule {

// Returns the number of chains fused. Runs on forward graphs of opset >= 20 (where Gelu
// exists); chains whose intermediate values are read elsewhere or are in `keep` (state
// updates) are left alone.
int fuse_tanh_gelu(Graph& graph, const std::vector<Value*>& keep = {});

}  // namespace ortmodule
