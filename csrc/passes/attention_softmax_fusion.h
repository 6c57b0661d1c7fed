// Recognises the softmax of attention scores as the exporter writes it,
//   Softmax(Add(Mul(x, c), mask), axis=-1)   (or Div(x, c); the Mul or the Add may be absent)
// with c a one-element constant, and replaces it with one ScaledMaskedSoftmax(x, mask;
// scale=c) node (ai.ortmodule). A boolean mask takes the Add's place as
//   Softmax(Where(keep, Mul(x, c), fill))  or  Softmax(Where(drop, fill, Mul(x, c)))
// (scaled_dot_product_attention's boolean attn_mask and causal mask, masked_fill), fill a
// one-element constant: ScaledMaskedSoftmax(x, keep, fill; scale=c), the second form's mask
// negated by a Not. One pass over the scores forward instead of three, and
// one ScaledMaskedSoftmaxGrad backward instead of SoftmaxGrad, the Add's and the Mul's
// gradients. Runs before gradient building, so that backward is built from the fused node.
#pragma once

#include <vector>

#include "ir/graph.h"

namespace ortmodule {

// Returns the number of softmaxes fused. Chains whose intermediate values are read
// elsewhere, are graph outputs or are in `keep` (state updates) are left alone.
int fuse_attention_softmax(Graph& graph, const std::vector<Value*>& keep = {});

}  // namespace ortmodule
