// The gamma family, ai.ortmodule ops over torch's functions: Digamma, Lgamma, Polygamma
// (attribute n), Erfinv, Ndtri, Zeta(s, q), Igamma(a, x) and Igammac(a, x), the binary ones
// broadcast. Gradients are torch's formulas, built from forward ops; like torch, Zeta has no
// gradient for s and Igamma/Igammac none for a.
#include <cmath>

#include "grad/grad_context.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/math/erfinv.h"
#include "kernels/math/gamma.h"
#include "ops/op_utils.h"
#include "ops/ops.h"
#include "ops/unary_float.h"

namespace ortmodule {

namespace {

template <typename F>
void binary_float(OpContext& ctx, F f) {
  expect_same_dtype(ctx, 1);
  const Tensor& a = ctx.in(0);
  const Tensor& b = ctx.in(1);
  Tensor& y = ctx.out(0);
  ORTM_DISPATCH_FLOAT(a.dtype(), ctx,
                      binary_map(a.shape(), a.data<scalar_t>(), b.shape(), b.data<scalar_t>(),
                                 y.shape(), y.data<scalar_t>(), [&](scalar_t p, scalar_t q) {
                                   return static_cast<scalar_t>(f(p, q));
                                 }));
}

Value* own(GradContext& g, const char* op, std::vector<Value*> inputs, AttrList attrs = {}) {
  return g.emit(op, std::move(inputs), attrs, "ai.ortmodule");
}

// dx = dy * factor, for the unary ops.
void set_unary_grad(GradContext& g, Value* factor) {
  g.set_input_grad(0, g.emit("Mul", {g.output_grad(0), factor}));
}

// Igamma/Igammac: the gradient for x is dy * (+-) x^(a-1) e^-x / Gamma(a), taken as
// exp((a - 1) log x - x - lgamma(a)) (torch's); a has none (torch: not implemented).
void grad_incomplete_gamma(GradContext& g, bool upper) {
  Value* a = g.input(0);
  Value* x = g.input(1);
  if (g.needs_grad(0))
    g.fail("the derivative with respect to a (torch's 'input') is not implemented, as in torch");
  if (!g.needs_grad(1)) return;
  Value* exponent = g.emit(
      "Sub",
      {g.emit(
           "Sub",
           {g.emit("Mul", {g.emit("Sub", {a, g.scalar_constant(1.0, a)}), g.emit("Log", {x})}), x}),
       own(g, "Lgamma", {a})});
  Value* dx = g.emit("Mul", {g.output_grad(0), g.emit("Exp", {exponent})});
  if (upper) dx = g.emit("Neg", {dx});
  g.set_input_grad(1, g.sum_to_shape(dx, x));
}

}  // namespace

void cpu_digamma(OpContext& ctx) {
  unary_float(ctx, [](auto v) { return math::digamma(v); });
}
void cpu_lgamma(OpContext& ctx) {
  unary_float(ctx, [](auto v) { return math::log_gamma(v); });
}
void cpu_polygamma(OpContext& ctx) {
  const int64_t n = polygamma_order(ctx.node);
  if (n < 0) ctx.fail("polygamma(n, x) does not support negative n");
  unary_float(ctx, [n](auto v) { return math::polygamma(n, v); });
}
void cpu_erfinv(OpContext& ctx) {
  unary_float(ctx, [](auto v) { return math::erfinv(v); });
}
void cpu_ndtri(OpContext& ctx) {
  unary_float(ctx, [](auto v) { return math::ndtri(v); });
}
void cpu_zeta(OpContext& ctx) {
  binary_float(ctx, [](auto s, auto q) { return math::hurwitz_zeta(s, q); });
}
void cpu_igamma(OpContext& ctx) {
  binary_float(ctx, [](auto a, auto x) { return math::igamma(a, x); });
}
void cpu_igammac(OpContext& ctx) {
  binary_float(ctx, [](auto a, auto x) { return math::igammac(a, x); });
}

int64_t polygamma_order(const Node& node) { return node.attr_int("n", 0); }

// y = digamma(x):  dx = dy polygamma(1, x)
void grad_digamma(GradContext& g) {
  set_unary_grad(g, own(g, "Polygamma", {g.input(0)}, {{"n", Attribute::make_int(1)}}));
}
// y = lgamma(x):  dx = dy digamma(x)
void grad_lgamma(GradContext& g) { set_unary_grad(g, own(g, "Digamma", {g.input(0)})); }
// y = polygamma(n, x):  dx = dy polygamma(n + 1, x)
void grad_polygamma(GradContext& g) {
  const int64_t n = polygamma_order(g.node());
  set_unary_grad(g, own(g, "Polygamma", {g.input(0)}, {{"n", Attribute::make_int(n + 1)}}));
}
// y = erfinv(x):  dx = dy sqrt(pi)/2 exp(y^2)
void grad_erfinv(GradContext& g) {
  Value* y = g.output(0);
  Value* e = g.emit("Exp", {g.emit("Mul", {y, y})});
  set_unary_grad(g, g.emit("Mul", {e, g.scalar_constant(0.88622692545275801365, y)}));
}
// y = ndtri(x):  dx = dy sqrt(2 pi) exp(y^2 / 2)
void grad_ndtri(GradContext& g) {
  Value* y = g.output(0);
  Value* half_square = g.emit("Mul", {g.emit("Mul", {y, y}), g.scalar_constant(0.5, y)});
  set_unary_grad(g, g.emit("Mul", {g.emit("Exp", {half_square}),
                                   g.scalar_constant(2.50662827463100050242, y)}));
}
// y = zeta(s, q):  dq = -dy s zeta(s + 1, q); s has none (torch: not implemented).
void grad_zeta(GradContext& g) {
  Value* s = g.input(0);
  Value* q = g.input(1);
  if (g.needs_grad(0))
    g.fail("the derivative with respect to s (torch's 'input') is not implemented, as in torch");
  if (!g.needs_grad(1)) return;
  Value* next = own(g, "Zeta", {g.emit("Add", {s, g.scalar_constant(1.0, s)}), q});
  Value* dq = g.emit("Neg", {g.emit("Mul", {g.emit("Mul", {g.output_grad(0), s}), next})});
  g.set_input_grad(1, g.sum_to_shape(dq, q));
}
void grad_igamma(GradContext& g) { grad_incomplete_gamma(g, false); }
void grad_igammac(GradContext& g) { grad_incomplete_gamma(g, true); }

}  // namespace ortmodule
