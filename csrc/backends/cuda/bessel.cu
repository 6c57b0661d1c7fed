// CUDA twins of the ai.ortmodule Bessel family (BesselI0, BesselI0e, BesselI1, BesselI1e,
// BesselJ0, BesselJ1, BesselY0, BesselY1, BesselK0, BesselK1, BesselK0e, BesselK1e, AiryAi,
// SphericalBesselJ0). The per-element formulas are the CPU kernels' (kernels/math/bessel.h).
#include "backends/cuda/map.cuh"
#include "kernels/math/bessel.h"
#include "ops/op_utils.h"

namespace ortmodule {

namespace {

#define ORTM_UNARY_OP(NAME, EXPR)        \
  struct NAME {                          \
    template <typename T>                \
    __device__ T operator()(T v) const { \
      return EXPR;                       \
    }                                    \
  };
ORTM_UNARY_OP(BesselI0Op, math::bessel_i0(v))
ORTM_UNARY_OP(BesselI0eOp, math::bessel_i0e(v))
ORTM_UNARY_OP(BesselI1Op, math::bessel_i1(v))
ORTM_UNARY_OP(BesselI1eOp, math::bessel_i1e(v))
ORTM_UNARY_OP(BesselJ0Op, math::bessel_j0(v))
ORTM_UNARY_OP(BesselJ1Op, math::bessel_j1(v))
ORTM_UNARY_OP(BesselY0Op, math::bessel_y0(v))
ORTM_UNARY_OP(BesselY1Op, math::bessel_y1(v))
ORTM_UNARY_OP(BesselK0Op, math::bessel_k0(v))
ORTM_UNARY_OP(BesselK1Op, math::bessel_k1(v))
ORTM_UNARY_OP(BesselK0eOp, math::bessel_k0e(v))
ORTM_UNARY_OP(BesselK1eOp, math::bessel_k1e(v))
ORTM_UNARY_OP(AiryAiOp, math::airy_ai(v))
ORTM_UNARY_OP(SphericalBesselJ0Op, math::spherical_bessel_j0(v))
#undef ORTM_UNARY_OP

using cuda::unary_float;

}  // namespace

void cuda_bessel_i0(OpContext& ctx) { unary_float(ctx, BesselI0Op{}, "BesselI0"); }
void cuda_bessel_i0e(OpContext& ctx) { unary_float(ctx, BesselI0eOp{}, "BesselI0e"); }
void cuda_bessel_i1(OpContext& ctx) { unary_float(ctx, BesselI1Op{}, "BesselI1"); }
void cuda_bessel_i1e(OpContext& ctx) { unary_float(ctx, BesselI1eOp{}, "BesselI1e"); }
void cuda_bessel_j0(OpContext& ctx) { unary_float(ctx, BesselJ0Op{}, "BesselJ0"); }
void cuda_bessel_j1(OpContext& ctx) { unary_float(ctx, BesselJ1Op{}, "BesselJ1"); }
void cuda_bessel_y0(OpContext& ctx) { unary_float(ctx, BesselY0Op{}, "BesselY0"); }
void cuda_bessel_y1(OpContext& ctx) { unary_float(ctx, BesselY1Op{}, "BesselY1"); }
void cuda_bessel_k0(OpContext& ctx) { unary_float(ctx, BesselK0Op{}, "BesselK0"); }
void cuda_bessel_k1(OpContext& ctx) { unary_float(ctx, BesselK1Op{}, "BesselK1"); }
void cuda_bessel_k0e(OpContext& ctx) { unary_float(ctx, BesselK0eOp{}, "BesselK0e"); }
void cuda_bessel_k1e(OpContext& ctx) { unary_float(ctx, BesselK1eOp{}, "BesselK1e"); }
void cuda_airy_ai(OpContext& ctx) { unary_float(ctx, AiryAiOp{}, "AiryAi"); }
void cuda_spherical_bessel_j0(OpContext& ctx) {
  unary_float(ctx, SphericalBesselJ0Op{}, "SphericalBesselJ0");
}

}  // namespace ortmodule
