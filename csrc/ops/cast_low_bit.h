// Cast/CastLike where the input or the output has a low-bit type (dtype_is_low_bit): the
// float8 formats, float4/float6, e8m0 and the 4-bit and 2-bit integers.
#pragma once

#include "kernels/math/float8.h"
#include "ops/op_table.h"

namespace ortmodule {

enum class LowBitKind { NotLowBit, MiniFloat, E8M0, SmallInt };

struct LowBitFormat {
  LowBitKind kind = LowBitKind::NotLowBit;
  math::MiniFloat mini{0, 0, 0, math::MiniSpecials::None};  // kind == MiniFloat
  int bits = 8;                                             // kind == SmallInt
  bool is_signed = false;                                   // kind == SmallInt
};

struct CastOptions {
  bool saturate = true;
  math::E8M0Rounding rounding = math::E8M0Rounding::Up;
};

// The format of a low-bit dtype (kind NotLowBit for the others).
LowBitFormat low_bit_format(DType t);
// The node's `saturate` and `round_mode` attributes (fails naming a bad round_mode).
CastOptions cast_options(const OpContext& ctx);

// Converts x into y's dtype, reading the node's `saturate` and `round_mode` attributes.
void cast_low_bit(OpContext& ctx, const Tensor& x, Tensor& y);

}  // namespace ortmodule
