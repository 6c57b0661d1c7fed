// Unary math and activations the transformer families use: Sin, Cos, Reciprocal,
// Softplus, Floor, Ceil, Gelu (opset 20, exact and tanh), with gradient rules.
#include <cmath>
#include <type_traits>

#include "grad/grad_context.h"
#include "kernels/cpu/activation.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/math/elementwise.h"
#include "ops/op_utils.h"
#include "ops/ops.h"
#include "ops/unary_float.h"

namespace ortmodule {

bool gelu_is_tanh(const OpContext& ctx) {
  // com.microsoft names the mode in the op: GeluGrad (erf) and FastGeluGrad (tanh).
  if (ctx.node.domain == "com.microsoft") return ctx.node.op_type == "FastGeluGrad";
  const std::string a = ctx.node.attr_string("approximate", "none");
  if (a != "none" && a != "tanh")
    ctx.fail("approximate=\"" + a + "\" is not a Gelu mode; expected \"none\" or \"tanh\"");
  return a == "tanh";
}

void cpu_sin(OpContext& ctx) {
  unary_float(ctx, [](auto v) { return std::sin(v); });
}
void cpu_cos(OpContext& ctx) {
  unary_float(ctx, [](auto v) { return std::cos(v); });
}
void cpu_reciprocal(OpContext& ctx) {
  unary_float(ctx, [](auto v) { return decltype(v)(1) / v; });
}
void cpu_softplus(OpContext& ctx) {
  unary_float(ctx, [](auto v) { return math::softplus(v); });
}
void cpu_floor(OpContext& ctx) {
  unary_float(ctx, [](auto v) { return std::floor(v); });
}
void cpu_ceil(OpContext& ctx) {
  unary_float(ctx, [](auto v) { return std::ceil(v); });
}

// Sign: -1, 0 or 1 in the input's dtype; NaN stays NaN.
void cpu_sign(OpContext& ctx) {
  const Tensor& x = ctx.in(0);
  ORTM_DISPATCH_NUMERIC(x.dtype(), ctx,
                        unary_map(x.numel(), x.data<scalar_t>(), ctx.out(0).data<scalar_t>(),
                                  [](scalar_t v) { return math::sign(v); }));
}

void cpu_gelu(OpContext& ctx) {
  const Tensor& x = ctx.in(0);
  if (x.dtype() == DType::Float32) {
    gelu_forward_f32(x.numel(), x.data<float>(), ctx.out(0).data<float>(), gelu_is_tanh(ctx));
    return;
  }
  if (x.dtype() == DType::BFloat16 || x.dtype() == DType::Float16) {
    gelu_forward_low(x.dtype() == DType::BFloat16, x.numel(), x.data<uint16_t>(),
                     ctx.out(0).data<uint16_t>(), gelu_is_tanh(ctx));
    return;
  }
  if (gelu_is_tanh(ctx)) {
    unary_float(ctx, [](auto v) { return math::gelu_tanh(v); });
  } else {
    unary_float(ctx, [](auto v) { return math::gelu(v); });
  }
}

// GeluGrad(dY, X; approximate) -> (dX, [Y]), and com.microsoft GeluGrad / FastGeluGrad(dY, X).
// The engine's own GeluGrad may also write Y = Gelu(X) (output 1), bit for bit what Gelu
// computes, so that backward need not repeat the forward's Gelu for the weight gradient of the
// product after it (passes/recompute.h: fold_gelu_recompute_into_grad).
std::vector<OutputInfo> shape_gelu_grad(const OpContext& ctx) {
  std::vector<OutputInfo> out = one_output(ctx.in(0).dtype(), ctx.in(0).shape());
  if (ctx.node.outputs.size() > 1 && ctx.node.outputs[1]) out.push_back(out[0]);
  return out;
}

void cpu_gelu_grad(OpContext& ctx) {
  expect_same_dtype(ctx, 1);
  const Tensor& dy = ctx.in(0);
  const Tensor& x = ctx.in(1);
  if (dy.shape() != x.shape())
    ctx.fail("gradient shape " + shape_str(dy.shape()) + " differs from " + shape_str(x.shape()));
  const bool tanh_mode = gelu_is_tanh(ctx);
  const bool value = ctx.has_output(1);
  if (dy.dtype() == DType::Float32) {
    gelu_backward_f32(dy.numel(), dy.data<float>(), x.data<float>(), ctx.out(0).data<float>(),
                      value ? ctx.out(1).data<float>() : nullptr, tanh_mode);
    return;
  }
  if (dy.dtype() == DType::BFloat16 || dy.dtype() == DType::Float16) {
    gelu_backward_low(dy.dtype() == DType::BFloat16, dy.numel(), dy.data<uint16_t>(),
                      x.data<uint16_t>(), ctx.out(0).data<uint16_t>(),
                      value ? ctx.out(1).data<uint16_t>() : nullptr, tanh_mode);
    return;
  }
  ORTM_DISPATCH_FLOAT(dy.dtype(), ctx, {
    if (value) {
      unary_map(x.numel(), x.data<scalar_t>(), ctx.out(1).data<scalar_t>(),
                [tanh_mode](scalar_t v) { return tanh_mode ? math::gelu_tanh(v) : math::gelu(v); });
    }
    binary_map(dy.shape(), dy.data<scalar_t>(), x.shape(), x.data<scalar_t>(), ctx.out(0).shape(),
               ctx.out(0).data<scalar_t>(), [tanh_mode](scalar_t g, scalar_t v) {
                 return tanh_mode ? math::gelu_tanh_grad(g, v) : math::gelu_grad(g, v);
               });
  });
}

void grad_sin(GradContext& g) {
  g.set_input_grad(0, g.emit("Mul", {g.output_grad(0), g.emit("Cos", {g.input(0)})}));
}
void grad_cos(GradContext& g) {
  g.set_input_grad(0,
                   g.emit("Neg", {g.emit("Mul", {g.output_grad(0), g.emit("Sin", {g.input(0)})})}));
}
// y = 1/x:  dx = -dy * y^2
void grad_reciprocal(GradContext& g) {
  Value* y = g.output(0);
  g.set_input_grad(0, g.emit("Neg", {g.emit("Mul", {g.output_grad(0), g.emit("Mul", {y, y})})}));
}
// y = softplus(x):  dx = dy * sigmoid(x)
void grad_softplus(GradContext& g) {
  g.set_input_grad(0, g.emit("Mul", {g.output_grad(0), g.emit("Sigmoid", {g.input(0)})}));
}
void grad_gelu(GradContext& g) {
  const std::string mode = g.node().attr_string("approximate", "none");
  g.set_input_grad(0, g.emit("GeluGrad", {g.output_grad(0), g.input(0)},
                             {{"approximate", Attribute::make_string(mode)}}, "ai.ortmodule"));
}

}  // namespace ortmodule
