// The ELU family (Elu, Selu, Celu, and ai.ortmodule ScaledElu: aten.elu with any scale and
// input_scale), HardSigmoid, HardSwish and Mish, with their gradients (internal EluGrad,
// HardSigmoidGrad, HardSwishGrad and MishGrad, from the forward input x). The gradients are
// PyTorch's, kinks included (kernels/math/activation.h).
#include <stdexcept>
#include <string>

#include "grad/grad_context.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/math/activation.h"
#include "ops/op_utils.h"
#include "ops/ops.h"
#include "ops/unary_float.h"

namespace ortmodule {

namespace {

// Gradient kernels (dY, X): operands of one shape and dtype.
template <typename F>
void grad_binary(OpContext& ctx, F f) {
  expect_same_dtype(ctx, 1);
  const Tensor& dy = ctx.in(0);
  const Tensor& x = ctx.in(1);
  if (dy.shape() != x.shape())
    ctx.fail("gradient shape " + shape_str(dy.shape()) + " differs from " + shape_str(x.shape()));
  ORTM_DISPATCH_FLOAT(
      dy.dtype(), ctx,
      binary_map(dy.shape(), dy.data<scalar_t>(), x.shape(), x.data<scalar_t>(), dy.shape(),
                 ctx.out(0).data<scalar_t>(),
                 [&](scalar_t g, scalar_t v) { return static_cast<scalar_t>(f(g, v)); }));
}

// Selu's constants, as ONNX and PyTorch define them.
constexpr double kSeluAlpha = 1.67326319217681884765625;
constexpr double kSeluGamma = 1.05070102214813232421875;

}  // namespace

EluParams elu_params(const Node& node) {
  if (node.domain.empty() && node.op_type == "Selu")
    return {node.attr_float("alpha", kSeluAlpha), node.attr_float("gamma", kSeluGamma), 1.0};
  const double alpha = node.attr_float("alpha", 1.0);
  if (node.domain.empty() && node.op_type == "Celu") {
    if (alpha == 0) throw std::runtime_error(node.describe() + ": alpha is 0; Celu divides by it");
    return {alpha, 1.0, 1.0 / alpha};
  }
  if (node.domain.empty()) return {alpha, 1.0, 1.0};  // Elu
  return {alpha, node.attr_float("scale", 1.0), node.attr_float("input_scale", 1.0)};
}

HardSigmoidParams hard_sigmoid_params(const Node& node) {
  const float alpha = static_cast<float>(node.attr_float("alpha", 0.2));
  const float beta = static_cast<float>(node.attr_float("beta", 0.5));
  if (alpha <= 0)
    throw std::runtime_error(node.describe() + ": alpha " + std::to_string(alpha) +
                             " is not positive; HardSigmoid needs alpha > 0");
  return {alpha, beta, -beta / alpha, (1.0f - beta) / alpha};
}

// ---- Elu, Selu, Celu, ai.ortmodule ScaledElu(x; alpha, scale, input_scale) ----

void cpu_elu(OpContext& ctx) {
  const EluParams p = elu_params(ctx.node);
  unary_float(ctx, [p](auto v) {
    using T = decltype(v);
    return math::elu(v, static_cast<T>(p.alpha), static_cast<T>(p.scale),
                     static_cast<T>(p.input_scale));
  });
}

// EluGrad(dY, X; alpha, scale, input_scale)
void cpu_elu_grad(OpContext& ctx) {
  const EluParams p = elu_params(ctx.node);
  grad_binary(ctx, [p](auto g, auto v) {
    using T = decltype(v);
    return math::elu_grad(g, v, static_cast<T>(p.alpha), static_cast<T>(p.scale),
                          static_cast<T>(p.input_scale));
  });
}

void grad_elu(GradContext& g) {
  const EluParams p = elu_params(g.node());
  g.set_input_grad(0, g.emit("EluGrad", {g.output_grad(0), g.input(0)},
                             {{"alpha", Attribute::make_float(p.alpha)},
                              {"scale", Attribute::make_float(p.scale)},
                              {"input_scale", Attribute::make_float(p.input_scale)}},
                             "ai.ortmodule"));
}

// ---- HardSigmoid(x; alpha, beta), HardSwish, Mish ----

void cpu_hard_sigmoid(OpContext& ctx) {
  const HardSigmoidParams p = hard_sigmoid_params(ctx.node);
  unary_float(ctx, [p](auto v) {
    using T = decltype(v);
    return math::hard_sigmoid(v, static_cast<T>(p.alpha), static_cast<T>(p.beta));
  });
}

// HardSigmoidGrad(dY, X; alpha, beta)
void cpu_hard_sigmoid_grad(OpContext& ctx) {
  const HardSigmoidParams p = hard_sigmoid_params(ctx.node);
  grad_binary(ctx, [p](auto g, auto v) {
    using T = decltype(v);
    return math::hard_sigmoid_grad(g, v, static_cast<T>(p.alpha), static_cast<T>(p.lower),
                                   static_cast<T>(p.upper));
  });
}

void grad_hard_sigmoid(GradContext& g) {
  const HardSigmoidParams p = hard_sigmoid_params(g.node());
  g.set_input_grad(0, g.emit("HardSigmoidGrad", {g.output_grad(0), g.input(0)},
                             {{"alpha", Attribute::make_float(p.alpha)},
                              {"beta", Attribute::make_float(p.beta)}},
                             "ai.ortmodule"));
}

void cpu_hard_swish(OpContext& ctx) {
  unary_float(ctx, [](auto v) { return math::hard_swish(v); });
}
void cpu_hard_swish_grad(OpContext& ctx) {
  grad_binary(ctx, [](auto g, auto v) { return math::hard_swish_grad(g, v); });
}
void grad_hard_swish(GradContext& g) {
  g.set_input_grad(0, g.emit("HardSwishGrad", {g.output_grad(0), g.input(0)}, {}, "ai.ortmodule"));
}

void cpu_mish(OpContext& ctx) {
  unary_float(ctx, [](auto v) { return math::mish(v); });
}
void cpu_mish_grad(OpContext& ctx) {
  grad_binary(ctx, [](auto g, auto v) { return math::mish_grad(g, v); });
}
void grad_mish(GradContext& g) {
  g.set_input_grad(0, g.emit("MishGrad", {g.output_grad(0), g.input(0)}, {}, "ai.ortmodule"));
}

}  // namespace ortmodule
