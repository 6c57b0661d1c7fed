// Per-element math shared by the CPU loops and the CUDA kernels.
#pragma once

#include <cmath>

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

}  // namespace math
}  // namespace ortmodule
