// bfloat16 and float16 graphs (torch.autocast regions, half-precision models) on float32
// kernels: every op that reads or writes such values computes in float32 between Casts, so
// each value is rounded exactly where eager PyTorch and numpy round it (once per op, after
// computing in float32; reductions, softmax, normalisation and GEMM accumulate in float32).
// Ops that only move elements run on the 16-bit data directly, and so do the matrix
// products (MatMul, Gemm, FusedMatMul, FusedMatMulSumToShape, FusedMatMulBias) and the
// convolutions whose pads are even (Conv, ConvGrad): their kernels take 16-bit operands,
// accumulate in float32 and round each result once (ops/widened_kernel.h on the CPU,
// tensor-core GEMMs and cuDNN on CUDA), as eager's 16-bit products and convolutions do.
#pragma once

#include "ir/graph.h"

namespace ortmodule {

// Returns the number of ops moved to float32 (0 when the graph has no 16-bit float value).
int compute_low_precision_in_float32(Graph& graph);

}  // namespace ortmodule
