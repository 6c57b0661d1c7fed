// InstanceNormalization (ONNX) and ai.ortmodule GroupNorm (torch's GroupNorm: num_groups
// groups of consecutive channels, per-channel scale and bias) with their gradient
// ai.ortmodule GroupNormGrad. InstanceNormalization is GroupNorm with a group per channel;
// both may carry outputs 1 and 2 (mean and rstd, [N, G]), which the gradient rule adds.
#include <cstdint>
#include <string>
#include <vector>

#include "grad/grad_context.h"
#include "kernels/cpu/groupnorm.h"
#include "ops/groupnorm_dims.h"
#include "ops/op_utils.h"
#include "ops/ops.h"

namespace ortmodule {

// [N, C, spatial...] with scale and bias of [C]; GroupNorm's num_groups must divide C (0 or
// InstanceNormalization: one group per channel).
GroupNormDims groupnorm_dims(const OpContext& ctx, const Shape& x, size_t scale_input) {
  if (x.size() < 2) ctx.fail("input must be [N, C, ...], got " + shape_str(x));
  GroupNormDims d{x[0], x[1], dims_product(x, 2, x.size()), x[1]};
  if (ctx.node.op_type != "InstanceNormalization") {
    const int64_t g = ctx.node.attr_int("num_groups", 0);
    if (g < 0 || (g > 0 && d.C % g != 0))
      ctx.fail("attribute num_groups=" + std::to_string(g) + " must divide the " +
               std::to_string(d.C) + " channels");
    if (g > 0) d.G = g;
  }
  for (size_t i = scale_input; i < scale_input + 2; ++i) {
    if (ctx.in(i).numel() != d.C || ctx.in(i).shape().size() != 1)
      ctx.fail("input " + std::to_string(i) + " has shape " + shape_str(ctx.in(i).shape()) +
               ", expected [" + std::to_string(d.C) + "]");
    if (ctx.in(i).dtype() != ctx.in(0).dtype())
      ctx.fail("input " + std::to_string(i) + " has dtype " + dtype_name(ctx.in(i).dtype()) +
               ", expected " + dtype_name(ctx.in(0).dtype()) + " (input 0's)");
  }
  return d;
}

// ---- InstanceNormalization(X, scale, B), GroupNorm(X, scale, bias) -> Y, mean?, rstd? ----

std::vector<OutputInfo> shape_groupnorm(const OpContext& ctx) {
  const GroupNormDims d = groupnorm_dims(ctx, ctx.in(0).shape(), 1);
  const DType t = ctx.in(0).dtype();
  if (t != DType::Float32 && t != DType::Float64)
    ctx.fail("dtype " + dtype_name(t) + " is not supported (float32, float64)");
  OutputInfo stat{t, {d.N, d.G}};
  return {OutputInfo{t, ctx.in(0).shape()}, stat, stat};
}

void cpu_groupnorm(OpContext& ctx) {
  const GroupNormDims d = groupnorm_dims(ctx, ctx.in(0).shape(), 1);
  const double eps = ctx.node.attr_float("epsilon", 1e-5f);
  ORTM_DISPATCH_FLOAT(ctx.in(0).dtype(), ctx, {
    auto out = [&](size_t i) { return ctx.has_output(i) ? ctx.out(i).data<scalar_t>() : nullptr; };
    groupnorm_forward<scalar_t>(d, eps, ctx.in(0).data<scalar_t>(), ctx.in(1).data<scalar_t>(),
                                ctx.in(2).data<scalar_t>(), ctx.out(0).data<scalar_t>(), out(1),
                                out(2));
  });
}

void grad_groupnorm(GradContext& g) {
  const Node& n = g.node();
  const int64_t groups = n.op_type == "InstanceNormalization" ? 0 : n.attr_int("num_groups", 0);
  Value* mean = g.forward_output(1, "mean");
  Value* rstd = g.forward_output(2, "rstd");
  std::vector<Value*> grads =
      g.emit_multi("GroupNormGrad", {g.output_grad(0), g.input(0), g.input(1), mean, rstd},
                   {g.needs_grad(0), g.needs_grad(1), g.needs_grad(2)},
                   {{"num_groups", Attribute::make_int(groups)}}, "ai.ortmodule");
  for (size_t i = 0; i < 3; ++i) g.set_input_grad(i, grads[i]);
}

// ---- GroupNormGrad(dY, X, scale, mean, rstd) -> dX, dscale, dbias ----

GroupNormDims groupnorm_grad_dims(const OpContext& ctx) {
  const Shape& x = ctx.in(1).shape();
  if (ctx.in(0).shape() != x)
    ctx.fail("input 0 (dY) has shape " + shape_str(ctx.in(0).shape()) + ", input 1 (X) has " +
             shape_str(x));
  if (x.size() < 2) ctx.fail("input 1 must be [N, C, ...], got " + shape_str(x));
  GroupNormDims d{x[0], x[1], dims_product(x, 2, x.size()), x[1]};
  const int64_t g = ctx.node.attr_int("num_groups", 0);
  if (g < 0 || (g > 0 && d.C % g != 0))
    ctx.fail("attribute num_groups=" + std::to_string(g) + " must divide the " +
             std::to_string(d.C) + " channels");
  if (g > 0) d.G = g;
  if (ctx.in(2).numel() != d.C)
    ctx.fail("input 2 (scale) has shape " + shape_str(ctx.in(2).shape()) + ", expected [" +
             std::to_string(d.C) + "]");
  for (size_t i : {size_t(3), size_t(4)})
    if (ctx.in(i).numel() != d.N * d.G)
      ctx.fail("input " + std::to_string(i) + " has shape " + shape_str(ctx.in(i).shape()) +
               ", expected [" + std::to_string(d.N) + ", " + std::to_string(d.G) + "]");
  for (size_t i = 1; i < 5; ++i) expect_same_dtype(ctx, i);
  return d;
}

std::vector<OutputInfo> shape_groupnorm_grad(const OpContext& ctx) {
  const GroupNormDims d = groupnorm_grad_dims(ctx);
  const DType t = ctx.in(0).dtype();
  return {OutputInfo{t, ctx.in(1).shape()}, OutputInfo{t, {d.C}}, OutputInfo{t, {d.C}}};
}

void cpu_groupnorm_grad(OpContext& ctx) {
  const GroupNormDims d = groupnorm_grad_dims(ctx);
  ORTM_DISPATCH_FLOAT(ctx.in(0).dtype(), ctx, {
    auto in = [&](size_t i) { return ctx.in(i).data<scalar_t>(); };
    auto out = [&](size_t i) { return ctx.has_output(i) ? ctx.out(i).data<scalar_t>() : nullptr; };
    groupnorm_backward<scalar_t>(d, in(0), in(1), in(2), in(3), in(4), out(0), out(1), out(2));
  });
}

}  // namespace ortmodule
