// Backward steps whose results are known zeros. A gradient that autograd does not give (an
// output nobody differentiated: the logits a model returns beside its loss) enters backward
// as zeros, and backward is linear in its incoming gradients: every step that reads such
// zeros only where it is linear in them computes zeros too. The executor then skips the
// step's kernel and hands on zero tensors (a memset, not the products).
#pragma once

#include <vector>

#include "ir/graph.h"
#include "ops/op_table.h"

namespace ortmodule {

// Whether `node`'s outputs are all zeros given which of its inputs are (`zero[i]`): only for
// the gradient ops and products known to be linear in the inputs that carry gradients
// (MatMul/Gemm/Mul: one zero factor; the *Grad ops: a zero incoming gradient; Add, Sum,
// Reshape, ...: every input zero). False for any other op.
bool outputs_are_zero(const Node& node, const std::vector<bool>& zero);

// A Sum or Add of backward whose inputs `zero_inputs[k]` are known zeros: those are left out
// of the addition where the others alone have the output's shape (`infos`: the step's one
// output), and a single one left is the output itself (x + 0 is x, bit for bit, but for the
// sign of a zero, which autograd does not add either). Returns that input, if any; else the
// step runs its kernel, over ctx.inputs without the zeros where they could be left out.
const Tensor* leave_out_zero_addends(OpContext& ctx, const std::vector<bool>* zero_inputs,
                                     const std::vector<OutputInfo>& infos, Device device);

}  // namespace ortmodule
