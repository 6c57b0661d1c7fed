// CastLike reads its second input for its dtype only, but a read is a read: the value must be
// computed, or kept from forward, until the CastLike runs. The gradient rule of a Cast is
// CastLike(dY, X), so under autocast every Cast's gradient reads the forward value the Cast
// read (a LayerNormalization's float32 output, an activation), and backward would keep
// those values, or recompute them, only for their dtype.
//
// This pass follows the target back through ops whose output has their first input's dtype
// by the op's definition (ONNX's type constraints: Relu, Add, LayerNormalization's Y,
// Reshape, ...). Where that reaches a Cast, whose output dtype is its `to` attribute, the
// CastLike becomes that Cast and reads nothing more; where it reaches a graph input (always
// at hand), the CastLike reads that. Otherwise the CastLike is left as it is. Only op
// definitions decide, never an inferred dtype, so the result is exact.
#pragma once

#include "ir/graph.h"

namespace ortmodule {

// Returns the number of CastLike nodes changed (turned into Casts or retargeted).
int simplify_cast_like_targets(Graph& graph);

}  // namespace ortmodule
