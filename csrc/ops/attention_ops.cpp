// The engine's attention-scores softmax (what passes/attention_softmax_fusion.h makes of
// Softmax(Add(Mul(x, c), mask))), with its gradient.
//
// ScaledMaskedSoftmax(x, mask?; scale) = Softmax(scale * x + mask, axis=-1), x and mask
//   broadcasting against each other (the output has the broadcast shape).
// ScaledMaskedSoftmaxGrad(dY, Y; scale) = scale * Y * (dY - sum(dY * Y, axis=-1)).
#include "grad/gradient_builder.h"
#include "kernels/cpu/broadcast.h"
#include "kernels/cpu/softmax.h"
#include "ops/op_utils.h"
#include "ops/ops.h"

namespace ortmodule {

std::vector<OutputInfo> shape_scaled_masked_softmax(const OpContext& ctx) {
  const Tensor& x = ctx.in(0);
  Shape out = x.shape();
  if (ctx.has_input(1)) {
    expect_same_dtype(ctx, 1);
    out = broadcast_shapes(ctx, out, ctx.in(1).shape());
  }
  if (out.empty())
    ctx.fail("the softmax runs along the last axis, but the inputs are scalars (rank 0)");
  return one_output(x.dtype(), out);
}

void cpu_scaled_masked_softmax(OpContext& ctx) {
  const Tensor& x = ctx.in(0);
  const Tensor* mask = ctx.has_input(1) ? &ctx.in(1) : nullptr;
  Tensor& y = ctx.out(0);
  ScaledMaskedSoftmaxShape shape;
  shape.out = y.shape();
  shape.x_strides = broadcast_strides(x.shape(), shape.out);
  if (mask) shape.mask_strides = broadcast_strides(mask->shape(), shape.out);
  const double scale = ctx.node.attr_float("scale", 1.0);
  ORTM_DISPATCH_FLOAT(x.dtype(), ctx,
                      scaled_masked_softmax_forward<scalar_t>(
                          shape, static_cast<scalar_t>(scale), x.data<scalar_t>(),
                          mask ? mask->data<scalar_t>() : nullptr, y.data<scalar_t>()));
}

std::vector<OutputInfo> shape_scaled_masked_softmax_grad(const OpContext& ctx) {
  expect_same_dtype(ctx, 1);
  if (ctx.in(0).shape() != ctx.in(1).shape())
    ctx.fail("input 0 (dY) has shape " + shape_str(ctx.in(0).shape()) + ", input 1 (Y) has " +
             shape_str(ctx.in(1).shape()) + "; they must match");
  if (ctx.in(1).rank() == 0) ctx.fail("input 1 (Y) is a scalar; expected rank >= 1");
  return one_output(ctx.in(0).dtype(), ctx.in(0).shape());
}

void cpu_scaled_masked_softmax_grad(OpContext& ctx) {
  const Tensor& dy = ctx.in(0);
  const Tensor& y = ctx.in(1);
  const int64_t dim = y.shape().back();
  const int64_t rows = dim ? y.numel() / dim : 0;
  const double scale = ctx.node.attr_float("scale", 1.0);
  ORTM_DISPATCH_FLOAT(dy.dtype(), ctx,
                      scaled_masked_softmax_backward<scalar_t>(
                          rows, dim, static_cast<scalar_t>(scale), dy.data<scalar_t>(),
                          y.data<scalar_t>(), ctx.out(0).data<scalar_t>()));
}

// d(scale * x + mask) = y * (dy - sum(dy * y)): times scale for x, as it is for the mask
// (an additive mask rarely needs one; a learned bias does). One node serves both at scale 1.
void grad_scaled_masked_softmax(GradContext& g) {
  const double scale = g.node().attr_float("scale", 1.0);
  auto softmax_grad = [&](double s) {
    return g.emit("ScaledMaskedSoftmaxGrad", {g.output_grad(0), g.output(0)},
                  {{"scale", Attribute::make_float(s)}}, "ai.ortmodule");
  };
  Value* dx = g.needs_grad(0) ? softmax_grad(scale) : nullptr;
  if (dx) g.set_input_grad(0, g.sum_to_shape(dx, g.input(0)));
  if (g.input(1) && g.needs_grad(1)) {
    Value* dmask = dx && scale == 1.0 ? dx : softmax_grad(1.0);
    g.set_input_grad(1, g.sum_to_shape(dmask, g.input(1)));
  }
}

}  // namespace ortmodule
