// Clip and its gradient (ai.ortmodule ClipGrad) side by side.
#include <string>

#include "grad/grad_context.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/math/elementwise.h"
#include "ops/clip_bounds.h"
#include "ops/op_utils.h"
#include "ops/ops.h"

namespace ortmodule {

// ---- Clip(x, min?, max?) and ClipGrad(dY, x, min?, max?) ----

void cpu_clip(OpContext& ctx) {
  const Tensor& x = ctx.in(0);
  ORTM_DISPATCH_NUMERIC(x.dtype(), ctx, {
    scalar_t lo, hi;
    clip_bounds(ctx, 1, &lo, &hi);
    // min(max(x, lo), hi): with lo > hi every element becomes hi (numpy.clip); NaN stays.
    unary_map(x.numel(), x.data<scalar_t>(), ctx.out(0).data<scalar_t>(),
              [lo, hi](scalar_t v) { return math::clip(v, lo, hi); });
  });
}

void cpu_clip_grad(OpContext& ctx) {
  const Tensor& dy = ctx.in(0);
  const Tensor& x = ctx.in(1);
  expect_same_dtype(ctx, 1);
  if (dy.shape() != x.shape())
    ctx.fail("gradient shape " + shape_str(dy.shape()) + " differs from " + shape_str(x.shape()));
  const bool exclusive = clip_grad_exclusive(ctx);
  ORTM_DISPATCH_FLOAT(dy.dtype(), ctx, {
    scalar_t lo, hi;
    clip_bounds(ctx, 2, &lo, &hi);
    binary_map(dy.shape(), dy.data<scalar_t>(), x.shape(), x.data<scalar_t>(), dy.shape(),
               ctx.out(0).data<scalar_t>(), [lo, hi, exclusive](scalar_t g, scalar_t v) {
                 return exclusive ? math::clip_grad_exclusive(g, v, lo, hi)
                                  : math::clip_grad(g, v, lo, hi);
               });
  });
}

bool clip_grad_exclusive(const OpContext& ctx) { return ctx.node.attr_int("exclusive", 0) != 0; }

void grad_clip(GradContext& g) {
  if (g.needs_grad(1) || g.needs_grad(2))
    g.fail(
        "gradients with respect to bounds computed from parameters are not supported; "
        "detach the bounds, or clamp with torch.minimum/torch.maximum");
  // Before opset 11 the bounds are attributes; ClipGrad reads them the same way.
  Value* dx = g.emit("ClipGrad", {g.output_grad(0), g.input(0), g.input(1), g.input(2)}, {},
                     "ai.ortmodule");
  for (const char* key : {"min", "max"})
    if (g.node().has_attr(key)) dx->producer->attrs[key] = *g.node().attr(key);
  g.set_input_grad(0, dx);
}

// ai.ortmodule HardTanh(x; min, max): Clip with attribute bounds whose gradient passes only
// strictly inside them (torch.nn.functional.hardtanh and relu6; torch.clamp includes them).
void grad_hard_tanh(GradContext& g) {
  Value* dx = g.emit("ClipGrad", {g.output_grad(0), g.input(0)},
                     {{"exclusive", Attribute::make_int(1)}}, "ai.ortmodule");
  for (const char* key : {"min", "max"})
    if (g.node().has_attr(key)) dx->producer->attrs[key] = *g.node().attr(key);
  g.set_input_grad(0, dx);
}

}  // namespace ortmodule
