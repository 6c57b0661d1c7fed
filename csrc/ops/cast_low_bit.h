// Cast/CastLike where the input or the output has a low-bit type (dtype_is_low_bit): the
// float8 formats, float4/float6, e8m0 and the 4-bit and 2-bit integers.
#pragma once

#include "ops/op_table.h"

namespace ortmodule {

// Converts x into y's dtype, reading the node's `saturate` and `round_mode` attributes.
void cast_low_bit(OpContext& ctx, const Tensor& x, Tensor& y);

}  // namespace ortmodule
