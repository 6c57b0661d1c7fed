// FusedRotary's operands and attributes as the kernels take them (ops/rotary_ops.cpp), shared
// by the CPU kernel and its CUDA twin; fails naming the node on a bad shape or attribute.
#pragma once

#include "kernels/cpu/rotary.h"
#include "ops/op_table.h"

namespace ortmodule {

RotaryArgs rotary_args(const OpContext& ctx);

}  // namespace ortmodule
