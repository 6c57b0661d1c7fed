// Per-element math shared by the CPU loops and the CUDA kernels.
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/math/host_device.h"

namespace ortmodule {
namespace math {

template <typename T>
ORTM_HOST_DEVICE T relu(T x) {
  return x > T(0) ? x : T(0);
}
// Gradient through relu expressed with its output: y > 0 exactly where x > 0.
template <typename T>
ORTM_HOST_DEVICE T relu_grad(T dy, T y) {
  return y > T(0) ? dy : T(0);
}

template <typename T>
ORTM_HOST_DEVICE T sigmoid(T x) {
  // Split on sign so exp never overflows.
  if (x >= T(0)) return T(1) / (T(1) + std::exp(-x));
  T e = std::exp(x);
  return e / (T(1) + e);
}
template <typename T>
ORTM_HOST_DEVICE T sigmoid_grad(T dy, T y) {
  return dy * y * (T(1) - y);
}

template <typename T>
ORTM_HOST_DEVICE T tanh_fwd(T x) {
  return std::tanh(x);
}
template <typename T>
ORTM_HOST_DEVICE T tanh_grad(T dy, T y) {
  return dy * (T(1) - y * y);
}

template <typename T>
ORTM_HOST_DEVICE T leaky_relu(T x, T alpha) {
  return x >= T(0) ? x : alpha * x;
}
// Expressed with the output: y >= 0 exactly where x >= 0 (alpha > 0).
template <typename T>
ORTM_HOST_DEVICE T leaky_relu_grad(T dy, T y, T alpha) {
  return y > T(0) ? dy : alpha * dy;
}

template <typename T>
ORTM_HOST_DEVICE T erf_grad(T dy, T x) {
  // d/dx erf(x) = 2 / sqrt(pi) * exp(-x^2)
  return dy * T(1.1283791670955126) * std::exp(-x * x);
}

// Gradient passes where the input was not clamped (PyTorch's convention at the bounds).
template <typename T>
ORTM_HOST_DEVICE T clip_grad(T dy, T x, T lo, T hi) {
  return (x >= lo && x <= hi) ? dy : T(0);
}

// Gelu, exact: x * Phi(x) with Phi the normal CDF.
template <typename T>
ORTM_HOST_DEVICE T gelu(T x) {
  return T(0.5) * x * (T(1) + std::erf(x * T(0.7071067811865476)));
}
template <typename T>
ORTM_HOST_DEVICE T gelu_grad(T dy, T x) {
  const T cdf = T(0.5) * (T(1) + std::erf(x * T(0.7071067811865476)));
  const T pdf = T(0.3989422804014327) * std::exp(T(-0.5) * x * x);
  return dy * (cdf + x * pdf);
}
// Gelu, tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
template <typename T>
ORTM_HOST_DEVICE T gelu_tanh(T x) {
  const T u = T(0.7978845608028654) * (x + T(0.044715) * x * x * x);
  return T(0.5) * x * (T(1) + std::tanh(u));
}
template <typename T>
ORTM_HOST_DEVICE T gelu_tanh_grad(T dy, T x) {
  const T u = T(0.7978845608028654) * (x + T(0.044715) * x * x * x);
  const T t = std::tanh(u);
  const T du = T(0.7978845608028654) * (T(1) + T(3) * T(0.044715) * x * x);
  return dy * (T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t * t) * du);
}

// Softplus log(1 + e^x), stable for large |x|.
template <typename T>
ORTM_HOST_DEVICE T softplus(T x) {
  return x > T(0) ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x));
}

// Sign: -1, 0 or 1 in the input's type; NaN stays NaN.
template <typename T>
ORTM_HOST_DEVICE T sign(T v) {
  if constexpr (std::is_unsigned_v<T>) {
    return static_cast<T>(v > T(0) ? 1 : 0);
  } else {
    if (v != v) return v;  // NaN
    return static_cast<T>(v > T(0) ? 1 : (v < T(0) ? -1 : 0));
  }
}

// torch.nn.functional.hardtanh's gradient: strictly inside the bounds only.
template <typename T>
ORTM_HOST_DEVICE T clip_grad_exclusive(T dy, T x, T lo, T hi) {
  return (x > lo && x < hi) ? dy : T(0);
}

// Clip: min(max(v, lo), hi); with lo > hi every element becomes hi (numpy.clip); NaN stays.
template <typename T>
ORTM_HOST_DEVICE T clip(T v, T lo, T hi) {
  const T t = v < lo ? lo : v;
  return t > hi ? hi : t;
}

// Max and Min of two values; NaN propagates, as in torch.maximum and the ONNX reference.
template <typename T>
ORTM_HOST_DEVICE T maximum(T p, T q) {
  return (p != p || p > q) ? p : q;
}
template <typename T>
ORTM_HOST_DEVICE T minimum(T p, T q) {
  return (p != p || p < q) ? p : q;
}

// Div(p, q). Integers truncate toward zero (ONNX Div, C++); the one overflowing case,
// lowest / -1, wraps to lowest as numpy's does instead of trapping. Integer q must not be 0
// (callers check).
template <typename T>
ORTM_HOST_DEVICE T div_trunc(T p, T q) {
  if constexpr (std::is_integral_v<T> && std::is_signed_v<T>) {
    if (q == T(-1)) return static_cast<T>(T(0) - static_cast<std::make_unsigned_t<T>>(p));
  }
  return static_cast<T>(p / q);
}

// Mod(p, q; fmod). fmod=1: truncated quotient (C fmod, the dividend's sign); fmod=0:
// floored quotient (Python %, the divisor's sign). Integer q must not be 0 (callers check).
template <typename T>
ORTM_HOST_DEVICE T mod(T p, T q, bool fmod) {
  if constexpr (std::is_floating_point_v<T>) {
    T r = std::fmod(p, q);
    if (fmod) return r;
    // numpy.mod: the sign of the divisor, zero included.
    if (r == 0) return std::copysign(T(0), q);
    return (r < 0) != (q < 0) ? r + q : r;
  } else if constexpr (std::is_signed_v<T>) {
    if (q == T(-1)) return T(0);                                             // lowest % -1 traps
    T r = static_cast<T>(p % q);                                             // the dividend's sign
    if (!fmod && r != 0 && ((r < 0) != (q < 0))) r = static_cast<T>(r + q);  // the divisor's
    return r;
  } else {
    return static_cast<T>(p % q);
  }
}

// IsInf(v; detect_positive, detect_negative).
template <typename T>
ORTM_HOST_DEVICE bool is_inf(T v, bool positive, bool negative) {
  return std::isinf(v) && ((v > 0 && positive) || (v < 0 && negative));
}

// Pow of a float base: with an exponent of the base's dtype holding one value, the fast paths
// models hit (x**2 in norms, x**1 in its gradient, x**3 in GPT-2's tanh GELU, x**0.5) skip
// std::pow (x**3 as (x * x) * x, as PyTorch computes it); an exponent of another dtype
// computes in double, as numpy promotes, and rounds once to T.
template <typename T>
ORTM_HOST_DEVICE T pow_fast(T p, T e) {
  if (e == T(1)) return p;
  if (e == T(2)) return p * p;
  if (e == T(3)) return p * p * p;
  if (e == T(0.5)) return std::sqrt(p);
  return std::pow(p, e);
}
// The largest and lowest values of an integer type (host and device alike).
template <typename I>
ORTM_HOST_DEVICE I int_max() {
  using U = std::make_unsigned_t<I>;
  return static_cast<I>(std::is_signed_v<I> ? static_cast<U>(static_cast<U>(~U(0)) >> 1)
                                            : static_cast<U>(~U(0)));
}
template <typename I>
ORTM_HOST_DEVICE I int_lowest() {
  if constexpr (std::is_signed_v<I>) {
    return static_cast<I>(-int_max<I>() - 1);
  } else {
    return I(0);
  }
}

// A double into an integer type, saturating: out-of-range results (and NaN, which gives 0)
// have no integer value, and C++ leaves converting them undefined.
template <typename I>
ORTM_HOST_DEVICE I saturate_to_int(double r) {
  return r != r                                      ? I(0)
         : r <= static_cast<double>(int_lowest<I>()) ? int_lowest<I>()
         : r >= static_cast<double>(int_max<I>())    ? int_max<I>()
                                                     : static_cast<I>(r);
}

// Pow with an integer base or operands of different dtypes: numpy computes in double as soon
// as a float is involved, and the result is cast to the base's dtype (saturating for integers).
template <typename T>
ORTM_HOST_DEVICE T pow_promoted(T p, double e) {
  const double r = std::pow(static_cast<double>(p), e);
  if constexpr (std::is_integral_v<T>) {
    return saturate_to_int<T>(r);
  } else {
    return static_cast<T>(r);
  }
}

// Integer power by squaring, wrapping around like numpy's integer power: it runs in an
// unsigned type at least as wide as int, where overflow is defined. The exponent is exact
// (callers refuse negative ones), so uint64 exponents above INT64_MAX work too.
template <typename T>
ORTM_HOST_DEVICE T int_pow(T base, uint64_t e) {
  using W = std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, std::make_unsigned_t<T>>;
  W result = 1, b = static_cast<W>(base);
  for (; e > 0; e >>= 1) {
    if (e & 1) result = static_cast<W>(result * b);
    b = static_cast<W>(b * b);
  }
  return static_cast<T>(result);
}

}  // namespace math
}  // namespace ortmodule
