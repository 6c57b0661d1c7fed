// The gated unit of Llama's MLP (what passes/silu_mul_fusion.h makes of
// Mul(Mul(g, Sigmoid(g)), u), torch's silu(gate) * up), with its gradient:
//
// ai.ortmodule SiluMul(G, U) -> Y = G * sigmoid(G) * U (G and U broadcast together)
// ai.ortmodule SiluMulGrad(dY, G, U) -> dG, dU, each of dY's shape (the gradient rule sums
//   them to G's and U's). See kernels/math/silu_mul.h for the arithmetic.
#include <array>
#include <cstdint>

#include "grad/grad_context.h"
#include "kernels/cpu/broadcast.h"
#include "kernels/cpu/silu_mul.h"
#include "kernels/math/silu_mul.h"
#include "ops/op_utils.h"
#include "ops/ops.h"

namespace ortmodule {
namespace {

Shape silu_mul_shape(const OpContext& ctx, size_t g, size_t u) {
  expect_same_dtype(ctx, 1);
  return broadcast_shapes(ctx, ctx.in(g).shape(), ctx.in(u).shape());
}

}  // namespace

std::vector<OutputInfo> shape_silu_mul(const OpContext& ctx) {
  return {OutputInfo{ctx.in(0).dtype(), silu_mul_shape(ctx, 0, 1)}};
}

// Operands of one shape run on the chunked kernels (the vector sigmoid for float32); broadcast
// ones element by element with math::sigmoid.
void cpu_silu_mul(OpContext& ctx) {
  const Tensor &g = ctx.in(0), &u = ctx.in(1);
  Tensor& y = ctx.out(0);
  ORTM_DISPATCH_FLOAT(g.dtype(), ctx, {
    const scalar_t* gp = g.data<scalar_t>();
    const scalar_t* up = u.data<scalar_t>();
    scalar_t* yp = y.data<scalar_t>();
    if (g.shape() == y.shape() && u.shape() == y.shape()) {
      silu_mul_forward<scalar_t>(y.numel(), gp, up, yp);
    } else {
      for_each_broadcast<2>(y.shape(), {g.shape(), u.shape()},
                            [&](int64_t i, const std::array<int64_t, 2>& o) {
                              yp[i] = math::silu_mul(gp[o[0]], up[o[1]], math::sigmoid(gp[o[0]]));
                            });
    }
  });
}

std::vector<OutputInfo> shape_silu_mul_grad(const OpContext& ctx) {
  expect_same_dtype(ctx, 2);
  const Shape out = silu_mul_shape(ctx, 1, 2);
  if (ctx.in(0).shape() != out)
    ctx.fail("input 0 (dY) has shape " + shape_str(ctx.in(0).shape()) +
             ", expected the broadcast shape of G and U, " + shape_str(out));
  const DType t = ctx.in(0).dtype();
  return {OutputInfo{t, out}, OutputInfo{t, out}};
}

void cpu_silu_mul_grad(OpContext& ctx) {
  const Tensor &dy = ctx.in(0), &g = ctx.in(1), &u = ctx.in(2);
  ORTM_DISPATCH_FLOAT(dy.dtype(), ctx, {
    const scalar_t* dyp = dy.data<scalar_t>();
    const scalar_t* gp = g.data<scalar_t>();
    const scalar_t* up = u.data<scalar_t>();
    scalar_t* dg = ctx.has_output(0) ? ctx.out(0).data<scalar_t>() : nullptr;
    scalar_t* du = ctx.has_output(1) ? ctx.out(1).data<scalar_t>() : nullptr;
    if (g.shape() == dy.shape() && u.shape() == dy.shape()) {
      silu_mul_backward<scalar_t>(dy.numel(), dyp, gp, up, dg, du);
    } else {
      for_each_broadcast<2>(dy.shape(), {g.shape(), u.shape()},
                            [&](int64_t i, const std::array<int64_t, 2>& o) {
                              const scalar_t s = math::sigmoid(gp[o[0]]);
                              if (dg)
                                dg[i] = math::silu_mul_grad_gate(dyp[i], gp[o[0]], up[o[1]], s);
                              if (du) du[i] = math::silu_mul_grad_up(dyp[i], gp[o[0]], s);
                            });
    }
  });
}

void grad_silu_mul(GradContext& g) {
  std::vector<Value*> grads =
      g.emit_multi("SiluMulGrad", {g.output_grad(0), g.input(0), g.input(1)},
                   {g.needs_grad(0), g.needs_grad(1)}, {}, "ai.ortmodule");
  for (size_t i = 0; i < 2; ++i)
    if (g.needs_grad(i)) g.set_input_grad(i, g.sum_to_shape(grads[i], g.input(i)));
}

}  // namespace ortmodule
