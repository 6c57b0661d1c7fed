// ReduceSum / ReduceMean and their gradient ReduceGrad(dY, x_shape[, axes];
// keepdims, noop_with_empty_axes, mean), which broadcasts dY back over the
// reduced axes (scaled by 1/count for the mean); ReduceMax / ReduceMin and their
// gradient ReduceExtremeGrad(dY, X, Y[, axes]), which routes dY to the elements
// equal to the extreme; ArgMax / ArgMin.
#include <algorithm>
#include <cstdint>

#include "grad/grad_context.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/reduce.h"
#include "ops/op_utils.h"
#include "ops/ops.h"

namespace ortmodule {

namespace {

struct ReducePlan {
  Shape keep_shape;   // input shape with reduced dims set to 1
  Shape out_shape;    // final shape (keepdims applied)
  int64_t count = 1;  // elements reduced into each output
};

ReducePlan plan_reduce(const OpContext& ctx, const Shape& in, const std::vector<int64_t>& axes_in,
                       bool axes_given) {
  bool keepdims = ctx.node.attr_int("keepdims", 1) != 0;
  bool noop = ctx.node.attr_int("noop_with_empty_axes", 0) != 0;
  int64_t rank = static_cast<int64_t>(in.size());
  std::vector<bool> reduced(in.size(), false);
  // No axes: reduce everything, unless noop_with_empty_axes asks for identity.
  (void)axes_given;
  if (axes_in.empty() && !noop) std::fill(reduced.begin(), reduced.end(), true);
  for (int64_t a : check_axes(ctx, axes_in, rank, "axes")) reduced[a] = true;
  ReducePlan p;
  for (size_t i = 0; i < in.size(); ++i) {
    p.keep_shape.push_back(reduced[i] ? 1 : in[i]);
    if (reduced[i]) p.count *= in[i];
    if (!reduced[i] || keepdims) p.out_shape.push_back(reduced[i] ? 1 : in[i]);
  }
  return p;
}

// Axes from input 1 (ReduceSum >= 13, ReduceMean >= 18) or the attribute.
std::vector<int64_t> reduce_axes(const OpContext& ctx, size_t input_index, bool* given) {
  if (ctx.has_input(input_index)) {
    *given = true;
    return ctx.in(input_index).to_int_vector();
  }
  *given = ctx.node.has_attr("axes");
  return ctx.node.attr_ints("axes");
}

}  // namespace

Shape reduce_keep_shape(const OpContext& ctx, const Shape& in, size_t axes_input, int64_t* count) {
  bool given = false;
  std::vector<int64_t> axes = reduce_axes(ctx, axes_input, &given);
  ReducePlan p = plan_reduce(ctx, in, axes, given);
  *count = p.count;
  return p.keep_shape;
}

std::vector<OutputInfo> shape_reduce(const OpContext& ctx) {
  bool given = false;
  std::vector<int64_t> axes = reduce_axes(ctx, 1, &given);
  ReducePlan p = plan_reduce(ctx, ctx.in(0).shape(), axes, given);
  return one_output(ctx.in(0).dtype(), p.out_shape);
}

namespace {
void run_reduce(OpContext& ctx, bool mean) {
  const Tensor& x = ctx.in(0);
  bool given = false;
  std::vector<int64_t> axes = reduce_axes(ctx, 1, &given);
  ReducePlan p = plan_reduce(ctx, x.shape(), axes, given);
  Tensor& y = ctx.out(0);
  ORTM_DISPATCH_NUMERIC(x.dtype(), ctx, {
    sum_to_shape(x.shape(), x.data<scalar_t>(), p.keep_shape, y.data<scalar_t>());
    if (mean && p.count == 0 && !dtype_is_floating(x.dtype())) {
      // The integer mean of no elements is 0 (the float one is NaN, from 0 / 0 below).
      std::fill(y.data<scalar_t>(), y.data<scalar_t>() + y.numel(), scalar_t(0));
    } else if (mean && p.count != 1) {
      // Integer means truncate, as ONNX Runtime does.
      scalar_t* out = y.data<scalar_t>();
      for (int64_t i = 0; i < y.numel(); ++i)
        out[i] = static_cast<scalar_t>(out[i] / static_cast<double>(p.count));
    }
  });
}
}  // namespace

void cpu_reduce_sum(OpContext& ctx) { run_reduce(ctx, false); }
void cpu_reduce_mean(OpContext& ctx) { run_reduce(ctx, true); }

std::vector<OutputInfo> shape_reduce_grad(const OpContext& ctx) {
  const Shape x_shape = ctx.in(1).to_int_vector();
  check_shape(ctx, x_shape, "shape input (input 1)");
  bool given = false;
  std::vector<int64_t> axes = reduce_axes(ctx, 2, &given);
  ReducePlan p = plan_reduce(ctx, x_shape, axes, given);
  if (ctx.in(0).numel() != shape_numel(p.keep_shape))
    ctx.fail("input 0 (dY) has shape " + shape_str(ctx.in(0).shape()) + ", not the reduction of " +
             shape_str(x_shape));
  return one_output(ctx.in(0).dtype(), x_shape);
}

void cpu_reduce_grad(OpContext& ctx) {
  const Tensor& dy = ctx.in(0);
  Shape x_shape = ctx.in(1).to_int_vector();
  bool given = false;
  std::vector<int64_t> axes = reduce_axes(ctx, 2, &given);
  ReducePlan p = plan_reduce(ctx, x_shape, axes, given);
  bool mean = ctx.node.attr_int("mean", 0) != 0;
  Tensor& dx = ctx.out(0);
  ORTM_DISPATCH_FLOAT(dy.dtype(), ctx, {
    scalar_t scale = mean ? static_cast<scalar_t>(1.0 / static_cast<double>(p.count)) : scalar_t(1);
    binary_map(p.keep_shape, dy.data<scalar_t>(), Shape{}, dy.data<scalar_t>(), x_shape,
               dx.data<scalar_t>(), [scale](scalar_t g, scalar_t) { return g * scale; });
  });
}

namespace {
void grad_reduce(GradContext& g, bool mean) {
  Node& n = g.node();
  std::vector<Value*> inputs{g.output_grad(0), g.shape_of(g.input(0))};
  if (n.input(1)) inputs.push_back(n.input(1));
  Value* dx =
      g.emit("ReduceGrad", inputs,
             {{"keepdims", Attribute::make_int(n.attr_int("keepdims", 1))},
              {"noop_with_empty_axes", Attribute::make_int(n.attr_int("noop_with_empty_axes", 0))},
              {"mean", Attribute::make_int(mean)}},
             "ai.ortmodule");
  // Axes given as an attribute (ReduceMean before opset 18) travel as one too.
  if (n.has_attr("axes")) dx->producer->attrs["axes"] = n.attrs.at("axes");
  g.set_input_grad(0, dx);
}
}  // namespace

void grad_reduce_sum(GradContext& g) { grad_reduce(g, false); }
void grad_reduce_mean(GradContext& g) { grad_reduce(g, true); }

// ---- ReduceMax / ReduceMin ----

namespace {
void run_reduce_extreme(OpContext& ctx, bool is_max) {
  const Tensor& x = ctx.in(0);
  bool given = false;
  std::vector<int64_t> axes = reduce_axes(ctx, 1, &given);
  ReducePlan p = plan_reduce(ctx, x.shape(), axes, given);
  Tensor& y = ctx.out(0);
  ORTM_DISPATCH_ALL(x.dtype(), ctx,
                    reduce_extreme_forward(x.shape(), x.data<scalar_t>(), p.keep_shape,
                                           y.data<scalar_t>(), is_max));
  if (x.dtype() == DType::Bool) {
    // max is any, min is all: an empty reduction gives the uint8 extreme 0 (false) or 255,
    // which becomes true.
    uint8_t* out = y.data<uint8_t>();
    for (int64_t i = 0; i < y.numel(); ++i) out[i] = out[i] != 0;
  }
}
}  // namespace

void cpu_reduce_max(OpContext& ctx) { run_reduce_extreme(ctx, true); }
void cpu_reduce_min(OpContext& ctx) { run_reduce_extreme(ctx, false); }

// Shared by ReduceMax and ReduceMin: the extreme is found again by comparing X with Y.
void grad_reduce_extreme(GradContext& g) {
  Node& n = g.node();
  std::vector<Value*> inputs{g.output_grad(0), g.input(0), g.output(0)};
  if (n.input(1)) inputs.push_back(n.input(1));
  Value* dx =
      g.emit("ReduceExtremeGrad", inputs,
             {{"keepdims", Attribute::make_int(n.attr_int("keepdims", 1))},
              {"noop_with_empty_axes", Attribute::make_int(n.attr_int("noop_with_empty_axes", 0))}},
             "ai.ortmodule");
  if (n.has_attr("axes")) dx->producer->attrs["axes"] = n.attrs.at("axes");
  g.set_input_grad(0, dx);
}

// ReduceExtremeGrad(dY, X, Y[, axes]): dY and Y in the forward output's shape.
std::vector<OutputInfo> shape_reduce_extreme_grad(const OpContext& ctx) {
  expect_same_dtype(ctx, 1);
  expect_same_dtype(ctx, 2);
  return one_output(ctx.in(0).dtype(), ctx.in(1).shape());
}

void cpu_reduce_extreme_grad(OpContext& ctx) {
  const Tensor& x = ctx.in(1);
  bool given = false;
  std::vector<int64_t> axes = reduce_axes(ctx, 3, &given);
  ReducePlan p = plan_reduce(ctx, x.shape(), axes, given);
  if (ctx.in(0).numel() != shape_numel(p.keep_shape) || ctx.in(2).numel() != ctx.in(0).numel()) {
    ctx.fail("gradient " + shape_str(ctx.in(0).shape()) + " and result " +
             shape_str(ctx.in(2).shape()) + " do not match the reduction of " +
             shape_str(x.shape()));
  }
  ORTM_DISPATCH_FLOAT(x.dtype(), ctx,
                      reduce_extreme_backward(
                          x.shape(), x.data<scalar_t>(), p.keep_shape, ctx.in(2).data<scalar_t>(),
                          ctx.in(0).data<scalar_t>(), ctx.out(0).data<scalar_t>()));
}

// ---- ArgMax / ArgMin (int64 indices, not differentiable) ----

std::vector<OutputInfo> shape_arg_extreme(const OpContext& ctx) {
  const Shape& in = ctx.in(0).shape();
  int64_t axis = check_axis(ctx, ctx.node.attr_int("axis", 0), static_cast<int64_t>(in.size()),
                            "attribute 'axis'");
  if (in[axis] == 0) ctx.fail("cannot take the arg-extreme over an empty axis " + shape_str(in));
  Shape out = in;
  if (ctx.node.attr_int("keepdims", 1) != 0) {
    out[axis] = 1;
  } else {
    out.erase(out.begin() + axis);
  }
  return one_output(DType::Int64, out);
}

namespace {
void run_arg_extreme(OpContext& ctx, bool is_max) {
  const Tensor& x = ctx.in(0);
  size_t axis = static_cast<size_t>(
      normalize_axis(ctx, ctx.node.attr_int("axis", 0), static_cast<int64_t>(x.rank())));
  bool last = ctx.node.attr_int("select_last_index", 0) != 0;
  int64_t outer = dims_product(x.shape(), 0, axis);
  int64_t inner = dims_product(x.shape(), axis + 1, x.rank());
  ORTM_DISPATCH_NUMERIC(x.dtype(), ctx,
                        arg_extreme_forward(outer, x.dim(axis), inner, x.data<scalar_t>(),
                                            ctx.out(0).data<int64_t>(), is_max, last));
}
}  // namespace

void cpu_arg_max(OpContext& ctx) { run_arg_extreme(ctx, true); }
void cpu_arg_min(OpContext& ctx) { run_arg_extreme(ctx, false); }

}  // namespace ortmodule
