// ai.ortmodule Householder QR: Geqrf(A) -> (a, tau) (torch.geqrf, no gradient, as torch),
// LinalgQr(A; mode) -> (Q, R) (torch.linalg.qr, R's diagonal signs as LAPACK's geqrf +
// orgqr), HouseholderProduct(V, tau) (orgqr) and Ormqr(A, tau, C; left, transpose), the
// internal gradients QrGrad, HouseholderProductGrad and OrmqrGrad, and the gradient rules.
// The per-matrix arithmetic is kernels/math/linalg_qr.h, in double.
#include <cstdint>
#include <string>

#include "grad/grad_context.h"
#include "ops/linalg_qr_setup.h"
#include "ops/ops.h"

namespace ortmodule {

namespace {

Shape with_matrix(const Shape& s, int64_t rows, int64_t cols) {
  Shape out(s.begin(), s.end() - 2);
  out.push_back(rows);
  out.push_back(cols);
  return out;
}

int64_t batch_of_out(OpContext& ctx, size_t i) {
  const Tensor& y = ctx.out(i);
  return dims_product(y.shape(), 0, y.rank() - 2);
}

}  // namespace

std::vector<OutputInfo> shape_geqrf(const OpContext& ctx) {
  const Tensor& a = ctx.in(0);
  linalg::batch_of(ctx, a, "input 0 (A)");
  const int64_t m = linalg::rows(a), n = linalg::cols(a);
  Shape tau(a.shape().begin(), a.shape().end() - 2);
  tau.push_back(m < n ? m : n);
  return {OutputInfo{a.dtype(), a.shape()}, OutputInfo{a.dtype(), tau}};
}

void cpu_geqrf(OpContext& ctx) {
  const int64_t batch = linalg::batch_of(ctx, ctx.in(0), "input 0 (A)");
  ORTM_DISPATCH_FLOAT(ctx.in(0).dtype(), ctx,
                      linalg::run_cpu(batch, linalg::geqrf_fn<scalar_t>(ctx)));
}

// Q [..., m, k] (complete: [..., m, m]; mode "r": an empty [0]) and R [..., k, n]
// (complete: [..., m, n]), k = min(m, n).
std::vector<OutputInfo> shape_linalg_qr(const OpContext& ctx) {
  const Tensor& a = ctx.in(0);
  linalg::batch_of(ctx, a, "input 0 (A)");
  const std::string mode = linalg::qr_mode(ctx);
  const int64_t m = linalg::rows(a), n = linalg::cols(a), k = m < n ? m : n;
  const int64_t qc = mode == "complete" ? m : k, rr = mode == "complete" ? m : k;
  const Shape q = mode == "r" ? Shape{0} : with_matrix(a.shape(), m, qc);
  return {OutputInfo{a.dtype(), q}, OutputInfo{a.dtype(), with_matrix(a.shape(), rr, n)}};
}

void cpu_linalg_qr(OpContext& ctx) {
  const int64_t batch = linalg::batch_of(ctx, ctx.in(0), "input 0 (A)");
  ORTM_DISPATCH_FLOAT(ctx.in(0).dtype(), ctx, linalg::run_cpu(batch, linalg::qr_fn<scalar_t>(ctx)));
}

// QrGrad(Q, R, gQ, gR): gA [..., m, n], m from Q, n from R.
std::vector<OutputInfo> shape_qr_grad(const OpContext& ctx) {
  const Tensor& q = ctx.in(0);
  const Tensor& r = ctx.in(1);
  return one_output(q.dtype(), with_matrix(q.shape(), linalg::rows(q), linalg::cols(r)));
}

void cpu_qr_grad(OpContext& ctx) {
  ORTM_DISPATCH_FLOAT(ctx.in(0).dtype(), ctx,
                      linalg::run_cpu(batch_of_out(ctx, 0), linalg::qr_grad_fn<scalar_t>(ctx)));
}

void cpu_householder_product(OpContext& ctx) {
  ORTM_DISPATCH_FLOAT(
      ctx.in(0).dtype(), ctx,
      linalg::run_cpu(batch_of_out(ctx, 0), linalg::householder_product_fn<scalar_t>(ctx)));
}

// HouseholderProductGrad(V, tau, gQ): gV, gtau in V's and tau's shapes.
std::vector<OutputInfo> shape_householder_product_grad(const OpContext& ctx) {
  return {OutputInfo{ctx.in(0).dtype(), ctx.in(0).shape()},
          OutputInfo{ctx.in(1).dtype(), ctx.in(1).shape()}};
}

void cpu_householder_product_grad(OpContext& ctx) {
  const int64_t batch = linalg::batch_of(ctx, ctx.in(0), "input 0 (V)");
  ORTM_DISPATCH_FLOAT(ctx.in(0).dtype(), ctx,
                      linalg::run_cpu(batch, linalg::householder_product_grad_fn<scalar_t>(ctx)));
}

// Ormqr(A, tau, C): C's shape.
std::vector<OutputInfo> shape_ormqr(const OpContext& ctx) {
  linalg::check_ormqr(ctx, ctx.in(0), ctx.in(1), ctx.in(2));
  return one_output(ctx.in(2).dtype(), ctx.in(2).shape());
}

void cpu_ormqr(OpContext& ctx) {
  ORTM_DISPATCH_FLOAT(ctx.in(0).dtype(), ctx,
                      linalg::run_cpu(batch_of_out(ctx, 0), linalg::ormqr_fn<scalar_t>(ctx)));
}

// OrmqrGrad(A, tau, C, gY): gA, gtau, gC in their inputs' shapes.
std::vector<OutputInfo> shape_ormqr_grad(const OpContext& ctx) {
  return {OutputInfo{ctx.in(0).dtype(), ctx.in(0).shape()},
          OutputInfo{ctx.in(1).dtype(), ctx.in(1).shape()},
          OutputInfo{ctx.in(2).dtype(), ctx.in(2).shape()}};
}

void cpu_ormqr_grad(OpContext& ctx) {
  const int64_t batch = linalg::batch_of(ctx, ctx.in(2), "input 2 (C)");
  ORTM_DISPATCH_FLOAT(ctx.in(0).dtype(), ctx,
                      linalg::run_cpu(batch, linalg::ormqr_grad_fn<scalar_t>(ctx)));
}

// (Q, R) = linalg.qr(A): torch's rule, from whichever of gQ and gR exist. Mode "r" computes
// no Q and complete QR of a tall matrix has no unique derivative; both are refused, as torch.
void grad_linalg_qr(GradContext& g) {
  const std::string mode = g.node().attr_string("mode", "reduced");
  if (mode == "r")
    g.fail(
        "the derivative of linalg.qr depends on Q, which is not computed when mode='r'; use "
        "mode='reduced' to differentiate through linalg.qr");
  g.set_input_grad(0,
                   g.emit("QrGrad", {g.output(0), g.output(1), g.output_grad(0), g.output_grad(1)},
                          {{"mode", Attribute::make_string(mode)}}, "ai.ortmodule"));
}

// Q = householder_product(V, tau): the reflectors' gradients (kernels/math/linalg_qr.h).
void grad_householder_product(GradContext& g) {
  const std::vector<Value*> grads =
      g.emit_multi("HouseholderProductGrad", {g.input(0), g.input(1), g.output_grad(0)},
                   {g.needs_grad(0), g.needs_grad(1)}, {}, "ai.ortmodule");
  for (size_t i = 0; i < 2; ++i) g.set_input_grad(i, grads[i]);
}

// Y = ormqr(A, tau, C): gC = op(Q)^T gY (or gY op(Q)^T), A's and tau's from Q's gradient.
void grad_ormqr(GradContext& g) {
  const Node& n = g.node();
  const std::vector<Value*> grads =
      g.emit_multi("OrmqrGrad", {g.input(0), g.input(1), g.input(2), g.output_grad(0)},
                   {g.needs_grad(0), g.needs_grad(1), g.needs_grad(2)},
                   {{"left", Attribute::make_int(n.attr_int("left", 1))},
                    {"transpose", Attribute::make_int(n.attr_int("transpose", 0))}},
                   "ai.ortmodule");
  for (size_t i = 0; i < 3; ++i) g.set_input_grad(i, grads[i]);
}

}  // namespace ortmodule
