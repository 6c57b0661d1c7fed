// FusedElementwise's `program` attribute, decoded once for the CPU and the CUDA kernels.
#pragma once

#include <vector>

#include "kernels/math/fused_elementwise.h"
#include "ops/op_table.h"

namespace ortmodule {

// The node's program, checked against its input count; `conditions` marks inputs that are
// Where conditions (bool), which no other instruction may read.
std::vector<ElementwiseInstruction> decode_fused_program(const OpContext& ctx,
                                                         std::vector<bool>* conditions);

}  // namespace ortmodule
