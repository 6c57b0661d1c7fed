// CUDA twins of ai.ortmodule NextAfter (a, b broadcast) and Frexp. The per-element functions
// are the CPU kernels' (kernels/math/float_parts.h).
#include <cstdint>

#include "backends/cuda/map.cuh"
#include "kernels/math/float_parts.h"
#include "ops/op_utils.h"

namespace ortmodule {

namespace {

struct NextAfterOp {
  template <typename T>
  __device__ T operator()(T a, T b) const {
    return math::next_after(a, b);
  }
};
struct FrexpMantissaOp {
  template <typename T>
  __device__ T operator()(T v) const {
    return math::frexp_mantissa(v);
  }
};
struct FrexpExponentOp {
  template <typename T>
  __device__ int32_t operator()(T v) const {
    return math::frexp_exponent(v);
  }
};

}  // namespace

void cuda_next_after(OpContext& ctx) {
  expect_same_dtype(ctx, 1);
  ORTM_CUDA_DISPATCH_FLOAT(ctx.in(0).dtype(), ctx,
                           cuda::launch_map<scalar_t, scalar_t, scalar_t>(
                               ctx, ctx.out(0), NextAfterOp{}, "NextAfter", ctx.in(0), ctx.in(1)));
}

void cuda_frexp(OpContext& ctx) {
  ORTM_CUDA_DISPATCH_FLOAT(ctx.in(0).dtype(), ctx, {
    if (ctx.has_output(0))
      cuda::launch_map<scalar_t, scalar_t>(ctx, ctx.out(0), FrexpMantissaOp{}, "Frexp", ctx.in(0));
    if (ctx.has_output(1))
      cuda::launch_map<int32_t, scalar_t>(ctx, ctx.out(1), FrexpExponentOp{}, "Frexp", ctx.in(0));
  });
}

}  // namespace ortmodule
