// Reads of a value for its metadata only. A read is a read: the value must be computed, or
// kept from forward, until the reader runs. These passes make such readers read a value that
// has the same metadata by the ops' definitions and is at hand earlier, so that the value
// itself is no longer kept (or computed) for them. Only op definitions decide, never an
// inferred dtype or shape, so the results are exact.
#pragma once

#include "ir/graph.h"

namespace ortmodule {

// CastLike reads its second input for its dtype only. The gradient rule of a Cast is
// CastLike(dY, X), so under autocast every Cast's gradient reads the forward value the Cast
// read (a LayerNormalization's float32 output, an activation), and backward would keep
// those values, or recompute them, only for their dtype.
//
// This pass follows the target back through ops whose output has their first input's dtype
// by the op's definition (ONNX's type constraints: Relu, Add, LayerNormalization's Y,
// Reshape, ...). Where that reaches a Cast, whose output dtype is its `to` attribute, the
// CastLike becomes that Cast and reads nothing more; where it reaches a graph input (always
// at hand), the CastLike reads that. Otherwise the CastLike is left as it is.
// Returns the number of CastLike nodes changed (turned into Casts or retargeted).
int simplify_cast_like_targets(Graph& graph);

// Shape and Size read their input for its shape only. The gradient builder reads the shapes
// of the values a rule sums back to (Add's operands, a product's bias), and under autocast
// many of those are a Cast's output that nothing else reads once the products take their
// 16-bit operands in place: the Cast would run every step for its shape alone, and a
// widening Cast that a Shape also reads cannot join the fused tree that reads it
// (passes/elementwise_fusion.h).
//
// This pass follows a Shape's (or Size's) input back through ops whose output 0 has their
// input 0's shape by the op's definition (Cast, CastLike, unary element-wise ops, Softmax,
// Dropout's output, the normalizations' Y), and reads the first value of that chain instead.
// Returns the number of Shape and Size nodes that now read an earlier value.
int simplify_shape_reads(Graph& graph);

}  // namespace ortmodule
