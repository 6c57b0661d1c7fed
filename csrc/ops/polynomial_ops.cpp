// ai.ortmodule OrthogonalPolynomial(x, n; kind): torch.special's orthogonal polynomials of
// degree trunc(n) at x, x and n of one float dtype, broadcast (kernels/math/polynomial.h).
// PyTorch defines no gradient for them: the row is not differentiable, so the output does not
// require grad, as eager's does not.
#include <string>

#include "kernels/cpu/elementwise.h"
#include "kernels/math/polynomial.h"
#include "ops/op_utils.h"
#include "ops/ops.h"
#include "ops/polynomial_attrs.h"

namespace ortmodule {

math::PolynomialKind polynomial_kind_of(const OpContext& ctx) {
  using K = math::PolynomialKind;
  static const struct {
    const char* name;
    K kind;
  } kKinds[] = {
      {"chebyshev_t", K::ChebyshevT},
      {"chebyshev_u", K::ChebyshevU},
      {"chebyshev_v", K::ChebyshevV},
      {"chebyshev_w", K::ChebyshevW},
      {"shifted_chebyshev_t", K::ShiftedChebyshevT},
      {"shifted_chebyshev_u", K::ShiftedChebyshevU},
      {"shifted_chebyshev_v", K::ShiftedChebyshevV},
      {"shifted_chebyshev_w", K::ShiftedChebyshevW},
      {"hermite_h", K::HermiteH},
      {"hermite_he", K::HermiteHe},
      {"laguerre_l", K::LaguerreL},
      {"legendre_p", K::LegendreP},
  };
  const std::string name = ctx.node.attr_string("kind", "");
  for (const auto& k : kKinds)
    if (name == k.name) return k.kind;
  ctx.fail("attribute kind '" + name +
           "' is not a polynomial (chebyshev_t/u/v/w, shifted_chebyshev_t/u/v/w, hermite_h, "
           "hermite_he, laguerre_l, legendre_p)");
}

void cpu_orthogonal_polynomial(OpContext& ctx) {
  expect_same_dtype(ctx, 1);
  const math::PolynomialKind kind = polynomial_kind_of(ctx);
  const Tensor& x = ctx.in(0);
  const Tensor& n = ctx.in(1);
  Tensor& y = ctx.out(0);
  ORTM_DISPATCH_FLOAT(x.dtype(), ctx,
                      binary_map(x.shape(), x.data<scalar_t>(), n.shape(), n.data<scalar_t>(),
                                 y.shape(), y.data<scalar_t>(), [kind](scalar_t a, scalar_t b) {
                                   return math::orthogonal_polynomial(kind, a, b);
                                 }));
}

}  // namespace ortmodule
