// The orthogonal polynomials of torch.special at (x, n): Chebyshev T, U, V, W on [-1, 1] and
// shifted to [0, 1], physicists' and probabilists' Hermite, Laguerre and Legendre, shared by
// the CPU loops and the CUDA kernels. Values are PyTorch's: the same three-term recurrences
// and, for Chebyshev polynomials of high degree inside the interval, the same trigonometric
// closed forms, evaluated in the input's precision (the points where either form overflows to
// inf or NaN are then PyTorch's too). Each recurrence step a b - c d is fma(a, b, -c d), one
// rounding for a b: the form PyTorch's CPU kernels take in their AVX2 and AVX-512 builds (its
// CUDA kernels contract it too), which these values match bit for bit; PyTorch's build
// without FMA (ATEN_CPU_CAPABILITY=default) rounds a b first and differs in the last bits,
// and where a b overflows (inf or NaN instead of a finite value, or NaN instead of inf).
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>

#include "kernels/math/host_device.h"

namespace ortmodule {
namespace math {

enum class PolynomialKind : int32_t {
  ChebyshevT,
  ChebyshevU,
  ChebyshevV,
  ChebyshevW,
  ShiftedChebyshevT,
  ShiftedChebyshevU,
  ShiftedChebyshevV,
  ShiftedChebyshevW,
  HermiteH,
  HermiteHe,
  LaguerreL,
  LegendreP,
};

template <typename T>
ORTM_HOST_DEVICE T polynomial_nan() {
#if defined(__CUDA_ARCH__)
  return static_cast<T>(::nan(""));
#else
  return std::numeric_limits<T>::quiet_NaN();
#endif
}

// The degree torch reads from n (of x's dtype): truncated toward zero; NaN, infinities and
// values beyond int64 count as negative (the conversion gives INT64_MIN there), where every
// polynomial is 0.
template <typename T>
ORTM_HOST_DEVICE int64_t polynomial_degree(T n) {
  if (!(std::fabs(n) < static_cast<T>(9.2233720368547758e18))) return -1;
  return static_cast<int64_t>(n);
}

// The four Chebyshev kinds (0: T, 1: U, 2: V, 3: W) share P_{k+1} = 2y P_k - P_{k-1} from
// P_0 = 1 and P_1 = y, 2y, 2y - 1, 2y + 1.
template <typename T>
ORTM_HOST_DEVICE T chebyshev_degree_one(int kind, T y) {
  switch (kind) {
    case 0:
      return y;
    case 1:
      return y + y;
    case 2:
      return y + y - T(1);
    default:
      return y + y + T(1);
  }
}

// Exact values at y = 1 (at_one) and y = -1.
template <typename T>
ORTM_HOST_DEVICE T chebyshev_endpoint(int kind, bool at_one, int64_t n) {
  const T alternating = n % 2 == 0 ? T(1) : T(-1);
  const T odd = static_cast<T>(n + n + 1);
  switch (kind) {
    case 0:
      return at_one ? T(1) : alternating;
    case 1:
      return static_cast<T>(n + 1) * (at_one ? T(1) : alternating);
    case 2:
      return at_one ? T(1) : alternating * odd;
    default:
      return at_one ? odd : alternating;
  }
}

// |y| < 1, theta = acos y: T = cos(n theta), U = sin((n+1) theta) / sin theta,
// V = cos((n+1/2) theta) / cos(theta/2), W = sin((n+1/2) theta) / sin(theta/2). Where the
// denominator's angle rounds to the endpoint, the endpoint's value; for the shifted W that
// value is PyTorch's (-1)^n, its value at y = -1, though theta is then near 0 (y near 1).
template <typename T>
ORTM_HOST_DEVICE T chebyshev_trigonometric(int kind, T y, int64_t n, bool shifted) {
  const T theta = std::acos(y);
  switch (kind) {
    case 0:
      return std::cos(static_cast<T>(n) * theta);
    case 1: {
      const T s = std::sin(theta);
      const T m = static_cast<T>(n + 1);
      if (s != T(0)) return std::sin(m * theta) / s;
      return m * std::cos(m * theta) / y;
    }
    case 2:
      if (std::sin(theta / T(2)) != T(1))
        return std::cos((static_cast<T>(n) + T(0.5)) * theta) / std::cos(theta / T(2));
      return chebyshev_endpoint<T>(2, false, n);
    default:
      if (std::cos(theta / T(2)) != T(1))
        return std::sin((static_cast<T>(n) + T(0.5)) * theta) / std::sin(theta / T(2));
      return chebyshev_endpoint<T>(3, !shifted && y > T(0), n);
  }
}

// Chebyshev polynomial of `kind` at y, n >= 0, away from the endpoints; the closed form
// above degree `closed_above` inside the interval, else the recurrence (stopped at NaN).
template <typename T>
ORTM_HOST_DEVICE T chebyshev(int kind, T y, int64_t n, int64_t closed_above, bool shifted) {
  if (n > closed_above && std::fabs(y) < T(1)) return chebyshev_trigonometric(kind, y, n, shifted);
  if (n == 0) return T(1);
  T previous = T(1);
  T current = chebyshev_degree_one(kind, y);
  for (int64_t k = 2; k <= n && !std::isnan(current); ++k) {
    const T next = std::fma(y + y, current, -previous);
    previous = current;
    current = next;
  }
  return current;
}

// T_n(x), U_n(x), V_n(x), W_n(x); kind 0..3.
template <typename T>
ORTM_HOST_DEVICE T chebyshev_polynomial(int kind, T x, int64_t n) {
  if (n < 0) return T(0);
  if (std::fabs(x) == T(1)) return chebyshev_endpoint<T>(kind, x > T(0), n);
  return chebyshev(kind, x, n, kind == 0 ? 6 : 8, false);
}

// The same at y = 2x - 1 (x in [0, 1] maps to [-1, 1]).
template <typename T>
ORTM_HOST_DEVICE T shifted_chebyshev_polynomial(int kind, T x, int64_t n) {
  if (n < 0) return T(0);
  if (x == T(1)) return chebyshev_endpoint<T>(kind, true, n);
  if (x == T(0)) return chebyshev_endpoint<T>(kind, false, n);
  return chebyshev(kind, x + x - T(1), n, kind == 3 ? 4 : 6, true);
}

// Above these degrees torch's Hermite polynomials are NaN.
template <typename T>
ORTM_HOST_DEVICE int64_t hermite_degree_limit() {
  return sizeof(T) == sizeof(float) ? 128 : 512;
}

// Physicists' H_{k+1} = 2x H_k - 2k H_{k-1}, H_1 = 2x; probabilists' He_{k+1} = x He_k -
// k He_{k-1}, He_1 = x.
template <typename T>
ORTM_HOST_DEVICE T hermite_polynomial(bool physicists, T x, int64_t n) {
  if (n < 0) return T(0);
  if (n == 0) return T(1);
  const T scale = physicists ? x + x : x;
  if (n == 1) return scale;
  if (n > hermite_degree_limit<T>()) return polynomial_nan<T>();
  T previous = T(1);
  T current = scale;
  for (int64_t k = 1; k < n; ++k) {
    const T next = std::fma(scale, current, -(static_cast<T>(physicists ? k + k : k) * previous));
    previous = current;
    current = next;
  }
  return current;
}

// (k + 1) L_{k+1} = (2k + 1 - x) L_k - k L_{k-1}, L_1 = 1 - x; 1 at x = 0.
template <typename T>
ORTM_HOST_DEVICE T laguerre_polynomial(T x, int64_t n) {
  if (n < 0) return T(0);
  if (x == T(0) || n == 0) return T(1);
  T previous = T(1);
  T current = T(1) - x;
  for (int64_t k = 1; k < n && !std::isnan(current); ++k) {
    const T next =
        std::fma(static_cast<T>(k + k) + (T(1) - x), current, -(static_cast<T>(k) * previous)) /
        static_cast<T>(k + 1);
    previous = current;
    current = next;
  }
  return current;
}

// (k + 1) P_{k+1} = (2k + 1) x P_k - k P_{k-1}, P_1 = x; exact at x = +-1.
template <typename T>
ORTM_HOST_DEVICE T legendre_polynomial(T x, int64_t n) {
  if (n < 0) return T(0);
  if (std::fabs(x) == T(1)) return x > T(0) || n % 2 == 0 ? T(1) : T(-1);
  if (n == 0) return T(1);
  T previous = T(1);
  T current = x;
  for (int64_t k = 1; k < n && !std::isnan(current); ++k) {
    const T next =
        std::fma(static_cast<T>(k + k + 1) * x, current, -(static_cast<T>(k) * previous)) /
        static_cast<T>(k + 1);
    previous = current;
    current = next;
  }
  return current;
}

// The polynomial of `kind` and degree trunc(n) at x (torch.special.<kind>_polynomial_*(x, n)).
template <typename T>
ORTM_HOST_DEVICE T orthogonal_polynomial(PolynomialKind kind, T x, T n_value) {
  const int64_t n = polynomial_degree(n_value);
  const int k = static_cast<int>(kind);
  switch (kind) {
    case PolynomialKind::ChebyshevT:
    case PolynomialKind::ChebyshevU:
    case PolynomialKind::ChebyshevV:
    case PolynomialKind::ChebyshevW:
      return chebyshev_polynomial(k, x, n);
    case PolynomialKind::ShiftedChebyshevT:
    case PolynomialKind::ShiftedChebyshevU:
    case PolynomialKind::ShiftedChebyshevV:
    case PolynomialKind::ShiftedChebyshevW:
      return shifted_chebyshev_polynomial(k - static_cast<int>(PolynomialKind::ShiftedChebyshevT),
                                          x, n);
    case PolynomialKind::HermiteH:
      return hermite_polynomial(true, x, n);
    case PolynomialKind::HermiteHe:
      return hermite_polynomial(false, x, n);
    case PolynomialKind::LaguerreL:
      return laguerre_polynomial(x, n);
    default:
      return legendre_polynomial(x, n);
  }
}

}  // namespace math
}  // namespace ortmodule
