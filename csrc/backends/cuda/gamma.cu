// CUDA twins of the gamma family: ai.ortmodule Digamma, Lgamma, Polygamma, Erfinv, Ndtri,
// Zeta, Igamma and Igammac. The per-element formulas are the CPU kernels'
// (kernels/math/gamma.h, kernels/math/erfinv.h).
#include <cmath>

#include "backends/cuda/map.cuh"
#include "kernels/math/erfinv.h"
#include "kernels/math/gamma.h"
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
ORTM_UNARY_OP(DigammaOp, math::digamma(v))
ORTM_UNARY_OP(LgammaOp, math::log_gamma(v))
ORTM_UNARY_OP(ErfinvOp, math::erfinv(v))
ORTM_UNARY_OP(NdtriOp, math::ndtri(v))
#undef ORTM_UNARY_OP

#define ORTM_BINARY_OP(NAME, EXPR)            \
  struct NAME {                               \
    template <typename T>                     \
    __device__ T operator()(T a, T b) const { \
      return EXPR;                            \
    }                                         \
  };
ORTM_BINARY_OP(ZetaOp, math::hurwitz_zeta(a, b))
ORTM_BINARY_OP(IgammaOp, math::igamma(a, b))
ORTM_BINARY_OP(IgammacOp, math::igammac(a, b))
#undef ORTM_BINARY_OP

struct PolygammaOp {
  int64_t n;
  template <typename T>
  __device__ T operator()(T v) const {
    return math::polygamma(n, v);
  }
};

using cuda::unary_float;
// (a, b) broadcast.
template <typename F>
void binary_float(OpContext& ctx, F f, const char* name) {
  expect_same_dtype(ctx, 1);
  ORTM_CUDA_DISPATCH_FLOAT(ctx.in(0).dtype(), ctx,
                           cuda::launch_map<scalar_t, scalar_t, scalar_t>(ctx, ctx.out(0), f, name,
                                                                          ctx.in(0), ctx.in(1)));
}

}  // namespace

void cuda_digamma(OpContext& ctx) { unary_float(ctx, DigammaOp{}, "Digamma"); }
void cuda_lgamma(OpContext& ctx) { unary_float(ctx, LgammaOp{}, "Lgamma"); }
void cuda_polygamma(OpContext& ctx) {
  const int64_t n = polygamma_order(ctx.node);
  if (n < 0) ctx.fail("polygamma(n, x) does not support negative n");
  unary_float(ctx, PolygammaOp{n}, "Polygamma");
}
void cuda_erfinv(OpContext& ctx) { unary_float(ctx, ErfinvOp{}, "Erfinv"); }
void cuda_ndtri(OpContext& ctx) { unary_float(ctx, NdtriOp{}, "Ndtri"); }
void cuda_zeta(OpContext& ctx) { binary_float(ctx, ZetaOp{}, "Zeta"); }
void cuda_igamma(OpContext& ctx) { binary_float(ctx, IgammaOp{}, "Igamma"); }
void cuda_igammac(OpContext& ctx) { binary_float(ctx, IgammacOp{}, "Igammac"); }

}  // namespace ortmodule
