// Per-element math of the ELU family (Elu, Selu, Celu), HardSigmoid, HardSwish, Mish, Round,
// Erfcx and LogNdtr, and their gradients, shared by the CPU loops and the CUDA kernels.
// Gradients follow PyTorch's derivatives at the kinks.
#pragma once

#include <cmath>

#include "kernels/math/elementwise.h"
#include "kernels/math/host_device.h"

namespace ortmodule {
namespace math {

// aten.elu(x, alpha, scale, input_scale): ONNX Elu (scale = input_scale = 1), Selu
// (scale = gamma) and Celu (input_scale = 1/alpha) are cases of it.
template <typename T>
ORTM_HOST_DEVICE T elu(T x, T alpha, T scale, T input_scale) {
  return x > T(0) ? scale * x : alpha * scale * std::expm1(x * input_scale);
}
// PyTorch's elu_backward: at x = 0 the exponential side's slope, alpha * scale * input_scale.
template <typename T>
ORTM_HOST_DEVICE T elu_grad(T dy, T x, T alpha, T scale, T input_scale) {
  return x > T(0) ? dy * scale : dy * input_scale * (alpha * scale) * std::exp(x * input_scale);
}

// HardSigmoid: max(0, min(1, alpha x + beta)); NaN stays NaN.
template <typename T>
ORTM_HOST_DEVICE T hard_sigmoid(T x, T alpha, T beta) {
  const T v = alpha * x + beta;
  return v < T(0) ? T(0) : (v > T(1) ? T(1) : v);
}
// The slope alpha strictly between the kinks lower = -beta/alpha and upper = (1-beta)/alpha,
// 0 at and beyond them (PyTorch's hardsigmoid_backward: x in (-3, 3)).
template <typename T>
ORTM_HOST_DEVICE T hard_sigmoid_grad(T dy, T x, T alpha, T lower, T upper) {
  return (x > lower && x < upper) ? dy * alpha : T(0);
}

// HardSwish: x * relu6(x + 3) / 6, as PyTorch computes it.
template <typename T>
ORTM_HOST_DEVICE T hard_swish(T x) {
  const T t = x + T(3);
  return x * (t < T(0) ? T(0) : (t > T(6) ? T(6) : t)) / T(6);
}
// PyTorch's hardswish_backward: 0 up to -3, x/3 + 1/2 strictly between the kinks, 1 from 3 on.
template <typename T>
ORTM_HOST_DEVICE T hard_swish_grad(T dy, T x) {
  if (x <= T(-3)) return T(0);
  if (x < T(3)) return dy * (x / T(3) + T(0.5));
  return dy;
}

// Mish: x * tanh(softplus(x)).
template <typename T>
ORTM_HOST_DEVICE T mish(T x) {
  return x * std::tanh(softplus(x));
}
template <typename T>
ORTM_HOST_DEVICE T mish_grad(T dy, T x) {
  const T t = std::tanh(softplus(x));
  return dy * (t + x * sigmoid(x) * (T(1) - t * t));
}

// Round half to even (the default rounding mode), as ONNX Round and torch.round.
template <typename T>
ORTM_HOST_DEVICE T round_half_even(T x) {
  return std::nearbyint(x);
}

// erfcx(x) = exp(x^2) erfc(x), in double (float inputs too: erfc(x) of a float underflows
// above 10). exp(x^2) takes x^2 as the exact sum p + e
// (e = fma(x, x, -p)), so that its rounding does not grow with x^2. Above 26 erfc(x)
// underflows toward the subnormals: the asymptotic series 1/(x sqrt(pi)) sum_k
// (-1)^k (2k-1)!! / (2x^2)^k, whose eighth term is below 1e-18 there. Below 0:
// erfcx(x) = 2 exp(x^2) - erfcx(-x), which overflows to inf below about -26.6.
ORTM_HOST_DEVICE double erfcx_double(double x) {
  const double ax = x < 0 ? -x : x;
  double r;
  if (ax < 26.0) {
    const double p = ax * ax;
    const double e = std::fma(ax, ax, -p);
    r = std::exp(p) * (1.0 + e) * std::erfc(ax);
  } else {
    const double inv = 1.0 / (2.0 * ax * ax);
    double term = 1.0, sum = 1.0;
    for (int k = 1; k <= 8; ++k) {
      term *= -(2.0 * k - 1.0) * inv;
      sum += term;
    }
    r = sum / (ax * 1.7724538509055160273);
  }
  if (x >= 0 || x != x) return r;
  if (x < -27.0) return HUGE_VAL;  // (exp(x^2) overflows; e would be NaN at -inf)
  const double p = x * x;
  const double e = std::fma(x, x, -p);
  return 2.0 * std::exp(p) * (1.0 + e) - r;
}
template <typename T>
ORTM_HOST_DEVICE T erfcx(T x) {
  return static_cast<T>(erfcx_double(static_cast<double>(x)));
}
// log of the standard normal CDF, PyTorch's formula: log(erfcx(-x/sqrt 2) / 2) - x^2/2 below
// -1 (accurate however negative x is), log1p(-erfc(x/sqrt 2) / 2) above.
template <typename T>
ORTM_HOST_DEVICE T log_ndtr(T x) {
  const double v = static_cast<double>(x);
  const double t = v * 0.70710678118654752440;
  if (v < -1.0) return static_cast<T>(std::log(erfcx_double(-t) / 2.0) - v * v / 2.0);
  return static_cast<T>(std::log1p(-std::erfc(t) / 2.0));
}

}  // namespace math
}  // namespace ortmodule
