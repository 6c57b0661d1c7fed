// Backward steps whose results are known zeros. A gradient that autograd does not give (an
// output nobody differentiated: the logits a model returns beside its loss) enters backward
// as zeros, and backward is linear in its incoming gradients: every step that reads such
// zeros only where it is linear in them computes zeros too. The executor then skips the
// step's kernel and hands on zero tensors (a memset, not the products).
#pragma once

#include <vector>

#include "ir/graph.h"

namespace ortmodule {

// Whether `node`'s outputs are all zeros given which of its inputs are (`zero[i]`): only for
// the gradient ops and products known to be linear in the inputs that carry gradients
// (MatMul/Gemm/Mul: one zero factor; the *Grad ops: a zero incoming gradient; Add, Sum,
// Reshape, ...: every input zero). False for any other op.
bool outputs_are_zero(const Node& node, const std::vector<bool>& zero);

// Whether `node` adds its inputs (Sum, Add), so that inputs known to be zeros can be left out
// of it (the executor's leave_out_zero_addends).
bool adds_its_inputs(const Node& node);

}  // namespace ortmodule
