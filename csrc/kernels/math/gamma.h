// Per-element math of the gamma family: digamma, trigamma, the Hurwitz zeta function,
// polygamma, lgamma and the regularized incomplete gamma functions P(a, x) and Q(a, x),
// shared by the CPU loops and the CUDA kernels. Everything is computed in double (float
// inputs too) and follows torch's values at poles, infinities and outside the domains.
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/math/host_device.h"

namespace ortmodule {
namespace math {

namespace gamma_detail {

constexpr double kPi = 3.14159265358979323846;
constexpr double kEpsilon = 1.1102230246251565e-16;  // 2^-53

ORTM_HOST_DEVICE double quiet_nan() { return NAN; }

// psi(x) for x > 0 (also +inf and NaN): the recurrence psi(x) = psi(x + 1) - 1/x up to
// x >= 10, then the asymptotic series ln x - 1/(2x) - sum_k B_2k / (2k x^2k), whose terms
// to x^-14 leave an error below 1e-16 there.
ORTM_HOST_DEVICE double digamma_positive(double x) {
  double shift = 0.0;
  while (x < 10.0) {
    shift -= 1.0 / x;
    x += 1.0;
  }
  // B_2k / (2k), k = 1..7
  constexpr double kCoefficients[7] = {1.0 / 12,  -1.0 / 120,     1.0 / 252, -1.0 / 240,
                                       1.0 / 132, -691.0 / 32760, 1.0 / 12};
  const double z = 1.0 / (x * x);
  double tail = 0.0;
  for (int k = 6; k >= 0; --k) tail = (tail + kCoefficients[k]) * z;
  return shift + std::log(x) - 0.5 / x - tail;
}

// psi_1(x) for x >= 0.5 (also +inf and NaN): psi_1(x) = psi_1(x + 1) + 1/x^2 up to x >= 10,
// then 1/x + 1/(2x^2) + sum_k B_2k / x^(2k+1).
ORTM_HOST_DEVICE double trigamma_positive(double x) {
  double shift = 0.0;
  while (x < 10.0) {
    shift += 1.0 / (x * x);
    x += 1.0;
  }
  // B_2k, k = 1..7
  constexpr double kBernoulli[7] = {1.0 / 6,  -1.0 / 30,     1.0 / 42, -1.0 / 30,
                                    5.0 / 66, -691.0 / 2730, 7.0 / 6};
  const double z = 1.0 / (x * x);
  double series = 0.0;
  for (int k = 6; k >= 0; --k) series = (series + kBernoulli[k]) * z;
  series += 1.0 + 0.5 / x;
  return shift + series / x;
}

// (2j)! / B_2j for j = 1..12: the Euler-Maclaurin corrections of the Hurwitz zeta function.
ORTM_HOST_DEVICE double bernoulli_factor(int j) {
  constexpr double kFactors[12] = {12.0,
                                   -720.0,
                                   30240.0,
                                   -1209600.0,
                                   47900160.0,
                                   -1.8924375803183791606e9,
                                   7.47242496e10,
                                   -2.950130727918164224e12,
                                   1.1646782814350067249e14,
                                   -4.5979787224074726105e15,
                                   1.8152105401943546773e17,
                                   -7.1661652561756670113e18};
  return kFactors[j];
}

}  // namespace gamma_detail

// torch.digamma: -inf at +0 and +inf at -0, NaN at the negative integers and -inf; below
// zero the reflection psi(x) = psi(1 - x) - pi / tan(pi x), tan taken of r = x - round(x)
// (exact, |r| <= 1/2): pi x itself, rounded, loses the distance to the nearest pole.
ORTM_HOST_DEVICE double digamma_double(double x) {
  using namespace gamma_detail;
  if (x == 0.0) return std::copysign(HUGE_VAL, -x);
  if (x < 0.0) {
    if (x == std::floor(x)) return quiet_nan();
    return digamma_positive(1.0 - x) - kPi / std::tan(kPi * (x - std::round(x)));
  }
  return digamma_positive(x);
}
template <typename T>
ORTM_HOST_DEVICE T digamma(T x) {
  return static_cast<T>(digamma_double(static_cast<double>(x)));
}

// psi_1(x); below 1/2 the reflection psi_1(x) = pi^2 / sin^2(pi x) - psi_1(1 - x), with
// sin^2(pi x) = sin^2(pi r) for r = x - round(x), except at the poles (x = 0 and the negative
// integers) where it is torch's sin(pi x) in the input's precision: 0 at x = 0 (+inf) and,
// at a negative integer, the rounding of pi x, so that the value is eager's (large and
// finite).
template <typename T>
ORTM_HOST_DEVICE double trigamma_double(T input) {
  using namespace gamma_detail;
  const double x = static_cast<double>(input);
  if (!(x < 0.5)) return trigamma_positive(x);
  double s;
  if (x == std::floor(x))
    s = static_cast<double>(std::sin(static_cast<T>(kPi) * input));
  else
    s = std::sin(kPi * (x - std::round(x)));
  return kPi * kPi / (s * s) - trigamma_positive(1.0 - x);
}

// torch.special.zeta(s, q) = sum_k (q + k)^-s: inf at s = 1 and at q = 0, -1, -2, ...;
// NaN for s < 1, and for q < 0 with a non-integer s. The sum runs directly up to
// w = q + k >= 10 (at least ten terms, fewer if they vanish beside it); the rest is
// Euler-Maclaurin: w^(1-s) / (s - 1) + w^-s / 2 + sum_j B_2j / (2j)! s (s+1) ... (s+2j-2)
// w^(-s-2j+1). As torch: zeta(s, +inf) is NaN, and zeta(+inf, q) is inf below q = 1, 1 at
// q = 1 and NaN above.
ORTM_HOST_DEVICE double hurwitz_zeta_double(double s, double q) {
  using namespace gamma_detail;
  if (s == 1.0) return HUGE_VAL;
  if (s < 1.0) return quiet_nan();
  if (q <= 0.0) {
    if (q == std::floor(q)) return HUGE_VAL;
    if (s != std::floor(s)) return quiet_nan();
  }
  if (s == HUGE_VAL) return q < 1.0 ? HUGE_VAL : (q == 1.0 ? 1.0 : quiet_nan());
  if (q == HUGE_VAL || s != s || q != q) return quiet_nan();
  double sum = std::pow(q, -s);
  double w = q;
  double b = 0.0;
  for (int k = 1; k < 10 || w < 10.0; ++k) {
    w += 1.0;
    b = std::pow(w, -s);
    sum += b;
    if (std::fabs(b) < kEpsilon * std::fabs(sum)) return sum;
  }
  // The terms from w on: the integral, half the first term (b = w^-s counted whole above)
  // and the Bernoulli corrections.
  sum += b * w / (s - 1.0) - 0.5 * b;
  double rising = s;     // s (s+1) ... (s+2j-2)
  double power = b / w;  // w^(-s-2j+1)
  for (int j = 0; j < 12; ++j) {
    const double term = rising * power / bernoulli_factor(j);
    sum += term;
    if (std::fabs(term) < kEpsilon * std::fabs(sum)) break;
    rising *= (s + 2 * j + 1) * (s + 2 * j + 2);
    power /= w * w;
  }
  return sum;
}
template <typename T>
ORTM_HOST_DEVICE T hurwitz_zeta(T s, T q) {
  return static_cast<T>(hurwitz_zeta_double(static_cast<double>(s), static_cast<double>(q)));
}

namespace gamma_detail {

// lgamma(1 + a) for |a| <= 0.25 without the rounding of 1 + a: -gamma a + sum_k>=2
// (-1)^k zeta(k) a^k / k.
ORTM_HOST_DEVICE double lgamma1p_small(double a) {
  constexpr double kEulerGamma = 0.57721566490153286061;
  double sum = -kEulerGamma * a;
  double power = -a;  // (-a)^(k-1)
  for (int k = 2; k <= 40; ++k) {
    power *= -a;
    const double term = hurwitz_zeta_double(k, 1.0) * power / k;
    sum += term;
    if (std::fabs(term) < kEpsilon * std::fabs(sum)) break;
  }
  return sum;
}

// P(a, x) by its power series x^a e^-x / Gamma(a + 1) sum_n x^n / ((a+1)...(a+n)), for
// x < a + 1 (the terms fall from the first on).
ORTM_HOST_DEVICE double igamma_series(double a, double x) {
  double term = 1.0, sum = 1.0;
  for (int n = 1; n < 100000; ++n) {
    term *= x / (a + n);
    sum += term;
    if (term < kEpsilon * sum) break;
  }
  return std::exp(a * std::log(x) - x - std::lgamma(a + 1.0)) * sum;
}

// Q(a, x) by Legendre's continued fraction x^a e^-x / Gamma(a) * 1 / (x + 1 - a -
// 1 (1 - a) / (x + 3 - a - 2 (2 - a) / (x + 5 - a - ...))), evaluated forward (modified
// Lentz), for x >= a + 1.
ORTM_HOST_DEVICE double igammac_continued_fraction(double a, double x) {
  constexpr double kTiny = 1e-300;
  double b = x + 1.0 - a;
  double c = 1.0 / kTiny;
  double d = 1.0 / b;
  double h = d;
  for (int i = 1; i < 100000; ++i) {
    const double an = -i * (i - a);
    b += 2.0;
    d = an * d + b;
    if (std::fabs(d) < kTiny) d = kTiny;
    c = b + an / c;
    if (std::fabs(c) < kTiny) c = kTiny;
    d = 1.0 / d;
    const double step = d * c;
    h *= step;
    if (std::fabs(step - 1.0) < kEpsilon) break;
  }
  return std::exp(a * std::log(x) - x - std::lgamma(a)) * h;
}

// Q(a, x) for small a and x <= 1.5, where 1 - P cancels: Q = -expm1(a ln x - lgamma(1 + a))
// - x^a / Gamma(a) sum_n>=1 (-x)^n / (n! (a + n)) (the series of the lower function
// with its first term taken apart).
ORTM_HOST_DEVICE double igammac_small_a(double a, double x) {
  double term = 1.0, sum = 0.0;
  for (int n = 1; n < 200; ++n) {
    term *= -x / n;
    const double t = term / (a + n);
    sum += t;
    if (std::fabs(t) < kEpsilon * std::fabs(sum)) break;
  }
  const double log_x_a = a * std::log(x);
  const double head = -std::expm1(log_x_a - lgamma1p_small(a));
  // x^a / Gamma(a) = a x^a / Gamma(1 + a)
  return head - a * std::exp(log_x_a - lgamma1p_small(a)) * sum;
}

}  // namespace gamma_detail

// torch.polygamma(n, x): digamma for n = 0, trigamma for n = 1, and
// (-1)^(n+1) n! zeta(n + 1, x) above (n! overflows to inf past n = 170).
template <typename T>
ORTM_HOST_DEVICE T polygamma(int64_t n, T x) {
  if (n == 0) return digamma(x);
  if (n == 1) return static_cast<T>(trigamma_double(x));
  double factorial = 1.0;
  for (int64_t k = 2; k <= n && factorial < HUGE_VAL; ++k) factorial *= static_cast<double>(k);
  const double sign = n % 2 ? 1.0 : -1.0;
  return static_cast<T>(sign * factorial *
                        hurwitz_zeta_double(static_cast<double>(n) + 1.0, static_cast<double>(x)));
}

// torch.lgamma: log |Gamma(x)|, +inf at the poles and at +-inf.
template <typename T>
ORTM_HOST_DEVICE T log_gamma(T x) {
  return static_cast<T>(std::lgamma(static_cast<double>(x)));
}

// torch.igamma(a, x) = P(a, x), the regularized lower incomplete gamma function, and
// torch.igammac(a, x) = Q(a, x) = 1 - P(a, x). Boundaries as torch's: NaN for a < 0 or
// x < 0; at a = 0, P = 1 and Q = 0 for x > 0 (NaN at x = 0); at x = 0, P = 0; a = inf gives
// P = 0 unless x is inf too (NaN); x = inf gives P = 1. Otherwise the series below x = a + 1
// and the continued fraction above, each for the side it converges on; the other side is
// one minus it, except Q for small a and x, where that cancels.
ORTM_HOST_DEVICE double igamma_double(double a, double x) {
  using namespace gamma_detail;
  if (a != a || x != x || a < 0.0 || x < 0.0) return quiet_nan();
  if (a == 0.0) return x > 0.0 ? 1.0 : quiet_nan();
  if (x == 0.0) return 0.0;
  if (a == HUGE_VAL) return x == HUGE_VAL ? quiet_nan() : 0.0;
  if (x == HUGE_VAL) return 1.0;
  if (x < a + 1.0) return igamma_series(a, x);
  return 1.0 - igammac_continued_fraction(a, x);
}
ORTM_HOST_DEVICE double igammac_double(double a, double x) {
  using namespace gamma_detail;
  if (a != a || x != x || a < 0.0 || x < 0.0) return quiet_nan();
  if (a == 0.0) return x > 0.0 ? 0.0 : quiet_nan();
  if (x == 0.0) return 1.0;
  if (a == HUGE_VAL) return x == HUGE_VAL ? quiet_nan() : 1.0;
  if (x == HUGE_VAL) return 0.0;
  if (x >= a + 1.0) return igammac_continued_fraction(a, x);
  if (a < 0.25 && x <= 1.5) return igammac_small_a(a, x);
  return 1.0 - igamma_series(a, x);
}
template <typename T>
ORTM_HOST_DEVICE T igamma(T a, T x) {
  return static_cast<T>(igamma_double(static_cast<double>(a), static_cast<double>(x)));
}
template <typename T>
ORTM_HOST_DEVICE T igammac(T a, T x) {
  return static_cast<T>(igammac_double(static_cast<double>(a), static_cast<double>(x)));
}

}  // namespace math
}  // namespace ortmodule
