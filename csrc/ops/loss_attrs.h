// Attribute readers of the classification losses, shared by their CPU kernels
// (ops/nn_ops.cpp, which defines them) and CUDA kernels (backends/cuda/loss.cu).
#pragma once

#include <cstdint>

#include "kernels/math/loss.h"
#include "ops/op_table.h"

namespace ortmodule {

// Attribute reduction: "mean" (default), "sum" or "none".
Reduction reduction_of(const OpContext& ctx);
// Scores [N, C, d1, ...] with labels [N, d1, ...] as N, C, D = prod(d1, ...); fails on a
// labels shape that does not match.
void loss_dims(const OpContext& ctx, const Shape& scores, const Shape& labels, int64_t* N,
               int64_t* C, int64_t* D);

}  // namespace ortmodule
