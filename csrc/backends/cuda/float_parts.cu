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
struct NextAfterBits16Op {
  uint16_t inf_bits;
  __device__ uint16_t operator()(uint16_t a, uint16_t b) const {
    return math::next_after_bits16(a, b, inf_bits);
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
  const DType dtype = ctx.in(0).dtype();
  if (dtype == DType::Float16 || dtype == DType::BFloat16) {
    const NextAfterBits16Op op{static_cast<uint16_t>(dtype == DType::Float16 ? 0x7c00 : 0x7f80)};
    cuda::launch_map<uint16_t, uint16_t, uint16_t>(ctx, ctx.out(0), op, "NextAfter", ctx.in(0),
                                                   ctx.in(1));
    return;
  }
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
