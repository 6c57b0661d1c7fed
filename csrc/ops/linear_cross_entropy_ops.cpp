// A language model's head and its loss in one op (passes/linear_cross_entropy_fusion.h makes
// it of MatMul (+ Add of a bias) -> SoftmaxCrossEntropyLoss), computed a block of rows at a
// time (kernels/cpu/linear_cross_entropy.h): the [rows, classes] logits never exist whole.
//
// FusedLinearCrossEntropy(x, w, labels, bias?; trans_w, reduction, ignore_index?, block_rows?)
//   -> (loss, lse)
//   = SoftmaxCrossEntropyLoss(x op(w) + bias, labels) with x read as [rows, hidden], op(w) =
//   w^T when trans_w (w [classes, hidden]); lse [rows] is each row's logsumexp, kept for
//   backward instead of the [rows, classes] log-probabilities.
// FusedLinearCrossEntropyGrad(dloss, x, w, labels, lse, bias?; same attributes)
//   -> (dx, dw, dbias), each only where wanted; backward computes each block's logits again.
#include <algorithm>
#include <cstdint>
#include <string>

#include "grad/grad_context.h"
#include "kernels/cpu/linear_cross_entropy.h"
#include "ops/linear_cross_entropy_attrs.h"
#include "ops/loss_attrs.h"
#include "ops/op_utils.h"
#include "ops/ops.h"

namespace ortmodule {

LinearCrossEntropyDims linear_cross_entropy_dims(const OpContext& ctx, size_t x_index) {
  const Tensor& x = ctx.in(x_index);
  const Tensor& w = ctx.in(x_index + 1);
  const Tensor& labels = ctx.in(x_index + 2);
  LinearCrossEntropyDims d;
  d.trans_w = ctx.node.attr_int("trans_w", 1) != 0;
  if (w.rank() != 2)
    ctx.fail("input " + std::to_string(x_index + 1) + " (w) has shape " + shape_str(w.shape()) +
             "; expected a matrix");
  d.classes = w.shape()[d.trans_w ? 0 : 1];
  d.hidden = w.shape()[d.trans_w ? 1 : 0];
  if (x.rank() < 1 || x.shape().back() != d.hidden)
    ctx.fail("input " + std::to_string(x_index) + " (x) has shape " + shape_str(x.shape()) +
             " but w " + shape_str(w.shape()) + (d.trans_w ? " (trans_w)" : "") +
             " multiplies rows of " + std::to_string(d.hidden));
  if (x.dtype() != w.dtype())
    ctx.fail("x is " + dtype_name(x.dtype()) + " but w is " + dtype_name(w.dtype()) +
             "; both must match");
  d.rows = d.hidden ? x.numel() / d.hidden : dims_product(x.shape(), 0, x.rank() - 1);
  if (labels.dtype() != DType::Int64)
    ctx.fail("labels must be int64, got " + dtype_name(labels.dtype()));
  if (labels.numel() != d.rows)
    ctx.fail("labels have shape " + shape_str(labels.shape()) + " but x " + shape_str(x.shape()) +
             " has " + std::to_string(d.rows) + " rows");
  d.reduction = reduction_of(ctx);
  d.has_ignore_index = ctx.node.has_attr("ignore_index");
  d.ignore_index = ctx.node.attr_int("ignore_index", -100);
  const int64_t block = ctx.node.attr_int("block_rows", 0);
  if (block < 0) ctx.fail("block_rows is " + std::to_string(block) + "; expected >= 0");
  d.block_rows = block ? std::min(block, std::max<int64_t>(d.rows, 1))
                       : linear_cross_entropy_block_rows(d.rows, d.classes);
  return d;
}

namespace {

// bias (input i, optional): [classes] of x's dtype.
void expect_bias(const OpContext& ctx, size_t i, const LinearCrossEntropyDims& d, DType dtype) {
  if (!ctx.has_input(i)) return;
  const Tensor& b = ctx.in(i);
  if (b.rank() != 1 || b.numel() != d.classes || b.dtype() != dtype)
    ctx.fail("input " + std::to_string(i) + " (bias) must be " + dtype_name(dtype) + " [" +
             std::to_string(d.classes) + "], got " + dtype_name(b.dtype()) + " " +
             shape_str(b.shape()));
}

Shape loss_shape(const LinearCrossEntropyDims& d, const Shape& labels) {
  return d.reduction == Reduction::None ? labels : Shape{};
}

}  // namespace

std::vector<OutputInfo> shape_fused_linear_cross_entropy(const OpContext& ctx) {
  const LinearCrossEntropyDims d = linear_cross_entropy_dims(ctx, 0);
  const DType dtype = ctx.in(0).dtype();
  expect_bias(ctx, 3, d, dtype);
  return {{dtype, loss_shape(d, ctx.in(2).shape())}, {dtype, Shape{d.rows}}};
}

void cpu_fused_linear_cross_entropy(OpContext& ctx) {
  const LinearCrossEntropyDims d = linear_cross_entropy_dims(ctx, 0);
  const DType dtype = ctx.in(0).dtype();
  Tensor lse = ctx.has_output(1) ? ctx.out(1) : Tensor::empty(dtype, {d.rows});
  Tensor block = Tensor::empty(dtype, {d.block_rows, d.classes});
  ORTM_DISPATCH_FLOAT(dtype, ctx, {
    linear_cross_entropy_forward<scalar_t>(
        d, ctx.in(0).data<scalar_t>(), ctx.in(1).data<scalar_t>(),
        ctx.has_input(3) ? ctx.in(3).data<scalar_t>() : nullptr, ctx.in(2).data<int64_t>(),
        ctx.out(0).data<scalar_t>(), lse.data<scalar_t>(), block.data<scalar_t>());
  });
}

std::vector<OutputInfo> shape_fused_linear_cross_entropy_grad(const OpContext& ctx) {
  const LinearCrossEntropyDims d = linear_cross_entropy_dims(ctx, 1);
  const DType dtype = ctx.in(1).dtype();
  expect_bias(ctx, 5, d, dtype);
  const int64_t n = d.reduction == Reduction::None ? d.rows : 1;
  if (ctx.in(0).numel() != n || ctx.in(0).dtype() != dtype)
    ctx.fail("input 0 (dloss) must be " + dtype_name(dtype) + " with " + std::to_string(n) +
             " elements, got " + dtype_name(ctx.in(0).dtype()) + " " +
             shape_str(ctx.in(0).shape()));
  if (ctx.in(4).numel() != d.rows || ctx.in(4).dtype() != dtype)
    ctx.fail("input 4 (lse) must be " + dtype_name(dtype) + " [" + std::to_string(d.rows) +
             "], got " + dtype_name(ctx.in(4).dtype()) + " " + shape_str(ctx.in(4).shape()));
  return {{dtype, ctx.in(1).shape()}, {dtype, ctx.in(2).shape()}, {dtype, Shape{d.classes}}};
}

void cpu_fused_linear_cross_entropy_grad(OpContext& ctx) {
  const LinearCrossEntropyDims d = linear_cross_entropy_dims(ctx, 1);
  const DType dtype = ctx.in(1).dtype();
  Tensor block = Tensor::empty(dtype, {d.block_rows, d.classes});
  ORTM_DISPATCH_FLOAT(dtype, ctx, {
    auto out = [&](size_t i) -> scalar_t* {
      return ctx.has_output(i) ? ctx.out(i).data<scalar_t>() : nullptr;
    };
    linear_cross_entropy_backward<scalar_t>(
        d, ctx.in(0).data<scalar_t>(), ctx.in(1).data<scalar_t>(), ctx.in(2).data<scalar_t>(),
        ctx.has_input(5) ? ctx.in(5).data<scalar_t>() : nullptr, ctx.in(3).data<int64_t>(),
        ctx.in(4).data<scalar_t>(), out(0), out(1), out(2), block.data<scalar_t>());
  });
}

void grad_fused_linear_cross_entropy(GradContext& g) {
  const std::vector<bool> wanted = {g.needs_grad(0), g.needs_grad(1), g.needs_grad(3)};
  if (!wanted[0] && !wanted[1] && !wanted[2]) return;
  Value* lse = g.forward_output(1, g.node().name + "/lse");
  std::vector<Value*> inputs = {g.output_grad(0), g.input(0), g.input(1), g.input(2), lse};
  if (g.input(3)) inputs.push_back(g.input(3));
  const std::vector<Value*> grads =
      g.emit_multi("FusedLinearCrossEntropyGrad", inputs, wanted, {}, "ai.ortmodule");
  for (Value* grad : grads)
    if (grad) grad->producer->attrs = g.node().attrs;  // one node: the forward's attributes
  if (wanted[0]) g.set_input_grad(0, grads[0]);
  if (wanted[1]) g.set_input_grad(1, grads[1]);
  if (wanted[2]) g.set_input_grad(3, grads[2]);
}

}  // namespace ortmodule
