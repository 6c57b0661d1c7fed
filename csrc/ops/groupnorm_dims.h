// The checked dimensions of InstanceNormalization / GroupNorm (input 0 and scale, bias at
// scale_input) and of GroupNormGrad, shared by the CPU kernels and the CUDA twins
// (groupnorm_ops.cpp).
#pragma once

#include <cstddef>

#include "kernels/cpu/groupnorm.h"
#include "ops/op_table.h"

namespace ortmodule {

GroupNormDims groupnorm_dims(const OpContext& ctx, const Shape& x, size_t scale_input);
GroupNormDims groupnorm_grad_dims(const OpContext& ctx);

}  // namespace ortmodule
