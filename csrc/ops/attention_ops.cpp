// The engine's attention-scores softmax (what passes/attention_softmax_fusion.h makes of
// Softmax(Add(Mul(x, c), mask))), with its gradient.
//
// ScaledMaskedSoftmax(x, mask?, fill?; scale) = Softmax(scale * x + mask, axis=-1), x and
//   mask broadcasting against each other (the output has the broadcast shape). A boolean
//   mask keeps the elements where it is true: Softmax(Where(mask, scale * x, fill)), fill a
//   one-element tensor of x's dtype (torch's masked attention scores,
//   scaled_dot_product_attention's boolean attn_mask, masked_fill of the scores).
// ScaledMaskedSoftmaxGrad(dY, Y, mask?; scale) = scale * Y * (dY - sum(dY * Y, axis=-1)),
//   and 0 where the boolean mask (when given) drops the element.
#include "grad/gradient_builder.h"
#include "kernels/cpu/broadcast.h"
#include "kernels/cpu/softmax.h"
#include "ops/op_utils.h"
#include "ops/ops.h"

namespace ortmodule {

namespace {

bool boolean_mask(const OpContext& ctx) {
  return ctx.has_input(1) && ctx.in(1).dtype() == DType::Bool;
}

// The fill value of a boolean mask (input 2), checked.
double mask_fill(const OpContext& ctx) {
  if (!ctx.has_input(2))
    ctx.fail(
        "input 1 (mask) is boolean, so input 2 (fill: the value of the elements the "
        "mask drops) is required");
  const Tensor& fill = ctx.in(2);
  if (fill.numel() != 1)
    ctx.fail("input 2 (fill) has shape " + shape_str(fill.shape()) + "; expected one element");
  return fill.float_at(0);
}

}  // namespace

std::vector<OutputInfo> shape_scaled_masked_softmax(const OpContext& ctx) {
  const Tensor& x = ctx.in(0);
  Shape out = x.shape();
  if (ctx.has_input(1)) {
    if (boolean_mask(ctx)) {
      expect_same_dtype(ctx, 2);
      mask_fill(ctx);
    } else {
      expect_same_dtype(ctx, 1);
      if (ctx.has_input(2))
        ctx.fail("input 2 (fill) is given, but input 1 (mask) is " + dtype_name(ctx.in(1).dtype()) +
                 "; a fill goes with a boolean mask only");
    }
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
  if (mask && mask->dtype() == DType::Bool) {
    const double fill = mask_fill(ctx);
    ORTM_DISPATCH_FLOAT(
        x.dtype(), ctx,
        scaled_kept_softmax_forward<scalar_t>(shape, static_cast<scalar_t>(scale),
                                              x.data<scalar_t>(), mask->data<uint8_t>(),
                                              static_cast<scalar_t>(fill), y.data<scalar_t>()));
    return;
  }
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
  if (ctx.has_input(2)) {
    if (ctx.in(2).dtype() != DType::Bool)
      ctx.fail("input 2 (mask) is " + dtype_name(ctx.in(2).dtype()) + "; expected bool");
    if (broadcast_shapes(ctx, ctx.in(1).shape(), ctx.in(2).shape()) != ctx.in(1).shape())
      ctx.fail("input 2 (mask) has shape " + shape_str(ctx.in(2).shape()) +
               ", which does not broadcast to Y's " + shape_str(ctx.in(1).shape()));
  }
  return one_output(ctx.in(0).dtype(), ctx.in(0).shape());
}

void cpu_scaled_masked_softmax_grad(OpContext& ctx) {
  const Tensor& dy = ctx.in(0);
  const Tensor& y = ctx.in(1);
  const int64_t dim = y.shape().back();
  const int64_t rows = dim ? y.numel() / dim : 0;
  const double scale = ctx.node.attr_float("scale", 1.0);
  if (ctx.has_input(2)) {
    ScaledMaskedSoftmaxShape shape;
    shape.out = y.shape();
    shape.mask_strides = broadcast_strides(ctx.in(2).shape(), shape.out);
    ORTM_DISPATCH_FLOAT(
        dy.dtype(), ctx,
        scaled_kept_softmax_backward<scalar_t>(
            shape, static_cast<scalar_t>(scale), dy.data<scalar_t>(), y.data<scalar_t>(),
            ctx.in(2).data<uint8_t>(), ctx.out(0).data<scalar_t>()));
    return;
  }
  ORTM_DISPATCH_FLOAT(dy.dtype(), ctx,
                      scaled_masked_softmax_backward<scalar_t>(
                          rows, dim, static_cast<scalar_t>(scale), dy.data<scalar_t>(),
                          y.data<scalar_t>(), ctx.out(0).data<scalar_t>()));
}

// d(scale * x + mask) = y * (dy - sum(dy * y)): times scale for x, as it is for the mask
// (an additive mask rarely needs one; a learned bias does). One node serves both at scale 1.
// A boolean mask (with its fill, input 2) has no gradient and zeroes x's where it drops x.
void grad_scaled_masked_softmax(GradContext& g) {
  const double scale = g.node().attr_float("scale", 1.0);
  const bool boolean = g.input(2) != nullptr;
  auto softmax_grad = [&](double s) {
    std::vector<Value*> inputs = {g.output_grad(0), g.output(0)};
    if (boolean) inputs.push_back(g.input(1));
    return g.emit("ScaledMaskedSoftmaxGrad", inputs, {{"scale", Attribute::make_float(s)}},
                  "ai.ortmodule");
  };
  Value* dx = g.needs_grad(0) ? softmax_grad(scale) : nullptr;
  if (dx) g.set_input_grad(0, g.sum_to_shape(dx, g.input(0)));
  if (g.input(1) && !boolean && g.needs_grad(1)) {
    Value* dmask = dx && scale == 1.0 ? dx : softmax_grad(1.0);
    g.set_input_grad(1, g.sum_to_shape(dmask, g.input(1)));
  }
}

}  // namespace ortmodule
