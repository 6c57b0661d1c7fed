// bfloat16 graphs (torch.autocast regions) on float32 kernels: every op that reads or
// writes bfloat16 values computes in float32 between Casts, so each bfloat16 value is
// rounded exactly where eager PyTorch rounds it (once per op, after computing in float32).
#pragma once

#include "ir/graph.h"

namespace ortmodule {

// Returns the number of ops moved to float32 (0 when the graph has no bfloat16 value).
int compute_bfloat16_in_float32(Graph& graph);

}  // namespace ortmodule
