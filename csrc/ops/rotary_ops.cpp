// Rotary position embedding by halves (what passes/rotary_fusion.h makes of Llama's
// q * cos + rotate_half(q) * sin), with its gradient as the same op in another mode:
//
// ai.ortmodule FusedRotary(X, cos?, sin?, reference?; axis, split, mode) -> Y
//   rot(X) = Concat(-X[split:], X[:split]) along axis
//   mode 0: Y = X * cos + rot(X) * sin     mode 1: Y = X * cos + rot^T(X * sin)
//   mode 2: Y = rot(X) (cos and sin unread; no gradient rule)
// A non-negative axis counts X's dims, or those of the reference (input 3, read for its rank
// alone: the gradient's nodes rotate dY, whose rank may exceed X's). Y has the broadcast shape of
// X, cos and sin; X must not be broadcast along axis (its halves are taken before the products
// broadcast). See kernels/cpu/rotary.h.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "grad/grad_context.h"
#include "kernels/cpu/broadcast.h"
#include "kernels/cpu/rotary.h"
#include "ops/op_utils.h"
#include "ops/ops.h"
#include "ops/rotary_args.h"

namespace ortmodule {

RotaryArgs rotary_args(const OpContext& ctx) {
  const int64_t mode = ctx.node.attr_int("mode", 0);
  if (mode < 0 || mode > 2)
    ctx.fail("attribute mode is " + std::to_string(mode) +
             "; expected 0 (embed), 1 (gradient) or 2 (rotate)");
  RotaryArgs a;
  a.mode = static_cast<RotaryMode>(mode);
  const Shape& x = ctx.in(0).shape();
  Shape out = x;
  const bool products = a.mode != RotaryMode::kRotate;
  if (products) {
    if (!ctx.has_input(1) || !ctx.has_input(2))
      ctx.fail("mode " + std::to_string(mode) + " needs inputs 1 (cos) and 2 (sin)");
    for (size_t i = 1; i < 3; ++i) {
      expect_same_dtype(ctx, i);
      out = broadcast_shapes(ctx, out, ctx.in(i).shape());
    }
  }
  // A non-negative axis counts on the reference's dims (input 3, else X); the kernels take Y's
  // (broadcasting aligns the last dims, so an axis counted from the end is X's and Y's alike).
  const int64_t axis = ctx.node.attr_int("axis", -1);
  const int64_t x_rank = static_cast<int64_t>(x.size());
  const int64_t ref_rank =
      ctx.has_input(3) ? static_cast<int64_t>(ctx.in(3).shape().size()) : x_rank;
  const int64_t from_end = axis < 0 ? axis : axis - ref_rank;
  if (axis >= ref_rank || from_end < -x_rank)
    ctx.fail("attribute axis is " + std::to_string(axis) +
             ", out of range for input 0 (X) of shape " + shape_str(x) +
             (ctx.has_input(3) ? " with the reference (input 3) of rank " + std::to_string(ref_rank)
                               : std::string()));
  a.axis = static_cast<int64_t>(out.size()) + from_end;
  if (x[x_rank + from_end] != out[a.axis])
    ctx.fail("input 0 (X) of shape " + shape_str(x) + " is broadcast to " + shape_str(out) +
             " along the rotated axis " + std::to_string(axis) +
             "; its halves must span that axis (rotate X before broadcasting it)");
  a.split = ctx.node.attr_int("split", 0);
  if (a.split < 0) ctx.fail("attribute split is " + std::to_string(a.split) + "; expected >= 0");
  a.out_shape = out;
  a.x_strides = broadcast_strides(x, out);
  a.cos_strides = products ? broadcast_strides(ctx.in(1).shape(), out) : a.x_strides;
  a.sin_strides = products ? broadcast_strides(ctx.in(2).shape(), out) : a.x_strides;
  return a;
}

std::vector<OutputInfo> shape_fused_rotary(const OpContext& ctx) {
  return {OutputInfo{ctx.in(0).dtype(), rotary_args(ctx).out_shape}};
}

void cpu_fused_rotary(OpContext& ctx) {
  const RotaryArgs a = rotary_args(ctx);
  const bool products = a.mode != RotaryMode::kRotate;
  ORTM_DISPATCH_FLOAT(ctx.in(0).dtype(), ctx, {
    rotary_halves<scalar_t>(
        a, ctx.in(0).data<scalar_t>(), products ? ctx.in(1).data<scalar_t>() : nullptr,
        products ? ctx.in(2).data<scalar_t>() : nullptr, ctx.out(0).data<scalar_t>());
  });
}

void grad_fused_rotary(GradContext& g) {
  Node& n = g.node();
  const int64_t mode = n.attr_int("mode", 0);
  if (mode != 0 && mode != 1)
    g.fail("FusedRotary's mode " + std::to_string(mode) +
           " (rotate) has no gradient rule; modes 0 and 1 have");
  const int64_t axis = n.attr_int("axis", -1), split = n.attr_int("split", 0);
  auto rotary = [&](std::vector<Value*> inputs, int64_t m) {
    return g.emit("FusedRotary", std::move(inputs),
                  {{"axis", Attribute::make_int(axis)},
                   {"split", Attribute::make_int(split)},
                   {"mode", Attribute::make_int(m)}},
                  "ai.ortmodule");
  };
  Value* dy = g.output_grad(0);
  Value* x = g.input(0);
  // The rank the axis counts on: the reference's, else X's.
  Value* ref = n.num_inputs() > 3 && n.input(3) ? n.input(3) : x;
  // Modes 0 and 1 are each other's transpose in X: Y = X cos + rot(X) sin has
  // dX = dY cos + rot^T(dY sin), and Y = X cos + rot^T(X sin) has dX = dY cos + rot(dY) sin.
  if (g.needs_grad(0))
    g.set_input_grad(0, g.sum_to_shape(rotary({dy, g.input(1), g.input(2), ref}, 1 - mode), x));
  if (g.needs_grad(1)) g.set_input_grad(1, g.sum_to_shape(g.emit("Mul", {dy, x}), g.input(1)));
  // dsin: dY rot(X) (mode 0), X rot(dY) (mode 1: the sum of dY rot^T(X sin) is that of
  // rot(dY) X sin).
  if (g.needs_grad(2)) {
    Value* product = mode == 0 ? g.emit("Mul", {dy, rotary({x, x, x, ref}, 2)})
                               : g.emit("Mul", {x, rotary({dy, dy, dy, ref}, 2)});
    g.set_input_grad(2, g.sum_to_shape(product, g.input(2)));
  }
}

}  // namespace ortmodule
