// Dims and attributes of FusedLinearCrossEntropy and its gradient, checked, shared by the CPU
// kernels (ops/linear_cross_entropy_ops.cpp, which defines them) and the CUDA kernels
// (backends/cuda/linear_cross_entropy.cu).
#pragma once

#include <cstddef>

#include "kernels/cpu/linear_cross_entropy.h"
#include "ops/op_table.h"

namespace ortmodule {

// x (input `x_index`): [..., hidden], read as [rows, hidden]; w (the next input): [classes,
// hidden] (trans_w, the default) or [hidden, classes]; labels (the one after): rows int64.
// Reads trans_w, reduction ("mean", "sum", "none"), ignore_index and block_rows (0 or absent:
// linear_cross_entropy_block_rows). Fails naming what does not match.
LinearCrossEntropyDims linear_cross_entropy_dims(const OpContext& ctx, size_t x_index);

}  // namespace ortmodule
