// The op table's rows for activations, rounding and the transcendental and special
// functions (activation_*_ops.cpp, transcendental_ops.cpp, gamma_ops.cpp, bessel_ops.cpp,
// polynomial_ops.cpp, float_parts_ops.cpp); op_table.cpp appends them.
#include "ops/cuda_ops.h"
#include "ops/op_table_row.h"
#include "ops/ops.h"

namespace ortmodule {
namespace op_rows {

std::vector<OpDef> math_rows() {
  return {
      // ---- activations, rounding and transcendental functions ----
      // The ELU family: aten.elu(x, alpha, scale, input_scale) in ONNX's forms, and the
      // ai.ortmodule ScaledElu for the scales none of them has (activation_family_ops.cpp).
      Row("", "Elu", 6, shape_same_as_input0, cpu_elu, grad_elu).cuda(cuda_elu).inplace(0),
      Row("", "Selu", 6, shape_same_as_input0, cpu_elu, grad_elu).cuda(cuda_elu).inplace(0),
      Row("", "Celu", 12, shape_same_as_input0, cpu_elu, grad_elu).cuda(cuda_elu).inplace(0),
      Row(kOwn, "ScaledElu", 1, shape_same_as_input0, cpu_elu, grad_elu).cuda(cuda_elu).inplace(0),
      Row("", "HardSigmoid", 6, shape_same_as_input0, cpu_hard_sigmoid, grad_hard_sigmoid)
          .cuda(cuda_hard_sigmoid)
          .inplace(0),
      Row("", "HardSwish", 14, shape_same_as_input0, cpu_hard_swish, grad_hard_swish)
          .cuda(cuda_hard_swish)
          .inplace(0),
      Row("", "Mish", 18, shape_same_as_input0, cpu_mish, grad_mish).cuda(cuda_mish).inplace(0),
      // Half to even; its gradient is zeros, as torch.round's (the input's .grad is a tensor).
      Row("", "Round", 11, shape_same_as_input0, cpu_round, grad_round).cuda(cuda_round).inplace(0),
      Row("", "Tan", 7, shape_same_as_input0, cpu_tan, grad_tan).cuda(cuda_tan).inplace(0),
      Row("", "Asin", 7, shape_same_as_input0, cpu_asin, grad_asin).cuda(cuda_asin).inplace(0),
      Row("", "Acos", 7, shape_same_as_input0, cpu_acos, grad_acos).cuda(cuda_acos).inplace(0),
      Row("", "Atan", 7, shape_same_as_input0, cpu_atan, grad_atan).cuda(cuda_atan).inplace(0),
      Row("", "Sinh", 9, shape_same_as_input0, cpu_sinh, grad_sinh).cuda(cuda_sinh).inplace(0),
      Row("", "Cosh", 9, shape_same_as_input0, cpu_cosh, grad_cosh).cuda(cuda_cosh).inplace(0),
      Row("", "Asinh", 9, shape_same_as_input0, cpu_asinh, grad_asinh).cuda(cuda_asinh).inplace(0),
      Row("", "Acosh", 9, shape_same_as_input0, cpu_acosh, grad_acosh).cuda(cuda_acosh).inplace(0),
      Row("", "Atanh", 9, shape_same_as_input0, cpu_atanh, grad_atanh).cuda(cuda_atanh).inplace(0),
      // F.hardtanh and relu6: Clip with attribute bounds, the gradient strictly inside them.
      Row(kOwn, "HardTanh", 1, shape_same_as_input0, cpu_clip, grad_hard_tanh)
          .cuda(cuda_clip)
          .inplace(0),
      // torch.atan2(a, b), a and b broadcast.
      Row(kOwn, "Atan2", 1, shape_binary_broadcast, cpu_atan2, grad_atan2).cuda(cuda_atan2),
      // torch.special.erfcx and log_ndtr, accurate for large |x| (kernels/math/activation.h).
      Row(kOwn, "Erfcx", 1, shape_same_as_input0, cpu_erfcx, grad_erfcx)
          .cuda(cuda_erfcx)
          .inplace(0),
      Row(kOwn, "LogNdtr", 1, shape_same_as_input0, cpu_log_ndtr, grad_log_ndtr)
          .cuda(cuda_log_ndtr)
          .inplace(0),
      // The gamma family (kernels/math/gamma.h, erfinv.h): torch.digamma, lgamma,
      // polygamma(n, x), erfinv, special.ndtri, special.zeta(s, q), igamma(a, x) and
      // igammac(a, x), the binary ones broadcast.
      Row(kOwn, "Digamma", 1, shape_same_as_input0, cpu_digamma, grad_digamma)
          .cuda(cuda_digamma)
          .inplace(0),
      Row(kOwn, "Lgamma", 1, shape_same_as_input0, cpu_lgamma, grad_lgamma)
          .cuda(cuda_lgamma)
          .inplace(0),
      Row(kOwn, "Polygamma", 1, shape_same_as_input0, cpu_polygamma, grad_polygamma)
          .cuda(cuda_polygamma)
          .inplace(0),
      Row(kOwn, "Erfinv", 1, shape_same_as_input0, cpu_erfinv, grad_erfinv)
          .cuda(cuda_erfinv)
          .inplace(0),
      Row(kOwn, "Ndtri", 1, shape_same_as_input0, cpu_ndtri, grad_ndtri)
          .cuda(cuda_ndtri)
          .inplace(0),
      Row(kOwn, "Zeta", 1, shape_binary_broadcast, cpu_zeta, grad_zeta).cuda(cuda_zeta),
      Row(kOwn, "Igamma", 1, shape_binary_broadcast, cpu_igamma, grad_igamma).cuda(cuda_igamma),
      Row(kOwn, "Igammac", 1, shape_binary_broadcast, cpu_igammac, grad_igammac).cuda(cuda_igammac),
      // torch.i0 and torch.special's Bessel functions (kernels/math/bessel.h). Gradients where
      // torch has them (i0, i0e, i1, i1e); torch's other Bessel functions are not
      // differentiable (their results do not require grad), nor are these rows.
      Row(kOwn, "BesselI0", 1, shape_same_as_input0, cpu_bessel_i0, grad_bessel_i0)
          .cuda(cuda_bessel_i0)
          .inplace(0),
      Row(kOwn, "BesselI0e", 1, shape_same_as_input0, cpu_bessel_i0e, grad_bessel_i0e)
          .cuda(cuda_bessel_i0e)
          .inplace(0),
      Row(kOwn, "BesselI1", 1, shape_same_as_input0, cpu_bessel_i1, grad_bessel_i1)
          .cuda(cuda_bessel_i1)
          .inplace(0),
      Row(kOwn, "BesselI1e", 1, shape_same_as_input0, cpu_bessel_i1e, grad_bessel_i1e)
          .cuda(cuda_bessel_i1e)
          .inplace(0),
      Row(kOwn, "BesselJ0", 1, shape_same_as_input0, cpu_bessel_j0, nullptr)
          .cuda(cuda_bessel_j0)
          .not_differentiable()
          .inplace(0),
      Row(kOwn, "BesselJ1", 1, shape_same_as_input0, cpu_bessel_j1, nullptr)
          .cuda(cuda_bessel_j1)
          .not_differentiable()
          .inplace(0),
      Row(kOwn, "BesselY0", 1, shape_same_as_input0, cpu_bessel_y0, nullptr)
          .cuda(cuda_bessel_y0)
          .not_differentiable()
          .inplace(0),
      Row(kOwn, "BesselY1", 1, shape_same_as_input0, cpu_bessel_y1, nullptr)
          .cuda(cuda_bessel_y1)
          .not_differentiable()
          .inplace(0),
      Row(kOwn, "BesselK0", 1, shape_same_as_input0, cpu_bessel_k0, nullptr)
          .cuda(cuda_bessel_k0)
          .not_differentiable()
          .inplace(0),
      Row(kOwn, "BesselK1", 1, shape_same_as_input0, cpu_bessel_k1, nullptr)
          .cuda(cuda_bessel_k1)
          .not_differentiable()
          .inplace(0),
      Row(kOwn, "BesselK0e", 1, shape_same_as_input0, cpu_bessel_k0e, nullptr)
          .cuda(cuda_bessel_k0e)
          .not_differentiable()
          .inplace(0),
      Row(kOwn, "BesselK1e", 1, shape_same_as_input0, cpu_bessel_k1e, nullptr)
          .cuda(cuda_bessel_k1e)
          .not_differentiable()
          .inplace(0),
      Row(kOwn, "AiryAi", 1, shape_same_as_input0, cpu_airy_ai, nullptr)
          .cuda(cuda_airy_ai)
          .not_differentiable()
          .inplace(0),
      Row(kOwn, "SphericalBesselJ0", 1, shape_same_as_input0, cpu_spherical_bessel_j0, nullptr)
          .cuda(cuda_spherical_bessel_j0)
          .not_differentiable()
          .inplace(0),
      // torch.special's orthogonal polynomials (kernels/math/polynomial.h); torch gives them
      // no gradient.
      Row(kOwn, "OrthogonalPolynomial", 1, shape_binary_broadcast, cpu_orthogonal_polynomial,
          nullptr)
          .cuda(cuda_orthogonal_polynomial)
          .not_differentiable(),
      // torch.nextafter and torch.frexp (kernels/math/float_parts.h); the exponent has no
      // gradient.
      Row(kOwn, "NextAfter", 1, shape_binary_broadcast, cpu_next_after, grad_next_after)
          .cuda(cuda_next_after),
      Row(kOwn, "Frexp", 1, shape_frexp, cpu_frexp, grad_frexp).cuda(cuda_frexp).grad_outputs(1),
  };
}

}  // namespace op_rows
}  // namespace ortmodule
