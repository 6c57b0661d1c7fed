// ReduceProd, ReduceL1, ReduceL2 and ReduceLogSumExp (axes from the attribute, before opset
// 18, or from input 1; keepdims, noop_with_empty_axes, as ReduceSum), and ReduceProd's
// gradient ReduceProdGrad(dY, X, Y[, axes]), which takes zeros in a slice as torch.prod's
// backward does. The other gradients are forward ops over dY and Y broadcast back to X's
// shape (ReduceGrad): L1 sign(x) dY, L2 x dY / y (0 where y = 0, as torch's norm),
// LogSumExp exp(x - y) dY.
#include <cstdint>
#include <vector>

#include "grad/grad_context.h"
#include "kernels/cpu/reduce.h"
#include "ops/op_utils.h"
#include "ops/ops.h"

namespace ortmodule {

namespace {

void run_accumulate(OpContext& ctx, math::Accumulation kind) {
  const Tensor& x = ctx.in(0);
  int64_t count = 1;
  const Shape keep = reduce_keep_shape(ctx, x.shape(), 1, &count);
  Tensor& y = ctx.out(0);
  if (kind == math::Accumulation::Prod) {
    ORTM_DISPATCH_NUMERIC(
        x.dtype(), ctx,
        reduce_accumulate_forward(x.shape(), x.data<scalar_t>(), keep, y.data<scalar_t>(), kind));
  } else {
    ORTM_DISPATCH_FLOAT(
        x.dtype(), ctx,
        reduce_accumulate_forward(x.shape(), x.data<scalar_t>(), keep, y.data<scalar_t>(), kind));
  }
}

// The reduction's attributes (keepdims, noop_with_empty_axes, axes before opset 18) copied
// onto a gradient node that reads the same axes.
Value* with_reduce_attrs(GradContext& g, Value* v) {
  const Node& n = g.node();
  Node* node = v->producer;
  node->attrs["keepdims"] = Attribute::make_int(n.attr_int("keepdims", 1));
  node->attrs["noop_with_empty_axes"] = Attribute::make_int(n.attr_int("noop_with_empty_axes", 0));
  if (n.has_attr("axes")) node->attrs["axes"] = n.attrs.at("axes");
  return v;
}

// `v`, in the forward output's shape, broadcast back to the input's.
Value* broadcast_back(GradContext& g, Value* v) {
  std::vector<Value*> inputs{v, g.shape_of(g.input(0))};
  if (g.node().input(1)) inputs.push_back(g.node().input(1));
  return with_reduce_attrs(
      g, g.emit("ReduceGrad", inputs, {{"mean", Attribute::make_int(0)}}, "ai.ortmodule"));
}

}  // namespace

void cpu_reduce_prod(OpContext& ctx) { run_accumulate(ctx, math::Accumulation::Prod); }
void cpu_reduce_l1(OpContext& ctx) { run_accumulate(ctx, math::Accumulation::L1); }
void cpu_reduce_l2(OpContext& ctx) { run_accumulate(ctx, math::Accumulation::L2); }
void cpu_reduce_log_sum_exp(OpContext& ctx) { run_accumulate(ctx, math::Accumulation::LogSumExp); }

void grad_reduce_prod(GradContext& g) {
  std::vector<Value*> inputs{g.output_grad(0), g.input(0), g.output(0)};
  if (g.node().input(1)) inputs.push_back(g.node().input(1));
  g.set_input_grad(0, with_reduce_attrs(g, g.emit("ReduceProdGrad", inputs, {}, "ai.ortmodule")));
}

void grad_reduce_l1(GradContext& g) {
  g.set_input_grad(
      0, g.emit("Mul", {broadcast_back(g, g.output_grad(0)), g.emit("Sign", {g.input(0)})}));
}

void grad_reduce_l2(GradContext& g) {
  Value* y = broadcast_back(g, g.output(0));
  Value* zero = g.scalar_constant(0.0, y);
  Value* scale = g.emit("Where", {g.emit("Equal", {y, zero}), zero,
                                  g.emit("Div", {broadcast_back(g, g.output_grad(0)), y})});
  g.set_input_grad(0, g.emit("Mul", {g.input(0), scale}));
}

void grad_reduce_log_sum_exp(GradContext& g) {
  Value* y = broadcast_back(g, g.output(0));
  g.set_input_grad(0, g.emit("Mul", {broadcast_back(g, g.output_grad(0)),
                                     g.emit("Exp", {g.emit("Sub", {g.input(0), y})})}));
}

// ReduceProdGrad(dY, X, Y[, axes]) -> dX: shape rule shape_reduce_extreme_grad.
void cpu_reduce_prod_grad(OpContext& ctx) {
  const Tensor& x = ctx.in(1);
  int64_t count = 1;
  const Shape keep = reduce_keep_shape(ctx, x.shape(), 3, &count);
  if (ctx.in(0).numel() != shape_numel(keep) || ctx.in(2).numel() != ctx.in(0).numel()) {
    ctx.fail("gradient " + shape_str(ctx.in(0).shape()) + " and result " +
             shape_str(ctx.in(2).shape()) + " do not match the reduction of " +
             shape_str(x.shape()));
  }
  ORTM_DISPATCH_FLOAT(
      x.dtype(), ctx,
      reduce_prod_backward(x.shape(), x.data<scalar_t>(), keep, ctx.in(2).data<scalar_t>(),
                           ctx.in(0).data<scalar_t>(), ctx.out(0).data<scalar_t>()));
}

}  // namespace ortmodule
