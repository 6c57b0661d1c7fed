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

}  // namespace math
}  // namespace ortmodule
