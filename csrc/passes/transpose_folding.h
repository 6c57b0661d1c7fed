// Transpose folding: a matrix product whose operand is a Transpose that only swaps the
// last two dims reads the untransposed tensor instead, with the product's transA/transB
// flag toggled, so the GEMM reads the operand in its stored layout and the copy is never
// made. nn.Linear exports as MatMul(x, Transpose(W)) and attention as
// MatMul(q, Transpose(k)); folding them before gradient building also spares the
// transposes that the Transpose's gradient would add to backward.
#pragma once

#include <vector>

#include "ir/graph.h"

namespace ortmodule {

// Rewrites MatMul, com.microsoft FusedMatMul and Gemm nodes in place (a MatMul becomes a
// FusedMatMul, keeping its name and source location) and drops the Transposes left with no
// reader (unless a graph output or in `keep`). With `for_gradient_building`, an operand is
// folded only where the FusedMatMul gradient rule accepts the result (no trans flag next to
// an operand known to be rank 1). Returns the number of operands folded.
int fold_transposes_into_matmuls(Graph& graph, bool for_gradient_building,
                                 const std::vector<Value*>& keep = {});

}  // namespace ortmodule
