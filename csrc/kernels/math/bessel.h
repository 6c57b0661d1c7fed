// Per-element math of the Bessel family: torch.i0 (= special.modified_bessel_i0) and
// torch.special.{i0e, i1 (= modified_bessel_i1), i1e, bessel_j0, bessel_j1, bessel_y0,
// bessel_y1, modified_bessel_k0, modified_bessel_k1, scaled_modified_bessel_k0,
// scaled_modified_bessel_k1, airy_ai, spherical_bessel_j0}, shared by the CPU loops and the
// CUDA kernels. Everything is computed in double (float inputs too) from series, recurrences
// and expansions whose truncation is below double rounding in the range each one serves:
//   I0, I1       power series up to |x| = 20, Hankel's asymptotic series above (its smallest
//                term is about exp(-2x), below 1e-17 from x = 20);
//   K0, K1       the logarithmic power series up to x = 2, the trapezoidal rule on
//                e^x K_nu(x) = int_0^inf exp(-x (cosh t - 1)) cosh(nu t) dt up to 20
//                (geometric convergence: the integrand is analytic in |Im t| < pi/2), the
//                asymptotic series above;
//   J0, J1, Y0, Y1  power series up to |x| = 4, Miller's backward recurrence with the
//                Neumann series of Y0 and Y1 up to 25, Hankel's expansion above;
//   Ai           Taylor steps of Ai'' = x Ai from Ai(0), Ai'(0) over [-9.65, 1] (stable in
//                the oscillating region), Ai(x) = sqrt(x/3)/pi K_{1/3}(2/3 x^1.5) above 1,
//                the oscillating asymptotic expansion below -9.65 (zeta = 2/3 |x|^1.5 > 20).
// Edges are PyTorch's: NaN at +-inf for I0, I1, J0, J1, Y0, Y1 and Ai; Y and K are NaN
// below 0 and -inf / +inf at 0; spherical j0 is 0 at +-inf.
#pragma once

#include <cmath>

#include "kernels/math/host_device.h"

namespace ortmodule {
namespace math {
namespace bessel_detail {

constexpr double kPi = 3.14159265358979323846;
constexpr double kEulerGamma = 0.57721566490153286061;
constexpr double kInvSqrt2Pi = 0.39894228040143267794;  // 1 / sqrt(2 pi)
constexpr double kSqrtHalfPi = 1.25331413731550025121;  // sqrt(pi / 2)
constexpr double kInvSqrtPi = 0.56418958354775628695;   // 1 / sqrt(pi)
constexpr double kInvSqrt2 = 0.70710678118654752440;
constexpr double kAi0 = 0.35502805388781723926;        // Ai(0) = 3^(-2/3) / Gamma(2/3)
constexpr double kAiPrime0 = -0.25881940379280679840;  // Ai'(0) = -3^(-1/3) / Gamma(1/3)

// (The macros, not numeric_limits: its constexpr members are host functions for nvcc.)
ORTM_HOST_DEVICE double nan_value() { return static_cast<double>(NAN); }
ORTM_HOST_DEVICE double inf_value() { return HUGE_VAL; }

// sum_k (x/2)^(2k+nu) / (k! (k+nu)!) = I_nu(x) for nu = 0, 1 and x >= 0 (positive terms).
ORTM_HOST_DEVICE double bessel_i_series(int nu, double x) {
  const double q = 0.25 * x * x;
  double term = nu == 0 ? 1.0 : 0.5 * x;
  double sum = term;
  for (int k = 1; k < 120 && term > 1e-17 * sum; ++k) {
    term *= q / (static_cast<double>(k) * (k + nu));
    sum += term;
  }
  return sum;
}

// Hankel's asymptotic series sum_k s^k a_k(nu) / x^k, a_k = prod_{j<=k} (mu - (2j-1)^2) /
// (k! 8^k), mu = 4 nu^2, s = -1 for I_nu, +1 for K_nu; cut at its smallest term.
ORTM_HOST_DEVICE double hankel_series(double mu, double x, double s) {
  double term = 1.0, sum = 1.0;
  for (int k = 1; k < 80; ++k) {
    const double odd = 2.0 * k - 1.0;
    const double next = term * s * (mu - odd * odd) / (8.0 * k * x);
    if (std::fabs(next) >= std::fabs(term)) break;
    term = next;
    sum += term;
    if (std::fabs(term) <= 1e-17 * std::fabs(sum)) break;
  }
  return sum;
}

// e^-x I_nu(x) for x > 20 (x = inf: 0).
ORTM_HOST_DEVICE double bessel_i_scaled_asymptotic(int nu, double x) {
  return hankel_series(4.0 * nu * nu, x, -1.0) * kInvSqrt2Pi / std::sqrt(x);
}

// e^x K_nu(x) for x >= 0.6 (trapezoidal rule up to 20, asymptotic series above). The step
// keeps the rule's error, about exp(x (1 - cos d) - 2 pi d / h) for a strip half-width
// d < pi/2, below 1e-17.
ORTM_HOST_DEVICE double bessel_k_scaled(double nu, double x) {
  if (x > 20.0) return hankel_series(4.0 * nu * nu, x, 1.0) * kSqrtHalfPi / std::sqrt(x);
  const double h = std::fmin(0.2, 0.6 / std::sqrt(x));
  double sum = 0.5;  // half the integrand at t = 0, which is 1
  for (int j = 1; j < 400; ++j) {
    const double t = j * h;
    const double s = std::sinh(0.5 * t);  // cosh t - 1 = 2 sinh^2(t/2), no cancellation
    const double f = std::exp(-2.0 * x * s * s) * std::cosh(nu * t);
    sum += f;
    if (f < 1e-18 * sum) break;
  }
  return h * sum;
}

// K0(x) and K1(x) for 0 < x <= 2 from their logarithmic series (with I0 and I1 summed
// alongside): K0 = -(ln(x/2) + gamma) I0 + sum_k H_k q^k / k!^2, K1 = 1/x + (ln(x/2) +
// gamma) I1 - 1/2 sum_k (H_k + H_(k+1)) (x/2) q^k / (k! (k+1)!), q = x^2/4, H_k harmonic.
ORTM_HOST_DEVICE double bessel_k_series(int nu, double x) {
  const double q = 0.25 * x * x;
  const double log_term = std::log(0.5 * x) + kEulerGamma;
  double term = nu == 0 ? 1.0 : 0.5 * x;
  double bessel_i = term;
  double harmonic = 0.0;                   // H_k
  double weighted = nu == 0 ? 0.0 : term;  // sum of (H_k + H_(k+nu) for nu = 1) * term
  for (int k = 1; k < 60; ++k) {
    term *= q / (static_cast<double>(k) * (k + nu));
    harmonic += 1.0 / k;
    bessel_i += term;
    weighted += (nu == 0 ? harmonic : 2.0 * harmonic + 1.0 / (k + 1)) * term;
    if (term <= 1e-17 * bessel_i) break;
  }
  if (nu == 0) return weighted - log_term * bessel_i;
  return 1.0 / x + log_term * bessel_i - 0.5 * weighted;
}

// K_nu(x) (scaled: e^x K_nu(x)) for nu = 0, 1: NaN below 0, inf at 0.
ORTM_HOST_DEVICE double bessel_k(int nu, double x, bool scaled) {
  if (x != x || x < 0.0) return nan_value();
  if (x == 0.0) return inf_value();
  if (x <= 2.0) return bessel_k_series(nu, x) * (scaled ? std::exp(x) : 1.0);
  const double k = bessel_k_scaled(nu, x);
  return scaled ? k : k * std::exp(-x);
}

// J_nu(x), Y_nu(x) (nu = 0, 1) for 0 < x <= 4 from their power series: J0 = sum_k t_k,
// t_k = (-q)^k / k!^2, Y0 = 2/pi ((ln(x/2) + gamma) J0 - sum_k H_k t_k); J1 = sum_k u_k,
// u_k = (x/2) (-q)^k / (k! (k+1)!), Y1 = -2/(pi x) + 2/pi (ln(x/2) + gamma) J1
// - 1/pi sum_k (H_k + H_(k+1)) u_k.
ORTM_HOST_DEVICE double bessel_jy_series(int nu, bool want_y, double x) {
  const double q = 0.25 * x * x;
  double term = nu == 0 ? 1.0 : 0.5 * x;
  double bessel_j = term;
  double harmonic = 0.0;
  double weighted = nu == 0 ? 0.0 : term;
  for (int k = 1; k < 60; ++k) {
    term *= -q / (static_cast<double>(k) * (k + nu));
    harmonic += 1.0 / k;
    bessel_j += term;
    weighted += (nu == 0 ? harmonic : 2.0 * harmonic + 1.0 / (k + 1)) * term;
    if (std::fabs(term) <= 1e-18) break;
  }
  if (!want_y) return bessel_j;
  const double log_term = std::log(0.5 * x) + kEulerGamma;
  if (nu == 0) return (2.0 / kPi) * (log_term * bessel_j - weighted);
  return -2.0 / (kPi * x) + (2.0 / kPi) * log_term * bessel_j - weighted / kPi;
}

// J_nu(x), Y_nu(x) (nu = 0, 1) for 4 < x <= 25 by Miller's algorithm: the recurrence
// J_(n-1) = (2n/x) J_n - J_(n+1) run downward from an order where J_n is negligible,
// normalized by J_0 + 2 sum_k J_2k = 1; Y from the Neumann series
// Y0 = 2/pi ((ln(x/2) + gamma) J0 - 2 sum_k (-1)^k J_2k / k) and its derivative
// Y1 = -Y0' = -2/(pi x) J0 + 2/pi (ln(x/2) + gamma) J1 + 2/pi sum_n c_n J_n (odd n,
// c_1 = -1, c_(2m+1) = (-1)^(m+1) (1/m + 1/(m+1))).
ORTM_HOST_DEVICE double bessel_jy_miller(int nu, bool want_y, double x) {
  const int start = 2 * static_cast<int>(0.5 * x + 18.0);
  double above = 0.0;    // j_(n+1)
  double value = 1e-30;  // j_n, unnormalized
  double norm = 0.0, even_sum = 0.0, odd_sum = 0.0, j1 = 0.0;
  for (int n = start; n >= 1; --n) {
    if (n % 2 == 0) {
      const int k = n / 2;
      norm += 2.0 * value;
      even_sum += (k % 2 == 0 ? value : -value) / k;
    } else if (n == 1) {
      j1 = value;
      odd_sum -= value;
    } else {
      const int m = n / 2;
      const double c = 1.0 / m + 1.0 / (m + 1);
      odd_sum += (m % 2 == 1 ? c : -c) * value;
    }
    const double below = (2.0 * n / x) * value - above;
    above = value;
    value = below;
    if (std::fabs(value) > 1e250) {  // keep the unnormalized values in range
      value *= 1e-250;
      above *= 1e-250;
      norm *= 1e-250;
      even_sum *= 1e-250;
      odd_sum *= 1e-250;
      j1 *= 1e-250;
    }
  }
  norm += value;
  const double bessel_j0 = value / norm;
  const double bessel_j1 = j1 / norm;
  if (!want_y) return nu == 0 ? bessel_j0 : bessel_j1;
  const double log_term = std::log(0.5 * x) + kEulerGamma;
  if (nu == 0) return (2.0 / kPi) * (log_term * bessel_j0 - 2.0 * even_sum / norm);
  return (2.0 / kPi) * (log_term * bessel_j1 + odd_sum / norm - bessel_j0 / x);
}

// Hankel's expansion for x > 25: J_nu = sqrt(2/(pi x)) (P cos chi - Q sin chi),
// Y_nu = sqrt(2/(pi x)) (P sin chi + Q cos chi), chi = x - (nu/2 + 1/4) pi, with cos chi and
// sin chi from cos x and sin x (no rounding of x - chi's shift for large x).
ORTM_HOST_DEVICE double bessel_jy_hankel(int nu, bool want_y, double x) {
  const double mu = 4.0 * nu * nu;
  double p = 1.0, q = 0.0, term = 1.0;
  for (int k = 1; k < 80; ++k) {
    const double odd = 2.0 * k - 1.0;
    const double next = term * (mu - odd * odd) / (8.0 * k * x);
    if (std::fabs(next) >= std::fabs(term)) break;
    term = next;
    const double signed_term = (k / 2) % 2 == 0 ? term : -term;
    if (k % 2 == 0) {
      p += signed_term;
    } else {
      q += signed_term;
    }
    if (std::fabs(term) <= 1e-17) break;
  }
  const double c = std::cos(x), s = std::sin(x);
  const double cos_chi = nu == 0 ? (c + s) * kInvSqrt2 : (s - c) * kInvSqrt2;
  const double sin_chi = nu == 0 ? (s - c) * kInvSqrt2 : -(s + c) * kInvSqrt2;
  const double amplitude = std::sqrt(2.0 / (kPi * x));
  return amplitude * (want_y ? p * sin_chi + q * cos_chi : p * cos_chi - q * sin_chi);
}

// J_nu(|x|) or Y_nu(x) for x >= 0.
ORTM_HOST_DEVICE double bessel_jy_positive(int nu, bool want_y, double ax) {
  if (ax <= 4.0) return bessel_jy_series(nu, want_y, ax);
  if (ax <= 25.0) return bessel_jy_miller(nu, want_y, ax);
  return bessel_jy_hankel(nu, want_y, ax);
}

// Ai(x) for -9.65 <= x <= 1: Taylor steps of at most 0.75 from 0. At the point c the
// series y(c + s) = sum_n a_n s^n has a_(n+2) = (c a_n + a_(n-1)) / ((n+2)(n+1)); b_n =
// a_n h^n is what is summed.
ORTM_HOST_DEVICE double airy_ai_taylor(double x) {
  const int steps = static_cast<int>(std::ceil(std::fabs(x) / 0.75));
  if (steps == 0) return kAi0;
  const double h = x / steps;
  double y = kAi0, dy = kAiPrime0, c = 0.0;
  for (int i = 0; i < steps; ++i) {
    double b_prev = 0.0, b0 = y, b1 = dy * h;  // b_(n-1), b_n, b_(n+1)
    double sum_y = b0 + b1, sum_dy = b1;
    for (int n = 0; n < 40; ++n) {
      const double b2 = (c * h * h * b0 + h * h * h * b_prev) / ((n + 2.0) * (n + 1.0));
      sum_y += b2;
      sum_dy += (n + 2.0) * b2;
      b_prev = b0;
      b0 = b1;
      b1 = b2;
      if (n > 4 && std::fabs(b1) + std::fabs(b0) + std::fabs(b_prev) <=
                       1e-18 * (std::fabs(sum_y) + std::fabs(sum_dy))) {
        break;
      }
    }
    y = sum_y;
    dy = sum_dy / h;
    c += h;
  }
  return y;
}

// Ai(-z) for z > 9.65: pi^(-1/2) z^(-1/4) (sin(zeta + pi/4) P - cos(zeta + pi/4) Q),
// zeta = 2/3 z^1.5, P = sum_k (-1)^k u_2k zeta^-2k, Q = sum_k (-1)^k u_(2k+1)
// zeta^-(2k+1), u_k = u_(k-1) (6k-5)(6k-3)(6k-1) / (216 k (2k-1)).
ORTM_HOST_DEVICE double airy_ai_oscillating(double z) {
  const double zeta = (2.0 / 3.0) * z * std::sqrt(z);
  double p = 1.0, q = 0.0, term = 1.0;
  for (int k = 1; k < 80; ++k) {
    const double next = term * (6.0 * k - 5.0) * (6.0 * k - 3.0) * (6.0 * k - 1.0) /
                        (216.0 * k * (2.0 * k - 1.0) * zeta);
    if (next >= term) break;
    term = next;
    const double signed_term = (k / 2) % 2 == 0 ? term : -term;
    if (k % 2 == 0) {
      p += signed_term;
    } else {
      q += signed_term;
    }
    if (term <= 1e-17) break;
  }
  const double c = std::cos(zeta), s = std::sin(zeta);
  const double sin_phase = (s + c) * kInvSqrt2, cos_phase = (c - s) * kInvSqrt2;
  return kInvSqrtPi / std::sqrt(std::sqrt(z)) * (sin_phase * p - cos_phase * q);
}

ORTM_HOST_DEVICE double airy_ai_double(double x) {
  if (x != x || x - x != 0.0) return nan_value();  // NaN and +-inf
  if (x > 1.0) {
    const double zeta = (2.0 / 3.0) * x * std::sqrt(x);
    return std::sqrt(x / 3.0) / kPi * std::exp(-zeta) * bessel_k_scaled(1.0 / 3.0, zeta);
  }
  if (x >= -9.65) return airy_ai_taylor(x);
  return airy_ai_oscillating(-x);
}

}  // namespace bessel_detail

// I0(x), I1(x): the power series up to |x| = 20, exp(|x|) times the scaled asymptotic
// series above, exp taken in T so that it overflows where PyTorch's does (I0 of a float
// is inf above 88.7, like e^x).
template <typename T>
ORTM_HOST_DEVICE T bessel_i0(T x) {
  const double ax = std::fabs(static_cast<double>(x));
  if (ax <= 20.0) return static_cast<T>(bessel_detail::bessel_i_series(0, ax));
  const double e = static_cast<double>(std::exp(static_cast<T>(ax)));
  return static_cast<T>(e * bessel_detail::bessel_i_scaled_asymptotic(0, ax));  // inf: NaN
}
template <typename T>
ORTM_HOST_DEVICE T bessel_i1(T x) {
  const double ax = std::fabs(static_cast<double>(x));
  double r;
  if (ax <= 20.0) {
    r = bessel_detail::bessel_i_series(1, ax);
  } else {
    const double e = static_cast<double>(std::exp(static_cast<T>(ax)));
    r = e * bessel_detail::bessel_i_scaled_asymptotic(1, ax);
  }
  return static_cast<T>(x < T(0) ? -r : r);
}
template <typename T>
ORTM_HOST_DEVICE T bessel_i0e(T x) {
  const double ax = std::fabs(static_cast<double>(x));
  if (ax <= 20.0) return static_cast<T>(bessel_detail::bessel_i_series(0, ax) * std::exp(-ax));
  return static_cast<T>(bessel_detail::bessel_i_scaled_asymptotic(0, ax));
}
template <typename T>
ORTM_HOST_DEVICE T bessel_i1e(T x) {
  const double ax = std::fabs(static_cast<double>(x));
  const double r = ax <= 20.0 ? bessel_detail::bessel_i_series(1, ax) * std::exp(-ax)
                              : bessel_detail::bessel_i_scaled_asymptotic(1, ax);
  return static_cast<T>(x < T(0) ? -r : r);
}

template <typename T>
ORTM_HOST_DEVICE T bessel_k0(T x) {
  return static_cast<T>(bessel_detail::bessel_k(0, static_cast<double>(x), false));
}
template <typename T>
ORTM_HOST_DEVICE T bessel_k1(T x) {
  return static_cast<T>(bessel_detail::bessel_k(1, static_cast<double>(x), false));
}
template <typename T>
ORTM_HOST_DEVICE T bessel_k0e(T x) {
  return static_cast<T>(bessel_detail::bessel_k(0, static_cast<double>(x), true));
}
template <typename T>
ORTM_HOST_DEVICE T bessel_k1e(T x) {
  return static_cast<T>(bessel_detail::bessel_k(1, static_cast<double>(x), true));
}

// J0 is even, J1 odd; both NaN at +-inf (the Hankel form's cos(inf)), as PyTorch's.
template <typename T>
ORTM_HOST_DEVICE T bessel_j0(T x) {
  const double ax = std::fabs(static_cast<double>(x));
  if (ax != ax) return x;
  return static_cast<T>(bessel_detail::bessel_jy_positive(0, false, ax));
}
template <typename T>
ORTM_HOST_DEVICE T bessel_j1(T x) {
  const double ax = std::fabs(static_cast<double>(x));
  if (ax != ax) return x;
  const double r = ax == 0.0 ? 0.0 : bessel_detail::bessel_jy_positive(1, false, ax);
  return static_cast<T>(x < T(0) || (x == T(0) && std::signbit(x)) ? -r : r);
}
// Y0, Y1: NaN below 0, -inf at +-0.
template <typename T>
ORTM_HOST_DEVICE T bessel_y0(T x) {
  const double v = static_cast<double>(x);
  if (v != v || v < 0.0) return static_cast<T>(bessel_detail::nan_value());
  if (v == 0.0) return static_cast<T>(-bessel_detail::inf_value());
  return static_cast<T>(bessel_detail::bessel_jy_positive(0, true, v));
}
template <typename T>
ORTM_HOST_DEVICE T bessel_y1(T x) {
  const double v = static_cast<double>(x);
  if (v != v || v < 0.0) return static_cast<T>(bessel_detail::nan_value());
  if (v == 0.0) return static_cast<T>(-bessel_detail::inf_value());
  return static_cast<T>(bessel_detail::bessel_jy_positive(1, true, v));
}

template <typename T>
ORTM_HOST_DEVICE T airy_ai(T x) {
  return static_cast<T>(bessel_detail::airy_ai_double(static_cast<double>(x)));
}

// sin(x) / x (sin is accurate relative to x for small x, so no series is needed): 1 at 0,
// 0 at +-inf as PyTorch's.
template <typename T>
ORTM_HOST_DEVICE T spherical_bessel_j0(T x) {
  const double v = static_cast<double>(x);
  if (v == 0.0) return T(1);
  if (v - v != 0.0 && v == v) return T(0);
  return static_cast<T>(std::sin(v) / v);
}

}  // namespace math
}  // namespace ortmodule
