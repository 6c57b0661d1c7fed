// Element-wise ops: shape rules, CPU kernels and gradient rules side by side.
#include <cmath>
#include <limits>
#include <type_traits>

#include "grad/gradient_builder.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/math/bfloat16.h"
#include "kernels/math/elementwise.h"
#include "ops/op_utils.h"
#include "ops/ops.h"

namespace ortmodule {

// ---- shape rules ----

std::vector<OutputInfo> shape_same_as_input0(const OpContext& ctx) {
  return one_output(ctx.in(0).dtype(), ctx.in(0).shape());
}

std::vector<OutputInfo> shape_view_of_input0(const OpContext& ctx) {
  auto out = one_output(ctx.in(0).dtype(), ctx.in(0).shape());
  out[0].alias_of = 0;
  return out;
}

std::vector<OutputInfo> shape_binary_broadcast(const OpContext& ctx) {
  expect_same_dtype(ctx, 1);
  return one_output(ctx.in(0).dtype(), broadcast_shapes(ctx, ctx.in(0).shape(), ctx.in(1).shape()));
}

std::vector<OutputInfo> shape_variadic_broadcast(const OpContext& ctx) {
  Shape s = ctx.in(0).shape();
  for (size_t i = 1; i < ctx.num_inputs(); ++i) {
    expect_same_dtype(ctx, i);
    s = broadcast_shapes(ctx, s, ctx.in(i).shape());
  }
  return one_output(ctx.in(0).dtype(), s);
}

// ---- binary kernels ----

template <typename F>
void run_binary(OpContext& ctx, F f) {
  const Tensor& a = ctx.in(0);
  const Tensor& b = ctx.in(1);
  Tensor& y = ctx.out(0);
  ORTM_DISPATCH_NUMERIC(a.dtype(), ctx,
                        binary_map(a.shape(), a.data<scalar_t>(), b.shape(), b.data<scalar_t>(),
                                   y.shape(), y.data<scalar_t>(), [&](scalar_t p, scalar_t q) {
                                     return static_cast<scalar_t>(f(p, q));
                                   }));
}

void cpu_add(OpContext& ctx) {
  run_binary(ctx, [](auto p, auto q) { return p + q; });
}
void cpu_sub(OpContext& ctx) {
  run_binary(ctx, [](auto p, auto q) { return p - q; });
}
void cpu_mul(OpContext& ctx) {
  run_binary(ctx, [](auto p, auto q) { return p * q; });
}
void cpu_div(OpContext& ctx) {
  if (!dtype_is_floating(ctx.in(0).dtype())) {
    // Integer division truncates toward zero like C++, which is what ONNX requires.
    for (int64_t i = 0; i < ctx.in(1).numel(); ++i)
      if (ctx.in(1).int_at(i) == 0) ctx.fail("integer division by zero");
  }
  run_binary(ctx, [](auto p, auto q) {
    using T = decltype(p);
    if constexpr (std::is_integral_v<T> && std::is_signed_v<T>) {
      // INT_MIN / -1 overflows (and traps); negate with wrap-around instead.
      if (q == T(-1)) return static_cast<T>(T(0) - static_cast<std::make_unsigned_t<T>>(p));
    }
    return static_cast<T>(p / q);
  });
}
void cpu_pow(OpContext& ctx) {
  ORTM_DISPATCH_FLOAT(ctx.in(0).dtype(), ctx, (void)0);
  // Scalar exponents models use (x**2 in norms, and x**1 in its gradient) skip std::pow.
  if (ctx.in(1).numel() == 1 && ctx.in(1).shape().size() <= ctx.in(0).shape().size()) {
    const double e = ctx.in(1).float_at(0);
    if (e == 1.0) return run_binary(ctx, [](auto p, auto) { return p; });
    if (e == 2.0) return run_binary(ctx, [](auto p, auto) { return p * p; });
    if (e == 0.5) return run_binary(ctx, [](auto p, auto) { return std::sqrt(p); });
  }
  run_binary(ctx, [](auto p, auto q) { return std::pow(p, q); });
}

void cpu_sum(OpContext& ctx) {
  Tensor& y = ctx.out(0);
  ORTM_DISPATCH_NUMERIC(y.dtype(), ctx, {
    const Tensor& first = ctx.in(0);
    if (ctx.num_inputs() == 1) {
      binary_map(first.shape(), first.data<scalar_t>(), Shape{}, first.data<scalar_t>(), y.shape(),
                 y.data<scalar_t>(), [](scalar_t p, scalar_t) { return p; });
      break;
    }
    binary_map(first.shape(), first.data<scalar_t>(), ctx.in(1).shape(), ctx.in(1).data<scalar_t>(),
               y.shape(), y.data<scalar_t>(), [](scalar_t p, scalar_t q) { return p + q; });
    for (size_t i = 2; i < ctx.num_inputs(); ++i) {
      binary_map(y.shape(), y.data<scalar_t>(), ctx.in(i).shape(), ctx.in(i).data<scalar_t>(),
                 y.shape(), y.data<scalar_t>(), [](scalar_t p, scalar_t q) { return p + q; });
    }
  });
}

// ---- unary kernels ----

template <typename F>
void run_unary_float(OpContext& ctx, F f) {
  const Tensor& x = ctx.in(0);
  ORTM_DISPATCH_FLOAT(x.dtype(), ctx,
                      unary_map(x.numel(), x.data<scalar_t>(), ctx.out(0).data<scalar_t>(),
                                [&](scalar_t v) { return static_cast<scalar_t>(f(v)); }));
}

void cpu_neg(OpContext& ctx) {
  const Tensor& x = ctx.in(0);
  ORTM_DISPATCH_NUMERIC(x.dtype(), ctx,
                        unary_map(x.numel(), x.data<scalar_t>(), ctx.out(0).data<scalar_t>(),
                                  [](scalar_t v) { return static_cast<scalar_t>(-v); }));
}
void cpu_relu(OpContext& ctx) {
  run_unary_float(ctx, [](auto v) { return math::relu(v); });
}
void cpu_sigmoid(OpContext& ctx) {
  run_unary_float(ctx, [](auto v) { return math::sigmoid(v); });
}
void cpu_tanh(OpContext& ctx) {
  run_unary_float(ctx, [](auto v) { return math::tanh_fwd(v); });
}
void cpu_exp(OpContext& ctx) {
  run_unary_float(ctx, [](auto v) { return std::exp(v); });
}
void cpu_log(OpContext& ctx) {
  run_unary_float(ctx, [](auto v) { return std::log(v); });
}
void cpu_sqrt(OpContext& ctx) {
  run_unary_float(ctx, [](auto v) { return std::sqrt(v); });
}
void cpu_erf(OpContext& ctx) {
  run_unary_float(ctx, [](auto v) { return std::erf(v); });
}
void cpu_abs(OpContext& ctx) {
  const Tensor& x = ctx.in(0);
  ORTM_DISPATCH_NUMERIC(
      x.dtype(), ctx,
      unary_map(x.numel(), x.data<scalar_t>(), ctx.out(0).data<scalar_t>(),
                [](scalar_t v) { return static_cast<scalar_t>(v < 0 ? -v : v); }));
}
void cpu_leaky_relu(OpContext& ctx) {
  const double alpha = ctx.node.attr_float("alpha", 0.01f);
  run_unary_float(ctx,
                  [alpha](auto v) { return math::leaky_relu(v, static_cast<decltype(v)>(alpha)); });
}
void cpu_view(OpContext&) {}  // the output is a view made by the executor

template <typename F>
void run_grad_binary(OpContext& ctx, F f) {
  expect_same_dtype(ctx, 1);
  const Tensor& dy = ctx.in(0);
  const Tensor& y = ctx.in(1);
  if (dy.shape() != y.shape()) {
    ctx.fail("gradient shape " + shape_str(dy.shape()) + " differs from " + shape_str(y.shape()));
  }
  ORTM_DISPATCH_FLOAT(
      dy.dtype(), ctx,
      binary_map(dy.shape(), dy.data<scalar_t>(), y.shape(), y.data<scalar_t>(), ctx.out(0).shape(),
                 ctx.out(0).data<scalar_t>(), [&](scalar_t g, scalar_t v) { return f(g, v); }));
}
void cpu_relu_grad(OpContext& ctx) {
  run_grad_binary(ctx, [](auto g, auto v) { return math::relu_grad(g, v); });
}
void cpu_sigmoid_grad(OpContext& ctx) {
  run_grad_binary(ctx, [](auto g, auto v) { return math::sigmoid_grad(g, v); });
}
void cpu_tanh_grad(OpContext& ctx) {
  run_grad_binary(ctx, [](auto g, auto v) { return math::tanh_grad(g, v); });
}

void cpu_erf_grad(OpContext& ctx) {
  run_grad_binary(ctx, [](auto g, auto v) { return math::erf_grad(g, v); });
}
// LeakyReluGrad(dY, Y; alpha)
void cpu_leaky_relu_grad(OpContext& ctx) {
  const double alpha = ctx.node.attr_float("alpha", 0.01f);
  run_grad_binary(ctx, [alpha](auto g, auto v) {
    return math::leaky_relu_grad(g, v, static_cast<decltype(g)>(alpha));
  });
}

// ---- Clip(x, min?, max?) and ClipGrad(dY, x, min?, max?) ----

namespace {
template <typename T>
void clip_bounds(const OpContext& ctx, size_t first, T* lo, T* hi) {
  for (size_t i = first; i < first + 2; ++i)
    if (ctx.has_input(i) && ctx.in(i).numel() != 1)
      ctx.fail("bound (input " + std::to_string(i) + ") must hold one value, got shape " +
               shape_str(ctx.in(i).shape()));
  *lo = ctx.has_input(first) ? static_cast<T>(ctx.in(first).float_at(0))
                             : std::numeric_limits<T>::lowest();
  *hi = ctx.has_input(first + 1) ? static_cast<T>(ctx.in(first + 1).float_at(0))
                                 : std::numeric_limits<T>::max();
}
}  // namespace

void cpu_clip(OpContext& ctx) {
  const Tensor& x = ctx.in(0);
  ORTM_DISPATCH_FLOAT(x.dtype(), ctx, {
    scalar_t lo, hi;
    clip_bounds(ctx, 1, &lo, &hi);
    unary_map(x.numel(), x.data<scalar_t>(), ctx.out(0).data<scalar_t>(),
              [lo, hi](scalar_t v) { return v < lo ? lo : (v > hi ? hi : v); });
  });
}

void cpu_clip_grad(OpContext& ctx) {
  const Tensor& dy = ctx.in(0);
  const Tensor& x = ctx.in(1);
  expect_same_dtype(ctx, 1);
  if (dy.shape() != x.shape())
    ctx.fail("gradient shape " + shape_str(dy.shape()) + " differs from " + shape_str(x.shape()));
  ORTM_DISPATCH_FLOAT(dy.dtype(), ctx, {
    scalar_t lo, hi;
    clip_bounds(ctx, 2, &lo, &hi);
    binary_map(dy.shape(), dy.data<scalar_t>(), x.shape(), x.data<scalar_t>(), dy.shape(),
               ctx.out(0).data<scalar_t>(),
               [lo, hi](scalar_t g, scalar_t v) { return math::clip_grad(g, v, lo, hi); });
  });
}

// ---- Cast / CastLike ----

// Converts n elements read through `load` (which yields a value of an arithmetic type)
// into y's dtype.
template <typename Src, typename Load>
void cast_from(OpContext& ctx, const Src* x, Tensor& y, Load load) {
  int64_t n = y.numel();
  switch (y.dtype()) {
    case DType::Float32:
      unary_map(n, x, y.data<float>(), [load](Src v) { return static_cast<float>(load(v)); });
      break;
    case DType::Float64:
      unary_map(n, x, y.data<double>(), [load](Src v) { return static_cast<double>(load(v)); });
      break;
    case DType::BFloat16:
      unary_map(n, x, y.data<uint16_t>(),
                [load](Src v) { return math::float_to_bf16(static_cast<float>(load(v))); });
      break;
    case DType::Int64:
      unary_map(n, x, y.data<int64_t>(), [load](Src v) { return static_cast<int64_t>(load(v)); });
      break;
    case DType::Int32:
      unary_map(n, x, y.data<int32_t>(), [load](Src v) { return static_cast<int32_t>(load(v)); });
      break;
    case DType::UInt8:
      unary_map(n, x, y.data<uint8_t>(), [load](Src v) { return static_cast<uint8_t>(load(v)); });
      break;
    case DType::Int8:
      unary_map(n, x, y.data<int8_t>(), [load](Src v) { return static_cast<int8_t>(load(v)); });
      break;
    case DType::Bool:
      unary_map(n, x, y.data<uint8_t>(), [load](Src v) {
        using T = decltype(load(v));
        return static_cast<uint8_t>(load(v) != T(0));
      });
      break;
    default:
      ctx.fail("cast to " + dtype_name(y.dtype()) + " is not supported");
  }
}

template <typename Src>
void cast_from(OpContext& ctx, const Src* x, Tensor& y) {
  cast_from(ctx, x, y, [](Src v) { return v; });
}

void cpu_cast(OpContext& ctx) {
  const Tensor& x = ctx.in(0);
  Tensor& y = ctx.out(0);
  switch (x.dtype()) {
    case DType::Float32:
      cast_from(ctx, x.data<float>(), y);
      break;
    case DType::Float64:
      cast_from(ctx, x.data<double>(), y);
      break;
    case DType::BFloat16:
      cast_from(ctx, x.data<uint16_t>(), y, [](uint16_t v) { return math::bf16_to_float(v); });
      break;
    case DType::Int64:
      cast_from(ctx, x.data<int64_t>(), y);
      break;
    case DType::Int32:
      cast_from(ctx, x.data<int32_t>(), y);
      break;
    case DType::Bool:
    case DType::UInt8:
      cast_from(ctx, x.data<uint8_t>(), y);
      break;
    case DType::Int8:
      cast_from(ctx, x.data<int8_t>(), y);
      break;
    default:
      ctx.fail("cast from " + dtype_name(x.dtype()) + " is not supported");
  }
}

std::vector<OutputInfo> shape_cast(const OpContext& ctx) {
  int64_t to = ctx.node.attr_int("to", 0);
  if (!dtype_is_supported(static_cast<int32_t>(to)))
    ctx.fail("unsupported target type " + std::to_string(to));
  return one_output(static_cast<DType>(to), ctx.in(0).shape());
}

std::vector<OutputInfo> shape_cast_like(const OpContext& ctx) {
  return one_output(ctx.in(1).dtype(), ctx.in(0).shape());
}

// ---- internal helpers of gradient graphs ----

// SumToShape(x, shape): sums x down to `shape` (which broadcasts to x's shape).
std::vector<OutputInfo> shape_sum_to_shape(const OpContext& ctx) {
  Shape target = ctx.in(1).to_int_vector();
  check_shape(ctx, target, "shape input (input 1)");
  if (target.size() > ctx.in(0).rank() ||
      broadcast_shapes(ctx, ctx.in(0).shape(), target) != ctx.in(0).shape())
    ctx.fail("shape " + shape_str(target) + " does not broadcast to input 0's shape " +
             shape_str(ctx.in(0).shape()));
  auto out = one_output(ctx.in(0).dtype(), target);
  if (target == ctx.in(0).shape()) out[0].alias_of = 0;  // nothing was broadcast
  return out;
}

void cpu_sum_to_shape(OpContext& ctx) {
  const Tensor& x = ctx.in(0);
  Tensor& y = ctx.out(0);
  if (y.raw() == x.raw()) return;
  ORTM_DISPATCH_NUMERIC(x.dtype(), ctx,
                        sum_to_shape(x.shape(), x.data<scalar_t>(), y.shape(), y.data<scalar_t>()));
}

// ScalarLike(x; value): a 0-d tensor holding `value` in x's dtype.
std::vector<OutputInfo> shape_scalar_like(const OpContext& ctx) {
  return one_output(ctx.in(0).dtype(), {});
}
void cpu_scalar_like(OpContext& ctx) {
  double v = ctx.node.attr_float("value", 0.0);
  ORTM_DISPATCH_NUMERIC(ctx.out(0).dtype(), ctx,
                        ctx.out(0).data<scalar_t>()[0] = static_cast<scalar_t>(v));
}

// Expand(x, shape)
std::vector<OutputInfo> shape_expand(const OpContext& ctx) {
  if (ctx.in(1).rank() > 1)
    ctx.fail("shape input (input 1) must be 1-D, got " + shape_str(ctx.in(1).shape()));
  Shape target = ctx.in(1).to_int_vector();
  check_shape(ctx, target, "shape input (input 1)");
  return one_output(ctx.in(0).dtype(), broadcast_shapes(ctx, ctx.in(0).shape(), target));
}
void cpu_expand(OpContext& ctx) {
  const Tensor& x = ctx.in(0);
  Tensor& y = ctx.out(0);
  ORTM_DISPATCH_ALL(
      x.dtype(), ctx,
      binary_map(x.shape(), x.data<scalar_t>(), Shape{}, x.data<scalar_t>(), y.shape(),
                 y.data<scalar_t>(), [](scalar_t p, scalar_t) { return p; }));
}

// ---- gradient rules ----

void grad_add(GradContext& g) {
  if (g.needs_grad(0)) g.set_input_grad(0, g.sum_to_shape(g.output_grad(0), g.input(0)));
  if (g.needs_grad(1)) g.set_input_grad(1, g.sum_to_shape(g.output_grad(0), g.input(1)));
}

void grad_sub(GradContext& g) {
  if (g.needs_grad(0)) g.set_input_grad(0, g.sum_to_shape(g.output_grad(0), g.input(0)));
  if (g.needs_grad(1))
    g.set_input_grad(1, g.sum_to_shape(g.emit("Neg", {g.output_grad(0)}), g.input(1)));
}

void grad_mul(GradContext& g) {
  Value* dy = g.output_grad(0);
  if (g.needs_grad(0))
    g.set_input_grad(0, g.sum_to_shape(g.emit("Mul", {dy, g.input(1)}), g.input(0)));
  if (g.needs_grad(1))
    g.set_input_grad(1, g.sum_to_shape(g.emit("Mul", {dy, g.input(0)}), g.input(1)));
}

void grad_div(GradContext& g) {
  // y = a / b:  da = dy / b,  db = -dy * a / b^2 = -(dy / b) * y
  Value* dy_over_b = g.emit("Div", {g.output_grad(0), g.input(1)});
  if (g.needs_grad(0)) g.set_input_grad(0, g.sum_to_shape(dy_over_b, g.input(0)));
  if (g.needs_grad(1)) {
    Value* db = g.emit("Neg", {g.emit("Mul", {dy_over_b, g.output(0)})});
    g.set_input_grad(1, g.sum_to_shape(db, g.input(1)));
  }
}

void grad_pow(GradContext& g) {
  // y = a^b:  da = dy * b * a^(b-1),  db = dy * y * log(a)
  Value* dy = g.output_grad(0);
  if (g.needs_grad(0)) {
    Value* b_minus_1 = g.emit("Sub", {g.input(1), g.scalar_constant(1.0, g.input(1))});
    Value* local = g.emit("Mul", {g.input(1), g.emit("Pow", {g.input(0), b_minus_1})});
    g.set_input_grad(0, g.sum_to_shape(g.emit("Mul", {dy, local}), g.input(0)));
  }
  if (g.needs_grad(1)) {
    Value* local = g.emit("Mul", {g.output(0), g.emit("Log", {g.input(0)})});
    g.set_input_grad(1, g.sum_to_shape(g.emit("Mul", {dy, local}), g.input(1)));
  }
}

void grad_sum(GradContext& g) {
  for (size_t i = 0; i < g.node().inputs.size(); ++i)
    if (g.needs_grad(i)) g.set_input_grad(i, g.sum_to_shape(g.output_grad(0), g.input(i)));
}

void grad_neg(GradContext& g) { g.set_input_grad(0, g.emit("Neg", {g.output_grad(0)})); }
void grad_identity(GradContext& g) { g.set_input_grad(0, g.output_grad(0)); }
void grad_relu(GradContext& g) {
  g.set_input_grad(0, g.emit("ReluGrad", {g.output_grad(0), g.output(0)}, {}, "com.microsoft"));
}
void grad_sigmoid(GradContext& g) {
  g.set_input_grad(0, g.emit("SigmoidGrad", {g.output_grad(0), g.output(0)}, {}, "com.microsoft"));
}
void grad_tanh(GradContext& g) {
  g.set_input_grad(0, g.emit("TanhGrad", {g.output_grad(0), g.output(0)}, {}, "com.microsoft"));
}
void grad_erf(GradContext& g) {
  g.set_input_grad(0, g.emit("ErfGrad", {g.output_grad(0), g.input(0)}, {}, "ai.ortmodule"));
}
void grad_abs(GradContext& g) {
  // sign(x) = x / max(|x|, tiny): exact away from 0 and 0 at 0, as in PyTorch.
  Value* sign = g.emit(
      "Div", {g.input(0), g.emit("Clip", {g.output(0), g.scalar_constant(1e-30, g.output(0))})});
  g.set_input_grad(0, g.emit("Mul", {g.output_grad(0), sign}));
}
void grad_leaky_relu(GradContext& g) {
  g.set_input_grad(0,
                   g.emit("LeakyReluGrad", {g.output_grad(0), g.output(0)},
                          {{"alpha", Attribute::make_float(g.node().attr_float("alpha", 0.01f))}},
                          "com.microsoft"));
}
void grad_clip(GradContext& g) {
  if (g.needs_grad(1) || g.needs_grad(2))
    g.fail("gradients with respect to the bounds are not supported");
  g.set_input_grad(0, g.emit("ClipGrad", {g.output_grad(0), g.input(0), g.input(1), g.input(2)}, {},
                             "ai.ortmodule"));
}
void grad_exp(GradContext& g) {
  g.set_input_grad(0, g.emit("Mul", {g.output_grad(0), g.output(0)}));
}
void grad_log(GradContext& g) {
  g.set_input_grad(0, g.emit("Div", {g.output_grad(0), g.input(0)}));
}
void grad_sqrt(GradContext& g) {
  Value* half = g.scalar_constant(0.5, g.output(0));
  g.set_input_grad(0, g.emit("Mul", {g.emit("Div", {g.output_grad(0), g.output(0)}), half}));
}
void grad_cast(GradContext& g) {
  g.set_input_grad(0, g.emit("CastLike", {g.output_grad(0), g.input(0)}));
}
void grad_expand(GradContext& g) {
  g.set_input_grad(0, g.sum_to_shape(g.output_grad(0), g.input(0)));
}

}  // namespace ortmodule
