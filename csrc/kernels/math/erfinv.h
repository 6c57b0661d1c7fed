// Per-element math of the inverse error function (torch.erfinv) and the inverse of the
// standard normal CDF (torch.special.ndtri), shared by the CPU loops and the CUDA kernels.
// Both are computed in double: an initial guess from a closed-form approximation of erf,
// then Newton steps on erf near zero and on log erfc in the tails (no cancellation of
// 1 - y or of a tiny probability).
#pragma once

#include <cmath>

#include "kernels/math/activation.h"
#include "kernels/math/host_device.h"

namespace ortmodule {
namespace math {

namespace erfinv_detail {

constexpr double kPi = 3.14159265358979323846;
constexpr double kSqrtPiOver2 = 0.88622692545275801365;  // sqrt(pi) / 2
constexpr double kSqrt2 = 1.41421356237309504880;

// x >= 0 with erf(x) ~ 1 - q, from erf(x)^2 ~ 1 - exp(-x^2 (4/pi + c x^2) / (1 + c x^2)),
// c = 0.147, solved for x^2, given L = log(1 - erf(x)^2) = log(q (2 - q)) (relative error
// about 2e-3). Written so that neither small x (t > 0) nor the far tail (t < 0) cancels.
ORTM_HOST_DEVICE double initial_guess(double log_one_minus_square) {
  constexpr double c = 0.147;
  const double t = 2.0 / (kPi * c) + 0.5 * log_one_minus_square;
  const double u = -log_one_minus_square / c;
  const double root = std::sqrt(t * t + u);
  return std::sqrt(t >= 0.0 ? u / (root + t) : root - t);
}

// x with erf(x) = y, 0 <= y <= 1/2: Newton on erf(x) - y.
ORTM_HOST_DEVICE double erfinv_central(double y) {
  double x = initial_guess(std::log1p(-y * y));
  for (int i = 0; i < 8; ++i) {
    const double step = (std::erf(x) - y) * kSqrtPiOver2 * std::exp(x * x);
    x -= step;
    if (std::fabs(step) <= 1e-10 * x) break;
  }
  return x;
}

// x >= 0 with erfc(x) = q, 0 < q <= 1/2: Newton on log erfc(x) - log q
// = log erfcx(x) - x^2 - log q, whose derivative is -2 / (sqrt(pi) erfcx(x)).
ORTM_HOST_DEVICE double erfcinv_tail(double q) {
  const double log_q = std::log(q);
  double x = initial_guess(log_q + std::log(2.0 - q));
  for (int i = 0; i < 8; ++i) {
    const double e = erfcx_double(x);
    const double step = (std::log(e) - x * x - log_q) * kSqrtPiOver2 * e;
    x += step;
    if (std::fabs(step) <= 1e-10 * x) break;
  }
  return x;
}

}  // namespace erfinv_detail

// torch.erfinv: +-inf at +-1, NaN beyond; odd (erfinv(-0) = -0).
ORTM_HOST_DEVICE double erfinv_double(double y) {
  using namespace erfinv_detail;
  const double ay = std::fabs(y);
  if (!(ay <= 1.0)) return NAN;
  if (ay == 1.0) return std::copysign(HUGE_VAL, y);
  const double x = ay <= 0.5 ? erfinv_central(ay) : erfcinv_tail(1.0 - ay);
  return std::copysign(x, y);
}
template <typename T>
ORTM_HOST_DEVICE T erfinv(T y) {
  return static_cast<T>(erfinv_double(static_cast<double>(y)));
}

// torch.special.ndtri(p) = sqrt(2) erfinv(2p - 1): -inf at 0, +inf at 1, NaN outside
// [0, 1]. 2p - 1 is exact for p >= 1/4; below, -sqrt(2) erfcinv(2p) keeps a tiny p's
// digits, and above 3/4 the mirror sqrt(2) erfcinv(2 (1 - p)) (1 - p exact).
ORTM_HOST_DEVICE double ndtri_double(double p) {
  using namespace erfinv_detail;
  if (!(p >= 0.0 && p <= 1.0)) return NAN;
  if (p == 0.0) return -HUGE_VAL;
  if (p == 1.0) return HUGE_VAL;
  if (p < 0.25) return -kSqrt2 * erfcinv_tail(2.0 * p);
  if (p > 0.75) return kSqrt2 * erfcinv_tail(2.0 * (1.0 - p));
  const double t = 2.0 * p - 1.0;
  return std::copysign(kSqrt2 * erfinv_central(std::fabs(t)), t);
}
template <typename T>
ORTM_HOST_DEVICE T ndtri(T p) {
  return static_cast<T>(ndtri_double(static_cast<double>(p)));
}

}  // namespace math
}  // namespace ortmodule
