// CUDA twins of the unary math ops and their gradients: Sign, Sin, Cos, Reciprocal,
// Softplus, Floor, Ceil, LeakyRelu(Grad), Clip(Grad) and com.microsoft Scale. Formulas that
// are more than one operator are the CPU kernels' (kernels/math/elementwise.h).
#include <cmath>
#include <cstdint>
#include <string>

#include "backends/cuda/map.cuh"
#include "kernels/math/elementwise.h"
#include "ops/clip_bounds.h"
#include "ops/op_utils.h"

namespace ortmodule {

namespace {

struct SignOp {
  template <typename T>
  __device__ T operator()(T v) const {
    return math::sign(v);
  }
};
struct SinOp {
  template <typename T>
  __device__ T operator()(T v) const {
    return std::sin(v);
  }
};
struct CosOp {
  template <typename T>
  __device__ T operator()(T v) const {
    return std::cos(v);
  }
};
struct ReciprocalOp {
  template <typename T>
  __device__ T operator()(T v) const {
    return T(1) / v;
  }
};
struct SoftplusOp {
  template <typename T>
  __device__ T operator()(T v) const {
    return math::softplus(v);
  }
};
struct FloorOp {
  template <typename T>
  __device__ T operator()(T v) const {
    return std::floor(v);
  }
};
struct CeilOp {
  template <typename T>
  __device__ T operator()(T v) const {
    return std::ceil(v);
  }
};
template <typename T>
struct LeakyReluOp {
  T alpha;
  __device__ T operator()(T v) const { return math::leaky_relu(v, alpha); }
};
template <typename T>
struct LeakyReluGradOp {
  T alpha;
  __device__ T operator()(T g, T y) const { return math::leaky_relu_grad(g, y, alpha); }
};
template <typename T>
struct ClipOp {
  T lo, hi;
  __device__ T operator()(T v) const { return math::clip(v, lo, hi); }
};
template <typename T>
struct ClipGradOp {
  T lo, hi;
  bool exclusive;
  __device__ T operator()(T g, T x) const {
    return exclusive ? math::clip_grad_exclusive(g, x, lo, hi) : math::clip_grad(g, x, lo, hi);
  }
};
template <typename T>
struct ScaleOp {
  T factor;
  __device__ T operator()(T v) const { return static_cast<T>(v * factor); }
};

template <typename F>
void unary_float(OpContext& ctx, F f, const char* name) {
  ORTM_CUDA_DISPATCH_FLOAT(
      ctx.in(0).dtype(), ctx,
      cuda::launch_map<scalar_t, scalar_t>(ctx, ctx.out(0), f, name, ctx.in(0)));
}

// Gradient ops (dY, X or Y): operands of one shape, float types.
void expect_grad_operands(const OpContext& ctx) {
  expect_same_dtype(ctx, 1);
  if (ctx.in(0).shape() != ctx.in(1).shape())
    ctx.fail("gradient shape " + shape_str(ctx.in(0).shape()) + " differs from " +
             shape_str(ctx.in(1).shape()));
}

}  // namespace

void cuda_sign(OpContext& ctx) {
  ORTM_CUDA_DISPATCH_NUMERIC(
      ctx.in(0).dtype(), ctx,
      cuda::launch_map<scalar_t, scalar_t>(ctx, ctx.out(0), SignOp{}, "Sign", ctx.in(0)));
}
void cuda_sin(OpContext& ctx) { unary_float(ctx, SinOp{}, "Sin"); }
void cuda_cos(OpContext& ctx) { unary_float(ctx, CosOp{}, "Cos"); }
void cuda_reciprocal(OpContext& ctx) { unary_float(ctx, ReciprocalOp{}, "Reciprocal"); }
void cuda_softplus(OpContext& ctx) { unary_float(ctx, SoftplusOp{}, "Softplus"); }
void cuda_floor(OpContext& ctx) { unary_float(ctx, FloorOp{}, "Floor"); }
void cuda_ceil(OpContext& ctx) { unary_float(ctx, CeilOp{}, "Ceil"); }

void cuda_leaky_relu(OpContext& ctx) {
  const double alpha = ctx.node.attr_float("alpha", 0.01f);
  ORTM_CUDA_DISPATCH_FLOAT(ctx.in(0).dtype(), ctx,
                           cuda::launch_map<scalar_t, scalar_t>(
                               ctx, ctx.out(0), LeakyReluOp<scalar_t>{static_cast<scalar_t>(alpha)},
                               "LeakyRelu", ctx.in(0)));
}

// LeakyReluGrad(dY, Y; alpha)
void cuda_leaky_relu_grad(OpContext& ctx) {
  expect_grad_operands(ctx);
  const double alpha = ctx.node.attr_float("alpha", 0.01f);
  ORTM_CUDA_DISPATCH_FLOAT(
      ctx.in(0).dtype(), ctx,
      cuda::launch_map<scalar_t, scalar_t, scalar_t>(
          ctx, ctx.out(0), LeakyReluGradOp<scalar_t>{static_cast<scalar_t>(alpha)}, "LeakyReluGrad",
          ctx.in(0), ctx.in(1)));
}

// Clip(x, min?, max?): the bounds (single values) are read on the host (the row's host
// inputs 1 and 2), as the CPU kernel reads them.
void cuda_clip(OpContext& ctx) {
  ORTM_CUDA_DISPATCH_NUMERIC(ctx.in(0).dtype(), ctx, {
    scalar_t lo, hi;
    clip_bounds(ctx, 1, &lo, &hi);
    cuda::launch_map<scalar_t, scalar_t>(ctx, ctx.out(0), ClipOp<scalar_t>{lo, hi}, "Clip",
                                         ctx.in(0));
  });
}

// ClipGrad(dY, x, min?, max?): bounds on the host (host inputs 2 and 3).
void cuda_clip_grad(OpContext& ctx) {
  expect_grad_operands(ctx);
  ORTM_CUDA_DISPATCH_FLOAT(ctx.in(0).dtype(), ctx, {
    scalar_t lo, hi;
    clip_bounds(ctx, 2, &lo, &hi);
    cuda::launch_map<scalar_t, scalar_t, scalar_t>(
        ctx, ctx.out(0), ClipGradOp<scalar_t>{lo, hi, clip_grad_exclusive(ctx)}, "ClipGrad",
        ctx.in(0), ctx.in(1));
  });
}

// Scale(input, scale; scale_down): the single value of `scale` is read on the host (host
// input 1) and turned into the factor as the CPU kernel does (float32, then its reciprocal
// with scale_down=1, then the input's dtype).
void cuda_scale(OpContext& ctx) {
  const Tensor& scale = ctx.in(1);
  float s = 0.f;
  ORTM_DISPATCH_NUMERIC(scale.dtype(), ctx, s = static_cast<float>(scale.data<scalar_t>()[0]));
  if (s == 0.f) ctx.fail("input 1 (scale) is 0; expected a non-zero scale");
  if (ctx.node.attr_int("scale_down", 0) != 0) s = 1.0f / s;
  ORTM_CUDA_DISPATCH_FLOAT(
      ctx.in(0).dtype(), ctx,
      cuda::launch_map<scalar_t, scalar_t>(
          ctx, ctx.out(0), ScaleOp<scalar_t>{static_cast<scalar_t>(s)}, "Scale", ctx.in(0)));
}

}  // namespace ortmodule
