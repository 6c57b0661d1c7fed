// ai.ortmodule Cholesky(A; upper, check_errors) -> (L, info), CholeskySolve(B, F; upper) and
// CholeskyInverse(F; upper) (torch.linalg.cholesky(_ex), torch.cholesky, cholesky_solve,
// cholesky_inverse), their internal gradients CholeskyGrad, CholeskySolveGrad and
// CholeskyInverseGrad, and the gradient rules (torch's formulas). The per-matrix arithmetic is
// kernels/math/linalg_cholesky.h, in double.
#include <cstdint>
#include <string>

#include "grad/grad_context.h"
#include "ops/linalg_qr_setup.h"
#include "ops/ops.h"

namespace ortmodule {

namespace {

Shape batch_dims(const Shape& s) { return Shape(s.begin(), s.end() - 2); }

// Batch dims of a and b broadcast (numpy rules), then the matrix dims `tail`.
Shape broadcast_batch(const OpContext& ctx, const Shape& a, const Shape& b, Shape tail) {
  Shape out = broadcast_shapes(ctx, batch_dims(a), batch_dims(b));
  out.insert(out.end(), tail.begin(), tail.end());
  return out;
}

Attribute upper_attr(const GradContext& g) {
  return Attribute::make_int(g.node().attr_int("upper", 0));
}

}  // namespace

std::vector<OutputInfo> shape_cholesky(const OpContext& ctx) {
  const Tensor& a = ctx.in(0);
  linalg::square(ctx, a, "input 0 (A)");
  return {OutputInfo{a.dtype(), a.shape()}, OutputInfo{DType::Int32, batch_dims(a.shape())}};
}

void cpu_cholesky(OpContext& ctx) {
  const Tensor& a = ctx.in(0);
  const int64_t batch = linalg::batch_of(ctx, a, "input 0 (A)");
  ORTM_DISPATCH_FLOAT(a.dtype(), ctx, linalg::run_cpu(batch, linalg::cholesky_fn<scalar_t>(ctx)));
  if (ctx.node.attr_int("check_errors", 0))
    linalg::check_cholesky_info(ctx, ctx.out(1).data<int32_t>(), batch);
}

std::vector<OutputInfo> shape_cholesky_solve(const OpContext& ctx) {
  const Tensor& b = ctx.in(0);
  const Tensor& f = ctx.in(1);
  expect_same_dtype(ctx, 1);
  const int64_t n = linalg::square(ctx, f, "input 1 (the factor)");
  linalg::batch_of(ctx, b, "input 0 (B)");
  if (linalg::rows(b) != n)
    ctx.fail("B " + shape_str(b.shape()) + " must have as many rows as the factor " +
             shape_str(f.shape()));
  return one_output(b.dtype(), broadcast_batch(ctx, b.shape(), f.shape(), {n, linalg::cols(b)}));
}

void cpu_cholesky_solve(OpContext& ctx) {
  const int64_t batch = dims_product(ctx.out(0).shape(), 0, ctx.out(0).rank() - 2);
  ORTM_DISPATCH_FLOAT(ctx.in(0).dtype(), ctx,
                      linalg::run_cpu(batch, linalg::cholesky_solve_fn<scalar_t>(ctx)));
}

void cpu_cholesky_inverse(OpContext& ctx) {
  const int64_t batch = linalg::batch_of(ctx, ctx.in(0), "input 0 (the factor)");
  ORTM_DISPATCH_FLOAT(ctx.in(0).dtype(), ctx,
                      linalg::run_cpu(batch, linalg::cholesky_inverse_fn<scalar_t>(ctx)));
}

std::vector<OutputInfo> shape_cholesky_inverse(const OpContext& ctx) {
  linalg::square(ctx, ctx.in(0), "input 0 (the factor)");
  return one_output(ctx.in(0).dtype(), ctx.in(0).shape());
}

// CholeskyGrad(L, gL): gA, L's shape.
void cpu_cholesky_grad(OpContext& ctx) {
  const int64_t batch = linalg::batch_of(ctx, ctx.in(0), "input 0 (L)");
  ORTM_DISPATCH_FLOAT(ctx.in(0).dtype(), ctx,
                      linalg::run_cpu(batch, linalg::cholesky_grad_fn<scalar_t>(ctx)));
}

// CholeskySolveGrad(gX, F, X): gB in gX's shape, gF in gX's batch with F's matrix dims.
std::vector<OutputInfo> shape_cholesky_solve_grad(const OpContext& ctx) {
  const Tensor& gx = ctx.in(0);
  const Tensor& f = ctx.in(1);
  const int64_t n = linalg::square(ctx, f, "input 1 (the factor)");
  Shape gf = batch_dims(gx.shape());
  gf.push_back(n);
  gf.push_back(n);
  return {OutputInfo{gx.dtype(), gx.shape()}, OutputInfo{gx.dtype(), gf}};
}

void cpu_cholesky_solve_grad(OpContext& ctx) {
  const int64_t batch = linalg::batch_of(ctx, ctx.in(0), "input 0 (gX)");
  ORTM_DISPATCH_FLOAT(ctx.in(0).dtype(), ctx,
                      linalg::run_cpu(batch, linalg::cholesky_solve_grad_fn<scalar_t>(ctx)));
}

// CholeskyInverseGrad(gY, F, Y): gF, F's shape.
std::vector<OutputInfo> shape_cholesky_inverse_grad(const OpContext& ctx) {
  return one_output(ctx.in(1).dtype(), ctx.in(1).shape());
}

void cpu_cholesky_inverse_grad(OpContext& ctx) {
  const int64_t batch = linalg::batch_of(ctx, ctx.in(1), "input 1 (the factor)");
  ORTM_DISPATCH_FLOAT(ctx.in(0).dtype(), ctx,
                      linalg::run_cpu(batch, linalg::cholesky_inverse_grad_fn<scalar_t>(ctx)));
}

// L = cholesky(A): gA = L^-T Phi(L^T gL) L^-1 (symmetric), info carries no gradient.
void grad_cholesky(GradContext& g) {
  g.set_input_grad(0, g.emit("CholeskyGrad", {g.output(0), g.output_grad(0)},
                             {{"upper", upper_attr(g)}}, "ai.ortmodule"));
}

// X = cholesky_solve(B, F): gB = cholesky_solve(gX, F), gF = -(C F or F C), C = gB X^T + X gB^T;
// both summed down to their input's broadcast batch.
void grad_cholesky_solve(GradContext& g) {
  const std::vector<Value*> grads =
      g.emit_multi("CholeskySolveGrad", {g.output_grad(0), g.input(1), g.output(0)},
                   {g.needs_grad(0), g.needs_grad(1)}, {{"upper", upper_attr(g)}}, "ai.ortmodule");
  for (size_t i = 0; i < 2; ++i)
    if (g.needs_grad(i)) g.set_input_grad(i, g.sum_to_shape(grads[i], g.input(i)));
}

// Y = cholesky_inverse(F): gF = -(C F or F C), C = Y (gY + gY^T) Y.
void grad_cholesky_inverse(GradContext& g) {
  g.set_input_grad(0, g.emit("CholeskyInverseGrad", {g.output_grad(0), g.input(0), g.output(0)},
                             {{"upper", upper_attr(g)}}, "ai.ortmodule"));
}

}  // namespace ortmodule
