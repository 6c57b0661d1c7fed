// Comparison, boolean and selection ops: Equal/Less/Greater/LessOrEqual/
// GreaterOrEqual, Not/And/Or/Xor, IsNaN/IsInf, Where, Min/Max, Mod, and their
// gradient rules (masks and selections built from the same ops).
#include <array>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "grad/grad_context.h"
#include "kernels/cpu/broadcast.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/math/elementwise.h"
#include "ops/op_utils.h"
#include "ops/ops.h"

namespace ortmodule {

// ---- comparisons: bool output, operands of one dtype ----

std::vector<OutputInfo> shape_compare(const OpContext& ctx) {
  expect_same_dtype(ctx, 1);
  return one_output(DType::Bool, broadcast_shapes(ctx, ctx.in(0).shape(), ctx.in(1).shape()));
}

namespace {

template <typename F>
void run_compare(OpContext& ctx, F f) {
  const Tensor& a = ctx.in(0);
  const Tensor& b = ctx.in(1);
  Tensor& y = ctx.out(0);
  ORTM_DISPATCH_ALL(a.dtype(), ctx,
                    binary_map(a.shape(), a.data<scalar_t>(), b.shape(), b.data<scalar_t>(),
                               y.shape(), y.data<uint8_t>(), [&](scalar_t p, scalar_t q) {
                                 return static_cast<uint8_t>(f(p, q));
                               }));
}

void expect_bool(const OpContext& ctx, size_t k) {
  if (ctx.in(k).dtype() != DType::Bool)
    ctx.fail("input " + std::to_string(k) + " has dtype " + dtype_name(ctx.in(k).dtype()) +
             "; expected bool");
}

}  // namespace

void cpu_equal(OpContext& ctx) {
  run_compare(ctx, [](auto p, auto q) { return p == q; });
}
void cpu_less(OpContext& ctx) {
  run_compare(ctx, [](auto p, auto q) { return p < q; });
}
void cpu_greater(OpContext& ctx) {
  run_compare(ctx, [](auto p, auto q) { return p > q; });
}
void cpu_less_or_equal(OpContext& ctx) {
  run_compare(ctx, [](auto p, auto q) { return p <= q; });
}
void cpu_greater_or_equal(OpContext& ctx) {
  run_compare(ctx, [](auto p, auto q) { return p >= q; });
}

// ---- boolean logic ----

std::vector<OutputInfo> shape_logical_binary(const OpContext& ctx) {
  expect_bool(ctx, 0);
  expect_bool(ctx, 1);
  return one_output(DType::Bool, broadcast_shapes(ctx, ctx.in(0).shape(), ctx.in(1).shape()));
}
std::vector<OutputInfo> shape_not(const OpContext& ctx) {
  expect_bool(ctx, 0);
  return one_output(DType::Bool, ctx.in(0).shape());
}
void cpu_and(OpContext& ctx) {
  run_compare(ctx, [](uint8_t p, uint8_t q) { return p && q; });
}
void cpu_or(OpContext& ctx) {
  run_compare(ctx, [](uint8_t p, uint8_t q) { return p || q; });
}
void cpu_xor(OpContext& ctx) {
  run_compare(ctx, [](uint8_t p, uint8_t q) { return (p != 0) != (q != 0); });
}
void cpu_not(OpContext& ctx) {
  const Tensor& x = ctx.in(0);
  unary_map(x.numel(), x.data<uint8_t>(), ctx.out(0).data<uint8_t>(),
            [](uint8_t v) { return static_cast<uint8_t>(v == 0); });
}

// ---- IsNaN / IsInf ----

std::vector<OutputInfo> shape_float_predicate(const OpContext& ctx) {
  if (!dtype_is_floating(ctx.in(0).dtype()))
    ctx.fail("input has dtype " + dtype_name(ctx.in(0).dtype()) + "; expected a float type");
  return one_output(DType::Bool, ctx.in(0).shape());
}
void cpu_isnan(OpContext& ctx) {
  const Tensor& x = ctx.in(0);
  ORTM_DISPATCH_FLOAT(x.dtype(), ctx,
                      unary_map(x.numel(), x.data<scalar_t>(), ctx.out(0).data<uint8_t>(),
                                [](scalar_t v) { return static_cast<uint8_t>(std::isnan(v)); }));
}
void cpu_isinf(OpContext& ctx) {
  const bool pos = ctx.node.attr_int("detect_positive", 1) != 0;
  const bool neg = ctx.node.attr_int("detect_negative", 1) != 0;
  const Tensor& x = ctx.in(0);
  ORTM_DISPATCH_FLOAT(
      x.dtype(), ctx,
      unary_map(x.numel(), x.data<scalar_t>(), ctx.out(0).data<uint8_t>(),
                [&](scalar_t v) { return static_cast<uint8_t>(math::is_inf(v, pos, neg)); }));
}

// ---- Where(condition, x, y) ----

std::vector<OutputInfo> shape_where(const OpContext& ctx) {
  expect_bool(ctx, 0);
  if (ctx.in(2).dtype() != ctx.in(1).dtype()) {
    ctx.fail("X has dtype " + dtype_name(ctx.in(1).dtype()) + " but Y has " +
             dtype_name(ctx.in(2).dtype()) + "; both must match");
  }
  Shape s = broadcast_shapes(ctx, ctx.in(0).shape(), ctx.in(1).shape());
  return one_output(ctx.in(1).dtype(), broadcast_shapes(ctx, s, ctx.in(2).shape()));
}

void cpu_where(OpContext& ctx) {
  const Tensor& c = ctx.in(0);
  const Tensor& x = ctx.in(1);
  const Tensor& y = ctx.in(2);
  Tensor& out = ctx.out(0);
  const uint8_t* cp = c.data<uint8_t>();
  ORTM_DISPATCH_BITS(x.dtype(), ctx, {
    const scalar_t* xp = x.data<scalar_t>();
    const scalar_t* yp = y.data<scalar_t>();
    scalar_t* op = out.data<scalar_t>();
    for_each_broadcast<3>(out.shape(), {c.shape(), x.shape(), y.shape()},
                          [&](int64_t i, const std::array<int64_t, 3>& o) {
                            op[i] = cp[o[0]] ? xp[o[1]] : yp[o[2]];
                          });
  });
}

void grad_where(GradContext& g) {
  if (g.needs_grad(0)) g.fail("the condition of Where has no gradient");
  Value* dy = g.output_grad(0);
  Value* zero = g.scalar_constant(0.0, dy);
  if (g.needs_grad(1))
    g.set_input_grad(1, g.sum_to_shape(g.emit("Where", {g.input(0), dy, zero}), g.input(1)));
  if (g.needs_grad(2))
    g.set_input_grad(2, g.sum_to_shape(g.emit("Where", {g.input(0), zero, dy}), g.input(2)));
}

// ---- Min / Max (variadic, broadcasting) ----

namespace {
template <typename F>
void run_variadic(OpContext& ctx, F f) {
  Tensor& y = ctx.out(0);
  ORTM_DISPATCH_NUMERIC(y.dtype(), ctx, {
    const Tensor& first = ctx.in(0);
    binary_map(first.shape(), first.data<scalar_t>(), Shape{}, first.data<scalar_t>(), y.shape(),
               y.data<scalar_t>(), [](scalar_t p, scalar_t) { return p; });
    for (size_t i = 1; i < ctx.num_inputs(); ++i) {
      binary_map(y.shape(), y.data<scalar_t>(), ctx.in(i).shape(), ctx.in(i).data<scalar_t>(),
                 y.shape(), y.data<scalar_t>(),
                 [&](scalar_t p, scalar_t q) { return static_cast<scalar_t>(f(p, q)); });
    }
  });
}
}  // namespace

void cpu_max(OpContext& ctx) {
  // NaN propagates, as in torch.maximum and the ONNX reference.
  run_variadic(ctx, [](auto p, auto q) { return math::maximum(p, q); });
}
void cpu_min(OpContext& ctx) {
  run_variadic(ctx, [](auto p, auto q) { return math::minimum(p, q); });
}

// The gradient goes to the inputs equal to the result, split evenly among ties
// (torch.maximum/minimum do the same for two inputs).
void grad_min_max(GradContext& g) {
  Value* y = g.output(0);
  Value* dy = g.output_grad(0);
  const size_t n = g.node().inputs.size();
  if (n == 1) {
    g.set_input_grad(0, dy);
    return;
  }
  std::vector<Value*> masks;
  for (size_t i = 0; i < n; ++i)
    masks.push_back(g.emit("CastLike", {g.emit("Equal", {g.input(i), y}), dy}));
  Value* count = g.emit("Sum", masks);
  Value* share = g.emit("Div", {dy, count});
  for (size_t i = 0; i < n; ++i)
    if (g.needs_grad(i))
      g.set_input_grad(i, g.sum_to_shape(g.emit("Mul", {share, masks[i]}), g.input(i)));
}

// ---- Mod(a, b; fmod) ----
// fmod=1: truncated quotient (C fmod); fmod=0: floored quotient (Python %), for floats as
// opset 28 defines it (earlier opsets leave fmod=0 on floats undefined).

void cpu_mod(OpContext& ctx) {
  const bool fmod = ctx.node.attr_int("fmod", 0) != 0;
  const Tensor& a = ctx.in(0);
  const Tensor& b = ctx.in(1);
  Tensor& y = ctx.out(0);
  if (!dtype_is_floating(a.dtype())) {
    for (int64_t i = 0; i < b.numel(); ++i)
      if (b.int_at(i) == 0) ctx.fail("integer modulo by zero");
  }
  ORTM_DISPATCH_NUMERIC(
      a.dtype(), ctx,
      binary_map(a.shape(), a.data<scalar_t>(), b.shape(), b.data<scalar_t>(), y.shape(),
                 y.data<scalar_t>(), [fmod](auto p, auto q) { return math::mod(p, q, fmod); }));
}

// y = a - b * trunc(a / b):  da = dy,  db = -dy * (a - y) / b
void grad_mod(GradContext& g) {
  Value* dy = g.output_grad(0);
  if (g.needs_grad(0)) g.set_input_grad(0, g.sum_to_shape(dy, g.input(0)));
  if (g.needs_grad(1)) {
    Value* q = g.emit("Div", {g.emit("Sub", {g.input(0), g.output(0)}), g.input(1)});
    g.set_input_grad(1, g.sum_to_shape(g.emit("Neg", {g.emit("Mul", {dy, q})}), g.input(1)));
  }
}

}  // namespace ortmodule
