// FusedElementwise's `program` attribute, decoded once for the CPU and the CUDA kernels.
#pragma once

#include <vector>

#include "kernels/cpu/fused_elementwise.h"
#include "kernels/math/fused_elementwise.h"
#include "ops/op_table.h"

namespace ortmodule {

// The node's program, checked against its input count; `conditions` marks inputs that are
// Where conditions (bool), which no other instruction may read.
std::vector<ElementwiseInstruction> decode_fused_program(const OpContext& ctx,
                                                         std::vector<bool>* conditions);

// The node's inputs as the kernels read them: data, shape and whether each is a Where
// condition (`conditions`, from decode_fused_program).
std::vector<FusedElementwiseInput> fused_elementwise_inputs(const OpContext& ctx,
                                                            const std::vector<bool>& conditions);

}  // namespace ortmodule
