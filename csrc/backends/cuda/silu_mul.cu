// CUDA twins of SiluMul and SiluMulGrad (ops/silu_mul_ops.cpp): element-wise maps over the
// broadcast operands, the arithmetic of kernels/math/silu_mul.h with math::sigmoid.
#include "backends/cuda/map.cuh"
#include "kernels/math/silu_mul.h"

namespace ortmodule {
namespace {

struct SiluMulOp {
  template <typename T>
  __device__ T operator()(T g, T u) const {
    return math::silu_mul(g, u, math::sigmoid(g));
  }
};
struct SiluMulGradGateOp {
  template <typename T>
  __device__ T operator()(T dy, T g, T u) const {
    return math::silu_mul_grad_gate(dy, g, u, math::sigmoid(g));
  }
};
struct SiluMulGradUpOp {
  template <typename T>
  __device__ T operator()(T dy, T g) const {
    return math::silu_mul_grad_up(dy, g, math::sigmoid(g));
  }
};

}  // namespace

void cuda_silu_mul(OpContext& ctx) {
  ORTM_CUDA_DISPATCH_FLOAT(ctx.in(0).dtype(), ctx,
                           (cuda::launch_map<scalar_t, scalar_t, scalar_t>(
                               ctx, ctx.out(0), SiluMulOp{}, "SiluMul", ctx.in(0), ctx.in(1))));
}

void cuda_silu_mul_grad(OpContext& ctx) {
  ORTM_CUDA_DISPATCH_FLOAT(ctx.in(0).dtype(), ctx, {
    if (ctx.has_output(0))
      cuda::launch_map<scalar_t, scalar_t, scalar_t, scalar_t>(
          ctx, ctx.out(0), SiluMulGradGateOp{}, "SiluMulGrad", ctx.in(0), ctx.in(1), ctx.in(2));
    if (ctx.has_output(1))
      cuda::launch_map<scalar_t, scalar_t, scalar_t>(ctx, ctx.out(1), SiluMulGradUpOp{},
                                                     "SiluMulGrad", ctx.in(0), ctx.in(1));
  });
}

}  // namespace ortmodule
