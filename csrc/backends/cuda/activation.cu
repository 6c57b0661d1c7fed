// CUDA twins of the ELU family (Elu, Selu, Celu, ai.ortmodule ScaledElu), HardSigmoid, HardSwish,
// Mish and their gradients, Round, the trigonometric and hyperbolic functions and their
// inverses, ai.ortmodule Atan2, Erfcx and LogNdtr. The per-element formulas are the CPU
// kernels' (kernels/math/activation.h).
#include <cmath>

#include "backends/cuda/map.cuh"
#include "kernels/math/activation.h"
#include "ops/op_utils.h"

namespace ortmodule {

namespace {

template <typename T>
struct EluOp {
  T alpha, scale, input_scale;
  __device__ T operator()(T v) const { return math::elu(v, alpha, scale, input_scale); }
};
template <typename T>
struct EluGradOp {
  T alpha, scale, input_scale;
  __device__ T operator()(T g, T v) const {
    return math::elu_grad(g, v, alpha, scale, input_scale);
  }
};
template <typename T>
struct HardSigmoidOp {
  T alpha, beta;
  __device__ T operator()(T v) const { return math::hard_sigmoid(v, alpha, beta); }
};
template <typename T>
struct HardSigmoidGradOp {
  T alpha, lower, upper;
  __device__ T operator()(T g, T v) const {
    return math::hard_sigmoid_grad(g, v, alpha, lower, upper);
  }
};

#define ORTM_UNARY_OP(NAME, EXPR)        \
  struct NAME {                          \
    template <typename T>                \
    __device__ T operator()(T v) const { \
      return EXPR;                       \
    }                                    \
  };
ORTM_UNARY_OP(HardSwishOp, math::hard_swish(v))
ORTM_UNARY_OP(MishOp, math::mish(v))
ORTM_UNARY_OP(RoundOp, math::round_half_even(v))
ORTM_UNARY_OP(TanOp, std::tan(v))
ORTM_UNARY_OP(AsinOp, std::asin(v))
ORTM_UNARY_OP(AcosOp, std::acos(v))
ORTM_UNARY_OP(AtanOp, std::atan(v))
ORTM_UNARY_OP(SinhOp, std::sinh(v))
ORTM_UNARY_OP(CoshOp, std::cosh(v))
ORTM_UNARY_OP(AsinhOp, std::asinh(v))
ORTM_UNARY_OP(AcoshOp, std::acosh(v))
ORTM_UNARY_OP(AtanhOp, std::atanh(v))
ORTM_UNARY_OP(ErfcxOp, math::erfcx(v))
ORTM_UNARY_OP(LogNdtrOp, math::log_ndtr(v))
#undef ORTM_UNARY_OP

struct HardSwishGradOp {
  template <typename T>
  __device__ T operator()(T g, T v) const {
    return math::hard_swish_grad(g, v);
  }
};
struct MishGradOp {
  template <typename T>
  __device__ T operator()(T g, T v) const {
    return math::mish_grad(g, v);
  }
};
struct Atan2Op {
  template <typename T>
  __device__ T operator()(T a, T b) const {
    return std::atan2(a, b);
  }
};

using cuda::unary_float;

// Gradient ops (dY, X): operands of one shape and dtype.
void expect_grad_operands(const OpContext& ctx) {
  expect_same_dtype(ctx, 1);
  if (ctx.in(0).shape() != ctx.in(1).shape())
    ctx.fail("gradient shape " + shape_str(ctx.in(0).shape()) + " differs from " +
             shape_str(ctx.in(1).shape()));
}
template <typename F>
void grad_binary(OpContext& ctx, F f, const char* name) {
  expect_grad_operands(ctx);
  ORTM_CUDA_DISPATCH_FLOAT(ctx.in(0).dtype(), ctx,
                           cuda::launch_map<scalar_t, scalar_t, scalar_t>(ctx, ctx.out(0), f, name,
                                                                          ctx.in(0), ctx.in(1)));
}

}  // namespace

void cuda_elu(OpContext& ctx) {
  const EluParams p = elu_params(ctx.node);
  ORTM_CUDA_DISPATCH_FLOAT(
      ctx.in(0).dtype(), ctx,
      cuda::launch_map<scalar_t, scalar_t>(
          ctx, ctx.out(0),
          EluOp<scalar_t>{static_cast<scalar_t>(p.alpha), static_cast<scalar_t>(p.scale),
                          static_cast<scalar_t>(p.input_scale)},
          "Elu", ctx.in(0)));
}
void cuda_elu_grad(OpContext& ctx) {
  expect_grad_operands(ctx);
  const EluParams p = elu_params(ctx.node);
  ORTM_CUDA_DISPATCH_FLOAT(
      ctx.in(0).dtype(), ctx,
      cuda::launch_map<scalar_t, scalar_t, scalar_t>(
          ctx, ctx.out(0),
          EluGradOp<scalar_t>{static_cast<scalar_t>(p.alpha), static_cast<scalar_t>(p.scale),
                              static_cast<scalar_t>(p.input_scale)},
          "EluGrad", ctx.in(0), ctx.in(1)));
}
void cuda_hard_sigmoid(OpContext& ctx) {
  const HardSigmoidParams p = hard_sigmoid_params(ctx.node);
  ORTM_CUDA_DISPATCH_FLOAT(
      ctx.in(0).dtype(), ctx,
      cuda::launch_map<scalar_t, scalar_t>(
          ctx, ctx.out(0),
          HardSigmoidOp<scalar_t>{static_cast<scalar_t>(p.alpha), static_cast<scalar_t>(p.beta)},
          "HardSigmoid", ctx.in(0)));
}
void cuda_hard_sigmoid_grad(OpContext& ctx) {
  expect_grad_operands(ctx);
  const HardSigmoidParams p = hard_sigmoid_params(ctx.node);
  ORTM_CUDA_DISPATCH_FLOAT(ctx.in(0).dtype(), ctx,
                           cuda::launch_map<scalar_t, scalar_t, scalar_t>(
                               ctx, ctx.out(0),
                               HardSigmoidGradOp<scalar_t>{static_cast<scalar_t>(p.alpha),
                                                           static_cast<scalar_t>(p.lower),
                                                           static_cast<scalar_t>(p.upper)},
                               "HardSigmoidGrad", ctx.in(0), ctx.in(1)));
}
void cuda_hard_swish(OpContext& ctx) { unary_float(ctx, HardSwishOp{}, "HardSwish"); }
void cuda_hard_swish_grad(OpContext& ctx) { grad_binary(ctx, HardSwishGradOp{}, "HardSwishGrad"); }
void cuda_mish(OpContext& ctx) { unary_float(ctx, MishOp{}, "Mish"); }
void cuda_mish_grad(OpContext& ctx) { grad_binary(ctx, MishGradOp{}, "MishGrad"); }
void cuda_round(OpContext& ctx) { unary_float(ctx, RoundOp{}, "Round"); }
void cuda_tan(OpContext& ctx) { unary_float(ctx, TanOp{}, "Tan"); }
void cuda_asin(OpContext& ctx) { unary_float(ctx, AsinOp{}, "Asin"); }
void cuda_acos(OpContext& ctx) { unary_float(ctx, AcosOp{}, "Acos"); }
void cuda_atan(OpContext& ctx) { unary_float(ctx, AtanOp{}, "Atan"); }
void cuda_sinh(OpContext& ctx) { unary_float(ctx, SinhOp{}, "Sinh"); }
void cuda_cosh(OpContext& ctx) { unary_float(ctx, CoshOp{}, "Cosh"); }
void cuda_asinh(OpContext& ctx) { unary_float(ctx, AsinhOp{}, "Asinh"); }
void cuda_acosh(OpContext& ctx) { unary_float(ctx, AcoshOp{}, "Acosh"); }
void cuda_atanh(OpContext& ctx) { unary_float(ctx, AtanhOp{}, "Atanh"); }
void cuda_erfcx(OpContext& ctx) { unary_float(ctx, ErfcxOp{}, "Erfcx"); }
void cuda_log_ndtr(OpContext& ctx) { unary_float(ctx, LogNdtrOp{}, "LogNdtr"); }
// Atan2(a, b), a and b broadcast.
void cuda_atan2(OpContext& ctx) {
  expect_same_dtype(ctx, 1);
  ORTM_CUDA_DISPATCH_FLOAT(ctx.in(0).dtype(), ctx,
                           cuda::launch_map<scalar_t, scalar_t, scalar_t>(
                               ctx, ctx.out(0), Atan2Op{}, "Atan2", ctx.in(0), ctx.in(1)));
}

}  // namespace ortmodule
