// Cast and CastLike: shape rules, CPU kernel and gradient rule side by side (the float8,
// 4-bit and 2-bit types are in cast_low_bit.cpp).
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "grad/grad_context.h"
#include "kernels/cpu/convert.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/math/bfloat16.h"
#include "kernels/math/cast.h"
#include "kernels/math/float16.h"
#include "ops/cast_low_bit.h"
#include "ops/op_utils.h"
#include "ops/ops.h"

namespace ortmodule {

// ---- Cast / CastLike ----
//
// numpy's astype semantics (what onnx.reference runs): float to integer truncates toward
// zero, x != 0 makes bool, float16 and bfloat16 round to nearest even. A source element is
// loaded as an arithmetic value (cpu_cast's switch over the source dtype), then stored in
// the destination dtype (cast_from's switch).

namespace {

using math::StoreAs;
using math::StoreBFloat16;
using math::StoreBool;
using math::StoreFloat16;

template <typename Src, typename D, typename Load, typename Store>
void cast_loop(int64_t n, const Src* x, D* y, Load load, Store store) {
  unary_map(n, x, y, [load, store](Src v) { return store(load(v)); });
}

// Converts y.numel() elements read through `load` into y's dtype.
template <typename Src, typename Load>
void cast_from(OpContext& ctx, const Src* x, Tensor& y, Load load) {
  const int64_t n = y.numel();
  switch (y.dtype()) {
    case DType::Float32:
      return cast_loop(n, x, y.data<float>(), load, StoreAs<float>());
    case DType::Float64:
      return cast_loop(n, x, y.data<double>(), load, StoreAs<double>());
    case DType::Float16:
      return cast_loop(n, x, y.data<uint16_t>(), load, StoreFloat16());
    case DType::BFloat16:
      return cast_loop(n, x, y.data<uint16_t>(), load, StoreBFloat16());
    case DType::Int64:
      return cast_loop(n, x, y.data<int64_t>(), load, StoreAs<int64_t>());
    case DType::Int32:
      return cast_loop(n, x, y.data<int32_t>(), load, StoreAs<int32_t>());
    case DType::Int16:
      return cast_loop(n, x, y.data<int16_t>(), load, StoreAs<int16_t>());
    case DType::Int8:
      return cast_loop(n, x, y.data<int8_t>(), load, StoreAs<int8_t>());
    case DType::UInt64:
      return cast_loop(n, x, y.data<uint64_t>(), load, StoreAs<uint64_t>());
    case DType::UInt32:
      return cast_loop(n, x, y.data<uint32_t>(), load, StoreAs<uint32_t>());
    case DType::UInt16:
      return cast_loop(n, x, y.data<uint16_t>(), load, StoreAs<uint16_t>());
    case DType::UInt8:
      return cast_loop(n, x, y.data<uint8_t>(), load, StoreAs<uint8_t>());
    case DType::Bool:
      return cast_loop(n, x, y.data<uint8_t>(), load, StoreBool());
    default:
      ctx.fail("cast to " + dtype_name(y.dtype()) + " is not supported");
  }
}

template <typename Src>
void cast_from(OpContext& ctx, const Src* x, Tensor& y) {
  cast_from(ctx, x, y, [](Src v) { return v; });
}

}  // namespace

void cpu_cast(OpContext& ctx) {
  const Tensor& x = ctx.in(0);
  Tensor& y = ctx.out(0);
  // ---- low-bit types (float8, float4/float6, e8m0, 4-bit and 2-bit integers) ----
  if (dtype_is_low_bit(x.dtype()) || dtype_is_low_bit(y.dtype())) {
    cast_low_bit(ctx, x, y);
    return;
  }
  // ---- end of low-bit types ----
  if (x.dtype() == y.dtype()) {
    if (y.raw() != x.raw() && x.nbytes()) std::memcpy(y.raw(), x.raw(), x.nbytes());
    return;
  }
  // The autocast casts, through the vector conversion (the same bits as the loops below).
  if (x.dtype() == DType::Float32 && y.dtype() == DType::BFloat16)
    return float_to_bf16_array(y.numel(), x.data<float>(), y.data<uint16_t>());
  if (x.dtype() == DType::BFloat16 && y.dtype() == DType::Float32)
    return bf16_to_float_array(y.numel(), x.data<uint16_t>(), y.data<float>());
  switch (x.dtype()) {
    case DType::Float32:
      return cast_from(ctx, x.data<float>(), y);
    case DType::Float64:
      return cast_from(ctx, x.data<double>(), y);
    case DType::Float16:
      return cast_from(ctx, x.data<uint16_t>(), y,
                       [](uint16_t v) { return math::half_to_float(v); });
    case DType::BFloat16:
      return cast_from(ctx, x.data<uint16_t>(), y,
                       [](uint16_t v) { return math::bf16_to_float(v); });
    case DType::Int64:
      return cast_from(ctx, x.data<int64_t>(), y);
    case DType::Int32:
      return cast_from(ctx, x.data<int32_t>(), y);
    case DType::Int16:
      return cast_from(ctx, x.data<int16_t>(), y);
    case DType::Int8:
      return cast_from(ctx, x.data<int8_t>(), y);
    case DType::UInt64:
      return cast_from(ctx, x.data<uint64_t>(), y);
    case DType::UInt32:
      return cast_from(ctx, x.data<uint32_t>(), y);
    case DType::UInt16:
      return cast_from(ctx, x.data<uint16_t>(), y);
    case DType::Bool:
    case DType::UInt8:
      return cast_from(ctx, x.data<uint8_t>(), y);
    default:
      ctx.fail("cast from " + dtype_name(x.dtype()) + " is not supported");
  }
}

namespace {
// A cast to the input's own dtype is a view of its input (as Identity is): no copy.
std::vector<OutputInfo> cast_output(const OpContext& ctx, DType to) {
  std::vector<OutputInfo> out = one_output(to, ctx.in(0).shape());
  if (to == ctx.in(0).dtype()) out[0].alias_of = 0;
  return out;
}
}  // namespace

std::vector<OutputInfo> shape_cast(const OpContext& ctx) {
  int64_t to = ctx.node.attr_int("to", 0);
  if (!dtype_is_supported(static_cast<int32_t>(to)))
    ctx.fail("unsupported target type " + std::to_string(to));
  return cast_output(ctx, static_cast<DType>(to));
}

std::vector<OutputInfo> shape_cast_like(const OpContext& ctx) {
  return cast_output(ctx, ctx.in(1).dtype());
}

// A cast into bool or an integer type is not differentiable, as in PyTorch (`x.bool()`,
// `x.long()`): no gradient flows back through it. Into a floating type (the low-bit floats
// included) the gradient is cast back to the input's type.
void grad_cast(GradContext& g) {
  const Node& n = g.node();
  if (n.op_type != "Cast" && g.input(1) == nullptr)
    g.fail("input 1 (target_type) is missing; CastLike needs a tensor of the target dtype");
  const DType to =
      n.op_type == "Cast" ? static_cast<DType>(n.attr_int("to", 0)) : g.input(1)->dtype;
  const bool floating = to == DType::Undefined || dtype_is_floating(to) ||
                        (dtype_is_low_bit(to) && to != DType::UInt4 && to != DType::Int4 &&
                         to != DType::UInt2 && to != DType::Int2);
  if (!floating) return;
  g.set_input_grad(0, g.emit("CastLike", {g.output_grad(0), g.input(0)}));
}

}  // namespace ortmodule
