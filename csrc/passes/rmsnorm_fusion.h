// Recognises RMS normalisation written out element-wise, as transformers' LlamaRMSNorm is
// exported (torch.nn.RMSNorm's aten.rms_norm lowers to the fused op directly),
//   y = x * 1 / sqrt(mean(x^2, axis=-1, keepdim) + eps) * weight
// (x^2 as Pow(x, 2) or Mul(x, x); 1 / sqrt as Reciprocal(Sqrt), Div(1, Sqrt) or Div(x, Sqrt);
// same-dtype Identity/Cast nodes between the normalisation and the weight), and replaces it
// with one com.microsoft SimplifiedLayerNormalization(x, weight): one pass over the rows
// forward and one SimplifiedLayerNormalizationGrad backward instead of seven nodes and
// about twenty gradient nodes. A norm whose weight multiply does not follow directly (a
// bfloat16 model's Cast back before it) fuses with a ones scale (ConstantOfShape of x's
// last dim) when the norm is rounded to 16 bits next and x's dtype is known. The mean's
// axis must be -1, or the last of an x of known rank. Runs before gradient building, so
// that backward is built from the fused node.
#pragma once

#include <vector>

#include "ir/graph.h"

namespace ortmodule {

// Returns the number of norms fused. Chains whose intermediate values are read elsewhere,
// are graph outputs or are in `keep` (state updates) are left alone; only float32 and
// float64 norms fuse (16-bit ones compute between Casts, passes/low_precision.h).
int fuse_rmsnorm(Graph& graph, const std::vector<Value*>& keep = {});

}  // namespace ortmodule
