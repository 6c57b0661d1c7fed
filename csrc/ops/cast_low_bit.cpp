// Cast/CastLike to and from the low-bit types. Every element goes through one exact
// intermediate: a double for floating sources (float8/float4/float6/e8m0 values, float16,
// bfloat16, float, double) and an int64 for integer sources (bool included), so each
// conversion rounds once, in the target format (kernels/math/float8.h).
#include "ops/cast_low_bit.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include "kernels/cpu/elementwise.h"
#include "kernels/math/bfloat16.h"
#include "kernels/math/cast.h"
#include "kernels/math/float8.h"
#include "ops/op_utils.h"

namespace ortmodule {

LowBitFormat low_bit_format(DType t) {
  LowBitFormat f;
  auto mini = [&f](const math::MiniFloat& m) {
    f.kind = LowBitKind::MiniFloat;
    f.mini = m;
  };
  auto small = [&f](int bits, bool is_signed) {
    f.kind = LowBitKind::SmallInt;
    f.bits = bits;
    f.is_signed = is_signed;
  };
  switch (t) {
    case DType::Float8E4M3FN:
      mini(math::kFloat8E4M3FN);
      break;
    case DType::Float8E4M3FNUZ:
      mini(math::kFloat8E4M3FNUZ);
      break;
    case DType::Float8E5M2:
      mini(math::kFloat8E5M2);
      break;
    case DType::Float8E5M2FNUZ:
      mini(math::kFloat8E5M2FNUZ);
      break;
    case DType::Float4E2M1:
      mini(math::kFloat4E2M1);
      break;
    case DType::Float6E2M3:
      mini(math::kFloat6E2M3);
      break;
    case DType::Float6E3M2:
      mini(math::kFloat6E3M2);
      break;
    case DType::Float8E8M0:
      f.kind = LowBitKind::E8M0;
      break;
    case DType::UInt4:
      small(4, false);
      break;
    case DType::Int4:
      small(4, true);
      break;
    case DType::UInt2:
      small(2, false);
      break;
    case DType::Int2:
      small(2, true);
      break;
    default:
      break;
  }
  return f;
}

CastOptions cast_options(const OpContext& ctx) {
  CastOptions o;
  o.saturate = ctx.node.attr_int("saturate", 1) != 0;
  const std::string mode = ctx.node.attr_string("round_mode", "up");
  if (mode == "up") {
    o.rounding = math::E8M0Rounding::Up;
  } else if (mode == "down") {
    o.rounding = math::E8M0Rounding::Down;
  } else if (mode == "nearest") {
    o.rounding = math::E8M0Rounding::Nearest;
  } else {
    ctx.fail("attribute 'round_mode' must be 'up', 'down' or 'nearest', got '" + mode + "'");
  }
  return o;
}

namespace {

using math::float_to_int;

// Writes n elements read through `load` (which yields a double or an int64) as y's dtype.
template <typename Src, typename Load>
void cast_into(OpContext& ctx, const Src* x, Tensor& y, Load load, const CastOptions& o) {
  using V = decltype(load(x[0]));
  constexpr bool kInt = std::is_integral_v<V>;
  const int64_t n = y.numel();
  const LowBitFormat to = low_bit_format(y.dtype());
  switch (to.kind) {
    case LowBitKind::MiniFloat: {
      const math::MiniFloat f = to.mini;
      const bool sat = o.saturate;
      unary_map(n, x, y.data<uint8_t>(), [=](Src v) {
        return static_cast<uint8_t>(
            math::double_to_minifloat(static_cast<double>(load(v)), f, sat));
      });
      return;
    }
    case LowBitKind::E8M0: {
      const bool sat = o.saturate;
      const math::E8M0Rounding mode = o.rounding;
      unary_map(n, x, y.data<uint8_t>(),
                [=](Src v) { return math::float_to_e8m0(static_cast<float>(load(v)), sat, mode); });
      return;
    }
    case LowBitKind::SmallInt: {
      const int bits = to.bits;
      const bool is_signed = to.is_signed;
      unary_map(n, x, y.data<uint8_t>(), [=](Src v) {
        if constexpr (kInt) {
          return math::int_to_small_int(load(v), bits);
        } else {
          return static_cast<uint8_t>(
              math::float_to_int_bits(static_cast<double>(load(v)), bits, is_signed));
        }
      });
      return;
    }
    case LowBitKind::NotLowBit:
      break;
  }
  auto to_int = [load](auto tag, Src v) {
    using I = decltype(tag);
    if constexpr (kInt) {
      return static_cast<I>(load(v));
    } else {
      return float_to_int<I>(load(v));
    }
  };
  switch (y.dtype()) {
    case DType::Float32:
      unary_map(n, x, y.data<float>(), [load](Src v) { return static_cast<float>(load(v)); });
      break;
    case DType::Float64:
      unary_map(n, x, y.data<double>(), [load](Src v) { return static_cast<double>(load(v)); });
      break;
    case DType::Float16:
      unary_map(n, x, y.data<uint16_t>(), [load](Src v) {
        return static_cast<uint16_t>(
            math::double_to_minifloat(static_cast<double>(load(v)), math::kFloat16, false));
      });
      break;
    case DType::BFloat16:
      unary_map(n, x, y.data<uint16_t>(),
                [load](Src v) { return math::float_to_bf16(static_cast<float>(load(v))); });
      break;
    case DType::Int64:
      unary_map(n, x, y.data<int64_t>(), [to_int](Src v) { return to_int(int64_t{}, v); });
      break;
    case DType::Int32:
      unary_map(n, x, y.data<int32_t>(), [to_int](Src v) { return to_int(int32_t{}, v); });
      break;
    case DType::Int8:
      unary_map(n, x, y.data<int8_t>(), [to_int](Src v) { return to_int(int8_t{}, v); });
      break;
    case DType::UInt8:
      unary_map(n, x, y.data<uint8_t>(), [to_int](Src v) { return to_int(uint8_t{}, v); });
      break;
    case DType::Bool:
      unary_map(n, x, y.data<uint8_t>(),
                [load](Src v) { return static_cast<uint8_t>(load(v) != 0); });
      break;
    default:
      ctx.fail("cast from " + dtype_name(ctx.in(0).dtype()) + " to " + dtype_name(y.dtype()) +
               " is not supported");
  }
}

}  // namespace

void cast_low_bit(OpContext& ctx, const Tensor& x, Tensor& y) {
  CastOptions o = cast_options(ctx);
  const LowBitFormat from = low_bit_format(x.dtype());
  switch (from.kind) {
    case LowBitKind::MiniFloat: {
      // Every code's value, once (at most 256 of them).
      const uint32_t count = 1u << from.mini.width();
      std::vector<double> table(count);
      for (uint32_t c = 0; c < count; ++c) table[c] = math::minifloat_to_float(c, from.mini);
      const double* t = table.data();
      const uint8_t mask = static_cast<uint8_t>(count - 1);
      cast_into(
          ctx, x.data<uint8_t>(), y, [t, mask](uint8_t c) { return t[c & mask]; }, o);
      return;
    }
    case LowBitKind::E8M0:
      cast_into(
          ctx, x.data<uint8_t>(), y,
          [](uint8_t c) { return static_cast<double>(math::e8m0_to_float(c)); }, o);
      return;
    case LowBitKind::SmallInt: {
      const int bits = from.bits;
      const bool is_signed = from.is_signed;
      cast_into(
          ctx, x.data<uint8_t>(), y,
          [bits, is_signed](uint8_t c) { return math::small_int_value(c, bits, is_signed); }, o);
      return;
    }
    case LowBitKind::NotLowBit:
      break;
  }
  switch (x.dtype()) {
    case DType::Float32:
      cast_into(
          ctx, x.data<float>(), y, [](float v) { return static_cast<double>(v); }, o);
      break;
    case DType::Float64:
      cast_into(
          ctx, x.data<double>(), y, [](double v) { return v; }, o);
      break;
    case DType::Float16:
      cast_into(
          ctx, x.data<uint16_t>(), y,
          [](uint16_t v) { return static_cast<double>(math::half_bits_to_float(v)); }, o);
      break;
    case DType::BFloat16:
      cast_into(
          ctx, x.data<uint16_t>(), y,
          [](uint16_t v) { return static_cast<double>(math::bf16_to_float(v)); }, o);
      break;
    case DType::Int64:
      cast_into(
          ctx, x.data<int64_t>(), y, [](int64_t v) { return v; }, o);
      break;
    case DType::Int32:
      cast_into(
          ctx, x.data<int32_t>(), y, [](int32_t v) { return static_cast<int64_t>(v); }, o);
      break;
    case DType::Int8:
      cast_into(
          ctx, x.data<int8_t>(), y, [](int8_t v) { return static_cast<int64_t>(v); }, o);
      break;
    case DType::UInt8:
    case DType::Bool:
      cast_into(
          ctx, x.data<uint8_t>(), y, [](uint8_t v) { return static_cast<int64_t>(v); }, o);
      break;
    default:
      ctx.fail("cast from " + dtype_name(x.dtype()) + " to " + dtype_name(y.dtype()) +
               " is not supported");
  }
}

}  // namespace ortmodule
