// ai.ortmodule ops of the Bessel family (torch.i0 and torch.special's Bessel, modified
// Bessel, Airy and spherical Bessel functions): BesselI0, BesselI0e, BesselI1, BesselI1e,
// BesselJ0, BesselJ1, BesselY0, BesselY1, BesselK0, BesselK1, BesselK0e, BesselK1e, AiryAi
// and SphericalBesselJ0. The per-element math is kernels/math/bessel.h. Gradients exist
// where PyTorch defines one (I0, I0e, I1, I1e) and are its formulas, built from forward ops;
// the other rows have no gradient rule, so differentiating them fails naming the op.
#include <cfloat>

#include "grad/grad_context.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/math/bessel.h"
#include "ops/op_utils.h"
#include "ops/ops.h"
#include "ops/unary_float.h"

namespace ortmodule {

namespace {

// PyTorch's i1_backward / i1e_backward treat |x| <= machine epsilon of the input's dtype as
// 0 (where the local slope is 0.5) and evaluate the formula at a safe x elsewhere.
struct TinyGuard {
  Value* not_tiny;  // |x| > eps
  Value* safe_x;    // x where |x| > eps, else eps
};
TinyGuard tiny_guard(GradContext& g, Value* x) {
  const double eps = x->dtype == DType::Float64 ? DBL_EPSILON : FLT_EPSILON;
  Value* eps_value = g.scalar_constant(eps, x);
  Value* not_tiny = g.emit("Greater", {g.emit("Abs", {x}), eps_value});
  return {not_tiny, g.emit("Where", {not_tiny, x, eps_value})};
}

Value* own(GradContext& g, const char* op, Value* x) { return g.emit(op, {x}, {}, "ai.ortmodule"); }

}  // namespace

void cpu_bessel_i0(OpContext& ctx) {
  unary_float(ctx, [](auto v) { return math::bessel_i0(v); });
}
void cpu_bessel_i0e(OpContext& ctx) {
  unary_float(ctx, [](auto v) { return math::bessel_i0e(v); });
}
void cpu_bessel_i1(OpContext& ctx) {
  unary_float(ctx, [](auto v) { return math::bessel_i1(v); });
}
void cpu_bessel_i1e(OpContext& ctx) {
  unary_float(ctx, [](auto v) { return math::bessel_i1e(v); });
}
void cpu_bessel_j0(OpContext& ctx) {
  unary_float(ctx, [](auto v) { return math::bessel_j0(v); });
}
void cpu_bessel_j1(OpContext& ctx) {
  unary_float(ctx, [](auto v) { return math::bessel_j1(v); });
}
void cpu_bessel_y0(OpContext& ctx) {
  unary_float(ctx, [](auto v) { return math::bessel_y0(v); });
}
void cpu_bessel_y1(OpContext& ctx) {
  unary_float(ctx, [](auto v) { return math::bessel_y1(v); });
}
void cpu_bessel_k0(OpContext& ctx) {
  unary_float(ctx, [](auto v) { return math::bessel_k0(v); });
}
void cpu_bessel_k1(OpContext& ctx) {
  unary_float(ctx, [](auto v) { return math::bessel_k1(v); });
}
void cpu_bessel_k0e(OpContext& ctx) {
  unary_float(ctx, [](auto v) { return math::bessel_k0e(v); });
}
void cpu_bessel_k1e(OpContext& ctx) {
  unary_float(ctx, [](auto v) { return math::bessel_k1e(v); });
}
void cpu_airy_ai(OpContext& ctx) {
  unary_float(ctx, [](auto v) { return math::airy_ai(v); });
}
void cpu_spherical_bessel_j0(OpContext& ctx) {
  unary_float(ctx, [](auto v) { return math::spherical_bessel_j0(v); });
}

// y = I0(x):  dx = dy I1(x)
void grad_bessel_i0(GradContext& g) {
  g.set_input_grad(0, g.emit("Mul", {g.output_grad(0), own(g, "BesselI1", g.input(0))}));
}
// y = I0e(x):  dx = dy (I1e(x) - sign(x) y)
void grad_bessel_i0e(GradContext& g) {
  Value* x = g.input(0);
  Value* local =
      g.emit("Sub", {own(g, "BesselI1e", x), g.emit("Mul", {g.emit("Sign", {x}), g.output(0)})});
  g.set_input_grad(0, g.emit("Mul", {g.output_grad(0), local}));
}
// y = I1(x):  dx = dy (I0(x) - y / x), 0.5 dy at |x| <= eps
void grad_bessel_i1(GradContext& g) {
  const TinyGuard t = tiny_guard(g, g.input(0));
  Value* slope =
      g.emit("Sub", {own(g, "BesselI0", t.safe_x), g.emit("Div", {g.output(0), t.safe_x})});
  Value* local = g.emit("Where", {t.not_tiny, slope, g.scalar_constant(0.5, g.input(0))});
  g.set_input_grad(0, g.emit("Mul", {g.output_grad(0), local}));
}
// y = I1e(x):  dx = dy (I0e(x) - y (sign(x) + 1/x)), 0.5 dy at |x| <= eps
void grad_bessel_i1e(GradContext& g) {
  const TinyGuard t = tiny_guard(g, g.input(0));
  Value* factor = g.emit("Add", {g.emit("Sign", {t.safe_x}), g.emit("Reciprocal", {t.safe_x})});
  Value* slope =
      g.emit("Sub", {own(g, "BesselI0e", t.safe_x), g.emit("Mul", {g.output(0), factor})});
  Value* local = g.emit("Where", {t.not_tiny, slope, g.scalar_constant(0.5, g.input(0))});
  g.set_input_grad(0, g.emit("Mul", {g.output_grad(0), local}));
}

}  // namespace ortmodule
