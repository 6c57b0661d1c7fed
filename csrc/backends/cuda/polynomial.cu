// CUDA twin of ai.ortmodule OrthogonalPolynomial (x, n broadcast). The per-element values are
// the CPU kernel's (kernels/math/polynomial.h).
#include "backends/cuda/map.cuh"
#include "kernels/math/polynomial.h"
#include "ops/op_utils.h"
#include "ops/polynomial_attrs.h"

namespace ortmodule {

namespace {

struct OrthogonalPolynomialOp {
  math::PolynomialKind kind;
  template <typename T>
  __device__ T operator()(T x, T n) const {
    return math::orthogonal_polynomial(kind, x, n);
  }
};

}  // namespace

void cuda_orthogonal_polynomial(OpContext& ctx) {
  expect_same_dtype(ctx, 1);
  const OrthogonalPolynomialOp op{polynomial_kind_of(ctx)};
  ORTM_CUDA_DISPATCH_FLOAT(ctx.in(0).dtype(), ctx,
                           cuda::launch_map<scalar_t, scalar_t, scalar_t>(
                               ctx, ctx.out(0), op, "OrthogonalPolynomial", ctx.in(0), ctx.in(1)));
}

}  // namespace ortmodule
