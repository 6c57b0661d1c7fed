// The attribute reader of ai.ortmodule OrthogonalPolynomial, shared by its CPU kernel
// (ops/polynomial_ops.cpp, which defines it) and CUDA kernel (backends/cuda/polynomial.cu).
#pragma once

#include "kernels/math/polynomial.h"
#include "ops/op_table.h"

namespace ortmodule {

// Attribute kind: "chebyshev_t", "chebyshev_u", "chebyshev_v", "chebyshev_w", the same with a
// "shifted_" prefix, "hermite_h", "hermite_he", "laguerre_l" or "legendre_p" (torch.special's
// <kind>_polynomial_*); fails on any other.
math::PolynomialKind polynomial_kind_of(const OpContext& ctx);

}  // namespace ortmodule
