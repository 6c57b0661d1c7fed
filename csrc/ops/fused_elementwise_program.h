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
// The registers' dtype (float32 or float64: that of the inputs, float32 where 16-bit ones are
// widened), and the output's (the registers' or `to`); fail on any other.
DType fused_elementwise_registers(const OpContext& ctx, const std::vector<bool>& conditions);
DType fused_elementwise_output(const OpContext& ctx, DType registers);

std::vector<FusedElementwiseInput> fused_elementwise_inputs(const OpContext& ctx,
                                                            const std::vector<bool>& conditions);

}  // namespace ortmodule
