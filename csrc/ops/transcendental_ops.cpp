// Round (half to even), the trigonometric and hyperbolic functions and their inverses (Tan,
// Asin, Acos, Atan, Sinh, Cosh, Asinh, Acosh, Atanh), ai.ortmodule Atan2, Erfcx and LogNdtr.
// Gradients are PyTorch's formulas, built from forward ops.
#include <cmath>

#include "grad/grad_context.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/math/activation.h"
#include "ops/op_utils.h"
#include "ops/ops.h"
#include "ops/unary_float.h"

namespace ortmodule {

namespace {

Value* one(GradContext& g) { return g.scalar_constant(1.0, g.input(0)); }
Value* square(GradContext& g, Value* v) { return g.emit("Mul", {v, v}); }

}  // namespace

void cpu_round(OpContext& ctx) {
  unary_float(ctx, [](auto v) { return math::round_half_even(v); });
}
void cpu_tan(OpContext& ctx) {
  unary_float(ctx, [](auto v) { return std::tan(v); });
}
void cpu_asin(OpContext& ctx) {
  unary_float(ctx, [](auto v) { return std::asin(v); });
}
void cpu_acos(OpContext& ctx) {
  unary_float(ctx, [](auto v) { return std::acos(v); });
}
void cpu_atan(OpContext& ctx) {
  unary_float(ctx, [](auto v) { return std::atan(v); });
}
void cpu_sinh(OpContext& ctx) {
  unary_float(ctx, [](auto v) { return std::sinh(v); });
}
void cpu_cosh(OpContext& ctx) {
  unary_float(ctx, [](auto v) { return std::cosh(v); });
}
void cpu_asinh(OpContext& ctx) {
  unary_float(ctx, [](auto v) { return std::asinh(v); });
}
void cpu_acosh(OpContext& ctx) {
  unary_float(ctx, [](auto v) { return std::acosh(v); });
}
void cpu_atanh(OpContext& ctx) {
  unary_float(ctx, [](auto v) { return std::atanh(v); });
}
void cpu_erfcx(OpContext& ctx) {
  unary_float(ctx, [](auto v) { return math::erfcx(v); });
}
void cpu_log_ndtr(OpContext& ctx) {
  unary_float(ctx, [](auto v) { return math::log_ndtr(v); });
}

// Atan2(a, b) = atan(a / b) in the quadrant of (b, a), a and b broadcast (torch.atan2).
void cpu_atan2(OpContext& ctx) {
  expect_same_dtype(ctx, 1);
  const Tensor& a = ctx.in(0);
  const Tensor& b = ctx.in(1);
  Tensor& y = ctx.out(0);
  ORTM_DISPATCH_FLOAT(
      a.dtype(), ctx,
      binary_map(a.shape(), a.data<scalar_t>(), b.shape(), b.data<scalar_t>(), y.shape(),
                 y.data<scalar_t>(), [](scalar_t p, scalar_t q) { return std::atan2(p, q); }));
}

// torch.round's gradient: zeros (not NaN where dY is).
void grad_round(GradContext& g) {
  g.set_input_grad(0, g.emit("ZerosLike", {g.input(0)}, {}, "ai.ortmodule"));
}
// y = tan(x):  dx = dy (1 + y^2)
void grad_tan(GradContext& g) {
  Value* y = g.output(0);
  g.set_input_grad(0, g.emit("Mul", {g.output_grad(0), g.emit("Add", {one(g), square(g, y)})}));
}
// y = asin(x):  dx = dy / sqrt(1 - x^2)
void grad_asin(GradContext& g) {
  Value* root = g.emit("Sqrt", {g.emit("Sub", {one(g), square(g, g.input(0))})});
  g.set_input_grad(0, g.emit("Div", {g.output_grad(0), root}));
}
// y = acos(x):  dx = -dy / sqrt(1 - x^2)
void grad_acos(GradContext& g) {
  Value* root = g.emit("Sqrt", {g.emit("Sub", {one(g), square(g, g.input(0))})});
  g.set_input_grad(0, g.emit("Neg", {g.emit("Div", {g.output_grad(0), root})}));
}
// y = atan(x):  dx = dy / (x^2 + 1)
void grad_atan(GradContext& g) {
  g.set_input_grad(
      0, g.emit("Div", {g.output_grad(0), g.emit("Add", {square(g, g.input(0)), one(g)})}));
}
void grad_sinh(GradContext& g) {
  g.set_input_grad(0, g.emit("Mul", {g.output_grad(0), g.emit("Cosh", {g.input(0)})}));
}
void grad_cosh(GradContext& g) {
  g.set_input_grad(0, g.emit("Mul", {g.output_grad(0), g.emit("Sinh", {g.input(0)})}));
}
// y = asinh(x):  dx = dy / sqrt(x^2 + 1)
void grad_asinh(GradContext& g) {
  Value* root = g.emit("Sqrt", {g.emit("Add", {square(g, g.input(0)), one(g)})});
  g.set_input_grad(0, g.emit("Div", {g.output_grad(0), root}));
}
// y = acosh(x):  dx = dy / sqrt(x^2 - 1)
void grad_acosh(GradContext& g) {
  Value* root = g.emit("Sqrt", {g.emit("Sub", {square(g, g.input(0)), one(g)})});
  g.set_input_grad(0, g.emit("Div", {g.output_grad(0), root}));
}
// y = atanh(x):  dx = dy / (1 - x^2)
void grad_atanh(GradContext& g) {
  g.set_input_grad(
      0, g.emit("Div", {g.output_grad(0), g.emit("Sub", {one(g), square(g, g.input(0))})}));
}
// y = atan2(a, b):  da = dy b / (a^2 + b^2),  db = -dy a / (a^2 + b^2)
void grad_atan2(GradContext& g) {
  Value* a = g.input(0);
  Value* b = g.input(1);
  Value* recip = g.emit("Reciprocal", {g.emit("Add", {square(g, a), square(g, b)})});
  Value* dy = g.output_grad(0);
  if (g.needs_grad(0))
    g.set_input_grad(0, g.sum_to_shape(g.emit("Mul", {g.emit("Mul", {dy, b}), recip}), a));
  if (g.needs_grad(1)) {
    Value* db = g.emit("Neg", {g.emit("Mul", {g.emit("Mul", {dy, a}), recip})});
    g.set_input_grad(1, g.sum_to_shape(db, b));
  }
}
// y = erfcx(x):  dx = dy (2 x y - 2/sqrt(pi))
void grad_erfcx(GradContext& g) {
  Value* x = g.input(0);
  Value* two_xy = g.emit("Mul", {g.emit("Mul", {x, g.output(0)}), g.scalar_constant(2.0, x)});
  Value* local = g.emit("Sub", {two_xy, g.scalar_constant(1.1283791670955126, x)});
  g.set_input_grad(0, g.emit("Mul", {g.output_grad(0), local}));
}
// y = log Phi(x):  dx = dy phi(x) / Phi(x) = dy sqrt(2/pi) / erfcx(-x / sqrt 2), which
// neither cancels for very negative x nor gives NaN where erfcx overflows (large x: 0).
void grad_log_ndtr(GradContext& g) {
  Value* x = g.input(0);
  Value* e = g.emit("Erfcx", {g.emit("Mul", {x, g.scalar_constant(-0.70710678118654752440, x)})},
                    {}, "ai.ortmodule");
  Value* scaled = g.emit("Mul", {g.output_grad(0), g.scalar_constant(0.79788456080286535588, x)});
  g.set_input_grad(0, g.emit("Div", {scaled, e}));
}

}  // namespace ortmodule
