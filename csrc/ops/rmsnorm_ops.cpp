// RMS normalisation, as ONNX Runtime names it (what passes/rmsnorm_fusion.h makes of
// x * 1 / sqrt(mean(x^2) + eps) * weight), with its gradient:
//
// com.microsoft SimplifiedLayerNormalization(X, scale; axis, epsilon) -> Y, inv_std_var?
//   Y = X * inv_std_var * scale, inv_std_var = 1 / sqrt(mean(X^2 over X[axis:]) + epsilon)
//   (shaped as X with the normalised dims 1).
// com.microsoft SimplifiedLayerNormalizationGrad(dY, X, scale, inv_std_var) -> dX, dScale
//   dX = inv * (g - xhat * mean(g * xhat)), g = dY * scale, xhat = X * inv;
//   dScale = sum over rows of dY * xhat.
// ONNX Runtime registers the forward op in the default domain (as it once did
// LayerNormalization); here both live in com.microsoft, beside LayerNormalizationGrad.
#include <cstdint>

#include "grad/grad_context.h"
#include "kernels/cpu/layernorm.h"
#include "ops/op_utils.h"
#include "ops/ops.h"

namespace ortmodule {

std::vector<OutputInfo> shape_simplified_layernorm(const OpContext& ctx) {
  // LayerNormalization's outputs without the mean: Y, inv_std_var.
  std::vector<OutputInfo> outs = shape_layernorm(ctx);
  outs.erase(outs.begin() + 1);
  return outs;
}

void cpu_simplified_layernorm(OpContext& ctx) {
  int64_t axis, rows, cols;
  layernorm_dims(ctx, ctx.in(0), ctx.in(1), &axis, &rows, &cols);
  const double eps = ctx.node.attr_float("epsilon", 1e-5f);
  ORTM_DISPATCH_FLOAT(ctx.in(0).dtype(), ctx, {
    rmsnorm_forward<scalar_t>(rows, cols, eps, ctx.in(0).data<scalar_t>(),
                              ctx.in(1).data<scalar_t>(), ctx.out(0).data<scalar_t>(),
                              ctx.has_output(1) ? ctx.out(1).data<scalar_t>() : nullptr);
  });
}

std::vector<OutputInfo> shape_simplified_layernorm_grad(const OpContext& ctx) {
  int64_t axis, rows, cols;
  layernorm_dims(ctx, ctx.in(1), ctx.in(2), &axis, &rows, &cols);
  if (ctx.in(0).shape() != ctx.in(1).shape())
    ctx.fail("input 0 (dY) has shape " + shape_str(ctx.in(0).shape()) + ", input 1 (X) has " +
             shape_str(ctx.in(1).shape()) + "; they must match");
  for (size_t i = 1; i < 4; ++i) expect_same_dtype(ctx, i);
  if (ctx.in(3).numel() != rows)
    ctx.fail("input 3 (inv_std_var) has shape " + shape_str(ctx.in(3).shape()) + ", expected " +
             std::to_string(rows) + " elements (one per normalised row)");
  const DType t = ctx.in(0).dtype();
  return {OutputInfo{t, ctx.in(1).shape()}, OutputInfo{t, ctx.in(2).shape()}};
}

void cpu_simplified_layernorm_grad(OpContext& ctx) {
  int64_t axis, rows, cols;
  layernorm_dims(ctx, ctx.in(1), ctx.in(2), &axis, &rows, &cols);
  ORTM_DISPATCH_FLOAT(ctx.in(0).dtype(), ctx, {
    auto in = [&](size_t i) { return ctx.in(i).data<scalar_t>(); };
    auto out = [&](size_t i) { return ctx.has_output(i) ? ctx.out(i).data<scalar_t>() : nullptr; };
    rmsnorm_backward<scalar_t>(rows, cols, in(0), in(1), in(2), in(3), out(0), out(1));
  });
}

void grad_simplified_layernorm(GradContext& g) {
  Node& n = g.node();
  Value* inv_std = g.forward_output(1, "inv_std_var");
  std::vector<Value*> grads = g.emit_multi(
      "SimplifiedLayerNormalizationGrad", {g.output_grad(0), g.input(0), g.input(1), inv_std},
      {g.needs_grad(0), g.needs_grad(1)},
      {{"axis", Attribute::make_int(n.attr_int("axis", -1))},
       {"epsilon", Attribute::make_float(n.attr_float("epsilon", 1e-5f))}},
      "com.microsoft");
  for (size_t i = 0; i < 2; ++i) g.set_input_grad(i, grads[i]);
}

}  // namespace ortmodule
