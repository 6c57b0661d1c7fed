// BatchNormalization (and the engine's BatchNormTorch) with its gradients.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "grad/grad_context.h"
#include "kernels/cpu/batchnorm.h"
#include "ops/op_utils.h"
#include "ops/ops.h"

namespace ortmodule {

// ---- BatchNormalization / ai.ortmodule BatchNormTorch / com.microsoft BatchNormInternal /
// BatchNormalizationGrad ----
// BatchNormTorch is BatchNormalization with PyTorch's running variance (unbiased batch
// variance); the captured PyTorch models use it, ONNX models keep the ONNX definition.
// BatchNormInternal is BatchNormalization with two more outputs (saved_mean,
// saved_inv_std) that its gradient reads; the gradient rule switches to it.

namespace {
void bn_dims(const OpContext& ctx, int64_t* N, int64_t* C, int64_t* S) {
  const Shape& x = ctx.in(0).shape();
  if (x.size() < 2) ctx.fail("input must be [N, C, ...], got " + shape_str(x));
  *N = x[0];
  *C = x[1];
  *S = dims_product(x, 2, x.size());
  for (size_t i = 1; i < 5; ++i) {
    if (!ctx.has_input(i)) continue;
    expect_same_dtype(ctx, i);
    if (ctx.in(i).numel() != *C) {
      ctx.fail("input " + std::to_string(i) + " has shape " + shape_str(ctx.in(i).shape()) +
               ", expected [" + std::to_string(*C) + "]");
    }
  }
}
}  // namespace

std::vector<OutputInfo> shape_batchnorm(const OpContext& ctx) {
  int64_t N, C, S;
  bn_dims(ctx, &N, &C, &S);
  DType t = ctx.in(0).dtype();
  OutputInfo y{t, ctx.in(0).shape()}, stat{t, {C}};
  return {y, stat, stat, stat, stat};
}

// BatchNormalization before opset 14 (spatial, is_test, five outputs in training mode): the
// engine runs the inference form, Y from the given mean and variance, with statistics per
// channel (spatial=1). The training-mode outputs (mean, var, saved_mean, saved_var) and
// spatial=0 (statistics per channel and position) are refused.
std::vector<OutputInfo> shape_batchnorm_legacy(const OpContext& ctx) {
  if (ctx.node.attr_int("spatial", 1) != 1) {
    ctx.fail("attribute spatial=" + std::to_string(ctx.node.attr_int("spatial", 1)) +
             " (statistics per position) is not supported; expected spatial=1");
  }
  for (size_t i = 1; i < ctx.node.outputs.size(); ++i) {
    if (ctx.node.outputs[i]) {
      ctx.fail("output " + std::to_string(i) +
               " (a training-mode statistic) is not supported before opset 14; expected only "
               "output 0 (inference)");
    }
  }
  return shape_batchnorm(ctx);
}

void cpu_batchnorm(OpContext& ctx) {
  int64_t N, C, S;
  bn_dims(ctx, &N, &C, &S);
  // Defaults are float32 values, as ONNX attributes are.
  double eps = ctx.node.attr_float("epsilon", 1e-5f),
         momentum = ctx.node.attr_float("momentum", 0.9f);
  bool training = ctx.node.attr_int("training_mode", 0) != 0;
  // ai.ortmodule BatchNormTorch (PyTorch's batch norm, and the BatchNormInternal that its
  // gradient rule switches it to) tracks the unbiased batch variance; ONNX's the biased one.
  const bool unbiased =
      ctx.node.op_type == "BatchNormTorch" || ctx.node.attr_int("unbiased_running_var", 0) != 0;
  ORTM_DISPATCH_FLOAT(ctx.in(0).dtype(), ctx, {
    auto in = [&](size_t i) { return ctx.in(i).data<scalar_t>(); };
    if (!training) {
      batchnorm_infer_forward<scalar_t>(N, C, S, eps, in(0), in(1), in(2), in(3), in(4),
                                        ctx.out(0).data<scalar_t>());
      break;
    }
    // Outputs the graph does not consume still need somewhere to go.
    std::vector<Tensor> scratch;
    auto out = [&](size_t i) {
      if (ctx.has_output(i)) return ctx.out(i).data<scalar_t>();
      scratch.push_back(Tensor::empty(ctx.in(0).dtype(), {C}));
      return scratch.back().data<scalar_t>();
    };
    scalar_t* y = ctx.out(0).data<scalar_t>();
    scalar_t *rm = out(1), *rv = out(2), *sm = out(3), *sis = out(4);
    batchnorm_train_forward<scalar_t>(N, C, S, eps, momentum, unbiased, in(0), in(1), in(2), in(3),
                                      in(4), y, rm, rv, sm, sis);
  });
}

// BatchNormalizationGrad(dY, X, scale, saved_mean, saved_inv_std) -> dX, dScale, dBias
std::vector<OutputInfo> shape_batchnorm_grad(const OpContext& ctx) {
  DType t = ctx.in(0).dtype();
  const Shape& x = ctx.in(1).shape();
  if (x.size() < 2) ctx.fail("input 1 must be [N, C, ...], got " + shape_str(x));
  if (ctx.in(0).shape() != x)
    ctx.fail("input 0 (dY) has shape " + shape_str(ctx.in(0).shape()) + ", input 1 has " +
             shape_str(x));
  for (size_t i = 1; i < 5; ++i) {
    expect_same_dtype(ctx, i);
    if (i >= 2 && ctx.in(i).numel() != x[1])
      ctx.fail("input " + std::to_string(i) + " has shape " + shape_str(ctx.in(i).shape()) +
               ", expected [" + std::to_string(x[1]) + "]");
  }
  OutputInfo dx{t, ctx.in(1).shape()}, dscale{t, ctx.in(2).shape()};
  return {dx, dscale, dscale};
}

void cpu_batchnorm_grad(OpContext& ctx) {
  const Shape& x = ctx.in(1).shape();
  int64_t N = x[0], C = x[1], S = dims_product(x, 2, x.size());
  ORTM_DISPATCH_FLOAT(ctx.in(0).dtype(), ctx, {
    auto ptr = [&](size_t i) { return ctx.has_output(i) ? ctx.out(i).data<scalar_t>() : nullptr; };
    batchnorm_train_backward<scalar_t>(
        N, C, S, ctx.in(1).data<scalar_t>(), ctx.in(0).data<scalar_t>(), ctx.in(2).data<scalar_t>(),
        ctx.in(3).data<scalar_t>(), ctx.in(4).data<scalar_t>(), ptr(0), ptr(1), ptr(2));
  });
}

// BatchNormInferenceGrad(dY, X, scale, mean, var; epsilon) -> dX, dScale, dBias
void cpu_batchnorm_inference_grad(OpContext& ctx) {
  const Shape& x = ctx.in(1).shape();
  int64_t N = x[0], C = x[1], S = dims_product(x, 2, x.size());
  double eps = ctx.node.attr_float("epsilon", 1e-5f);
  ORTM_DISPATCH_FLOAT(ctx.in(0).dtype(), ctx, {
    auto in = [&](size_t i) { return ctx.in(i).data<scalar_t>(); };
    auto out = [&](size_t i) { return ctx.has_output(i) ? ctx.out(i).data<scalar_t>() : nullptr; };
    batchnorm_infer_backward<scalar_t>(N, C, S, eps, in(1), in(0), in(2), in(3), in(4), out(0),
                                       out(1), out(2));
  });
}

void grad_batchnorm(GradContext& g) {
  Node& n = g.node();
  if (n.attr_int("training_mode", 0) == 0) {
    // Statistics are constants here (a BatchNorm in eval() inside a model being trained).
    if (g.needs_grad(3) || g.needs_grad(4)) {
      g.fail("inference-mode BatchNormalization cannot pass gradients to its mean and variance");
    }
    std::vector<Value*> grads = g.emit_multi(
        "BatchNormInferenceGrad",
        {g.output_grad(0), g.input(0), g.input(1), g.input(3), g.input(4)},
        {g.needs_grad(0), g.needs_grad(1), g.needs_grad(2)},
        {{"epsilon", Attribute::make_float(n.attr_float("epsilon", 1e-5f))}}, "ai.ortmodule");
    for (size_t i = 0; i < 3; ++i) g.set_input_grad(i, grads[i]);
    return;
  }
  // In training mode Y does not depend on input_mean/input_var (batch statistics are
  // used), so they get no gradient even when computed from differentiable values.
  const bool torch_semantics = n.op_type == "BatchNormTorch";
  g.replace_forward_op("BatchNormInternal", "com.microsoft");
  if (torch_semantics) n.attrs["unbiased_running_var"] = Attribute::make_int(1);
  Value* saved_mean = g.forward_output(3, "saved_mean");
  Value* saved_inv_std = g.forward_output(4, "saved_inv_std");
  std::vector<Value*> grads = g.emit_multi(
      "BatchNormalizationGrad",
      {g.output_grad(0), g.input(0), g.input(1), saved_mean, saved_inv_std},
      {g.needs_grad(0), g.needs_grad(1), g.needs_grad(2)},
      {{"epsilon", Attribute::make_float(n.attr_float("epsilon", 1e-5f))}}, "com.microsoft");
  for (size_t i = 0; i < 3; ++i) g.set_input_grad(i, grads[i]);
}

}  // namespace ortmodule
