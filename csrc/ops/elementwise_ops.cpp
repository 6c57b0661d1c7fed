// Element-wise ops: shape rules, CPU kernels and gradient rules side by side.
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "grad/grad_context.h"
#include "kernels/cpu/activation.h"
#include "kernels/cpu/broadcast.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/math/bfloat16.h"
#include "kernels/math/elementwise.h"
#include "kernels/math/float16.h"
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

// Add, Sub, Mul, Div and Pow before opset 7: no implicit broadcasting. With broadcast=1, B
// is broadcast to A's shape, its dims aligned with A's from `axis` (default: trailing, as
// numpy aligns them); with broadcast=0 the shapes must match.
std::vector<OutputInfo> shape_legacy_broadcast(const OpContext& ctx) {
  expect_same_dtype(ctx, 1);
  const Shape& a = ctx.in(0).shape();
  const Shape& b = ctx.in(1).shape();
  const int64_t broadcast = ctx.node.attr_int("broadcast", 0);
  if (broadcast == 0) {
    if (a != b) {
      ctx.fail("broadcast=0 needs inputs of one shape, got " + shape_str(a) + " and " +
               shape_str(b) + " (set broadcast=1 to broadcast B)");
    }
    return one_output(ctx.in(0).dtype(), a);
  }
  const int64_t rank_a = static_cast<int64_t>(a.size()), rank_b = static_cast<int64_t>(b.size());
  if (rank_b > rank_a) {
    ctx.fail("broadcast=1 broadcasts B to A's shape; B " + shape_str(b) + " has more dims than A " +
             shape_str(a));
  }
  if (ctx.node.has_attr("axis")) {
    int64_t axis = ctx.node.attr_int("axis", 0);
    if (axis < 0) axis += rank_a;
    if (axis != rank_a - rank_b) {
      ctx.fail("attribute axis=" + std::to_string(ctx.node.attr_int("axis", 0)) + " aligns B " +
               shape_str(b) + " with A " + shape_str(a) +
               " away from A's trailing dims; only trailing alignment (axis=" +
               std::to_string(rank_a - rank_b) + ") is supported");
    }
  }
  if (broadcast_shapes(ctx, a, b) != a) {
    ctx.fail("broadcast=1 broadcasts B to A's shape; B " + shape_str(b) + " does not fit A " +
             shape_str(a));
  }
  return one_output(ctx.in(0).dtype(), a);
}

std::vector<OutputInfo> shape_variadic_broadcast(const OpContext& ctx) {
  Shape s = ctx.in(0).shape();
  for (size_t i = 1; i < ctx.num_inputs(); ++i) {
    expect_same_dtype(ctx, i);
    s = broadcast_shapes(ctx, s, ctx.in(i).shape());
  }
  return one_output(ctx.in(0).dtype(), s);
}

// Pow(X, Y): X and Y may differ in dtype (ONNX Pow since opset 12); Z has X's dtype.
std::vector<OutputInfo> shape_pow(const OpContext& ctx) {
  return one_output(ctx.in(0).dtype(), broadcast_shapes(ctx, ctx.in(0).shape(), ctx.in(1).shape()));
}

// ---- binary kernels ----

namespace {
// Integer arithmetic wraps around as numpy's does: it runs in an unsigned type at least as
// wide as int, where overflow is defined. Floats compute in their own type.
template <typename T, typename = void>
struct WrapType {
  using type = T;
};
template <typename T>
struct WrapType<T, std::enable_if_t<std::is_integral_v<T>>> {
  using type =
      std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, std::make_unsigned_t<T>>;
};
template <typename T>
using wrap_t = typename WrapType<T>::type;

template <typename T>
T wrap_add(T p, T q) {
  return static_cast<T>(static_cast<wrap_t<T>>(p) + static_cast<wrap_t<T>>(q));
}
template <typename T>
T wrap_sub(T p, T q) {
  return static_cast<T>(static_cast<wrap_t<T>>(p) - static_cast<wrap_t<T>>(q));
}
template <typename T>
T wrap_mul(T p, T q) {
  return static_cast<T>(static_cast<wrap_t<T>>(p) * static_cast<wrap_t<T>>(q));
}
template <typename T>
T wrap_neg(T v) {
  return wrap_sub(T(0), v);
}
template <typename T>
T abs_value(T v) {
  if constexpr (std::is_signed_v<T>) {
    return v < 0 ? wrap_neg(v) : v;
  } else {
    return v;
  }
}
}  // namespace

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
  run_binary(ctx, [](auto p, auto q) { return wrap_add(p, q); });
}
void cpu_sub(OpContext& ctx) {
  run_binary(ctx, [](auto p, auto q) { return wrap_sub(p, q); });
}
void cpu_mul(OpContext& ctx) {
  run_binary(ctx, [](auto p, auto q) { return wrap_mul(p, q); });
}
void cpu_div(OpContext& ctx) {
  if (!dtype_is_floating(ctx.in(0).dtype())) {
    // Integer division truncates toward zero like C++, which is what ONNX requires.
    for (int64_t i = 0; i < ctx.in(1).numel(); ++i)
      if (ctx.in(1).int_at(i) == 0) ctx.fail("integer division by zero");
  }
  run_binary(ctx, [](auto p, auto q) { return math::div_trunc(p, q); });
}

namespace {
// Pow with an integer base or operands of different dtypes: numpy computes in the promoted
// type (double as soon as a float is involved, else integer) and the result is cast to the
// base's dtype (onnx.reference: np.power(x, y).astype(x.dtype)).
void pow_mixed(OpContext& ctx) {
  const Tensor& a = ctx.in(0);
  const Tensor& b = ctx.in(1);
  Tensor& y = ctx.out(0);
  const bool int_pow_only = !dtype_is_floating(a.dtype()) && !dtype_is_floating(b.dtype());
  std::vector<double> e(static_cast<size_t>(b.numel()));
  // Integer exponents of an integer base, exactly (a double holds integers up to 2^53 only).
  std::vector<uint64_t> exact;
  if (int_pow_only) {
    exact.resize(e.size());
    ORTM_DISPATCH_NUMERIC(b.dtype(), ctx, {
      if constexpr (std::is_integral_v<scalar_t>) {
        const scalar_t* bp = b.data<scalar_t>();
        for (int64_t i = 0; i < b.numel(); ++i) {
          // (as int64 after the signedness test: no unsigned comparison with 0 to warn about)
          if (std::is_signed_v<scalar_t> && static_cast<int64_t>(bp[i]) < 0)
            ctx.fail("integer base raised to the negative integer exponent " +
                     std::to_string(static_cast<int64_t>(bp[i])) +
                     " (numpy and onnx.reference refuse it too)");
          exact[i] = static_cast<uint64_t>(bp[i]);
        }
      }
    });
  } else {
    for (int64_t i = 0; i < b.numel(); ++i) e[i] = b.float_at(i);
  }
  ORTM_DISPATCH_NUMERIC(a.dtype(), ctx, {
    const scalar_t* ap = a.data<scalar_t>();
    scalar_t* yp = y.data<scalar_t>();
    for_each_broadcast<2>(y.shape(), {a.shape(), b.shape()},
                          [&](int64_t i, const std::array<int64_t, 2>& o) {
                            if constexpr (std::is_integral_v<scalar_t>) {
                              if (int_pow_only) {
                                yp[i] = math::int_pow(ap[o[0]], exact[o[1]]);
                                return;
                              }
                            }
                            yp[i] = math::pow_promoted(ap[o[0]], e[o[1]]);
                          });
  });
}
}  // namespace

void cpu_pow(OpContext& ctx) {
  if (ctx.in(0).dtype() != ctx.in(1).dtype() || !dtype_is_floating(ctx.in(0).dtype()))
    return pow_mixed(ctx);
  ORTM_DISPATCH_FLOAT(ctx.in(0).dtype(), ctx, (void)0);
  // Scalar exponents models use (x**2 in norms, and x**1 in its gradient) skip std::pow.
  if (ctx.in(1).numel() == 1 && ctx.in(1).shape().size() <= ctx.in(0).shape().size())
    return run_binary(ctx, [](auto p, auto q) { return math::pow_fast(p, q); });
  run_binary(ctx, [](auto p, auto q) { return std::pow(p, q); });
}

void cpu_sum(OpContext& ctx) {
  Tensor& y = ctx.out(0);
  // Three or more inputs of the output's shape (a gradient summed over its readers): one
  // pass over memory, added in input order as the pairwise passes below (the same rounding).
  bool same_shape = ctx.num_inputs() >= 3;
  for (size_t k = 0; k < ctx.num_inputs() && same_shape; ++k)
    same_shape = ctx.in(k).shape() == y.shape();
  if (same_shape) {
    ORTM_DISPATCH_NUMERIC(y.dtype(), ctx, {
      std::vector<const scalar_t*> x;
      for (size_t k = 0; k < ctx.num_inputs(); ++k) x.push_back(ctx.in(k).data<scalar_t>());
      fold_map(y.numel(), x, y.data<scalar_t>(),
               [](scalar_t p, scalar_t q) { return wrap_add(p, q); });
    });
    return;
  }
  ORTM_DISPATCH_NUMERIC(y.dtype(), ctx, {
    const Tensor& first = ctx.in(0);
    if (ctx.num_inputs() == 1) {
      binary_map(first.shape(), first.data<scalar_t>(), Shape{}, first.data<scalar_t>(), y.shape(),
                 y.data<scalar_t>(), [](scalar_t p, scalar_t) { return p; });
      break;
    }
    binary_map(first.shape(), first.data<scalar_t>(), ctx.in(1).shape(), ctx.in(1).data<scalar_t>(),
               y.shape(), y.data<scalar_t>(),
               [](scalar_t p, scalar_t q) { return wrap_add(p, q); });
    for (size_t i = 2; i < ctx.num_inputs(); ++i) {
      binary_map(y.shape(), y.data<scalar_t>(), ctx.in(i).shape(), ctx.in(i).data<scalar_t>(),
                 y.shape(), y.data<scalar_t>(),
                 [](scalar_t p, scalar_t q) { return wrap_add(p, q); });
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
                                  [](scalar_t v) { return wrap_neg(v); }));
}
void cpu_relu(OpContext& ctx) {
  run_unary_float(ctx, [](auto v) { return math::relu(v); });
}
namespace {
// float32 through the vector kernels where the CPU has them (false: the baseline loop).
bool run_vec_activation(OpContext& ctx, VecActivation op) {
  const Tensor& x = ctx.in(0);
  return x.dtype() == DType::Float32 &&
         activation_forward_f32(op, x.numel(), x.data<float>(), ctx.out(0).data<float>());
}
}  // namespace
void cpu_sigmoid(OpContext& ctx) {
  if (run_vec_activation(ctx, VecActivation::kSigmoid)) return;
  run_unary_float(ctx, [](auto v) { return math::sigmoid(v); });
}
void cpu_tanh(OpContext& ctx) {
  if (run_vec_activation(ctx, VecActivation::kTanh)) return;
  run_unary_float(ctx, [](auto v) { return math::tanh_fwd(v); });
}
void cpu_exp(OpContext& ctx) {
  if (run_vec_activation(ctx, VecActivation::kExp)) return;
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
  ORTM_DISPATCH_NUMERIC(x.dtype(), ctx,
                        unary_map(x.numel(), x.data<scalar_t>(), ctx.out(0).data<scalar_t>(),
                                  [](scalar_t v) { return abs_value(v); }));
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
  ORTM_DISPATCH_BITS(
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
  if (!g.input(0) || !g.input(1)) g.fail("Pow needs a base and an exponent input");
  if (g.needs_grad(0)) {
    // An exponent of another dtype (an integer power of a float base) joins a's dtype.
    const bool same =
        g.input(1)->dtype != DType::Undefined && g.input(1)->dtype == g.input(0)->dtype;
    Value* b = same ? g.input(1) : g.emit("CastLike", {g.input(1), g.input(0)});
    Value* b_minus_1 = g.emit("Sub", {b, g.scalar_constant(1.0, b)});
    Value* local = g.emit("Mul", {b, g.emit("Pow", {g.input(0), b_minus_1})});
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
void grad_expand(GradContext& g) {
  g.set_input_grad(0, g.sum_to_shape(g.output_grad(0), g.input(0)));
}

}  // namespace ortmodule
