// SiluMul, the gated unit of Llama's MLP: y = silu(g) * u with silu(g) = g * sigmoid(g), and its
// gradients, given s = sigmoid(g) (shared by the CPU kernels, which take s from the vector
// sigmoid, and the CUDA twin). The order of the products is the unfused graph's: silu = g * s,
// then silu * u; du = dy * silu; dg = t * s + (t * g) * (s * (1 - s)) with t = dy * u (the
// gradients of Mul(g, s) and of the Sigmoid summed).
#pragma once

#include "kernels/math/elementwise.h"

namespace ortmodule {
namespace math {

template <typename T>
ORTM_HOST_DEVICE T silu_mul(T g, T u, T s) {
  return (g * s) * u;
}
template <typename T>
ORTM_HOST_DEVICE T silu_mul_grad_gate(T dy, T g, T u, T s) {
  const T t = dy * u;
  return t * s + (t * g) * (s * (T(1) - s));
}
template <typename T>
ORTM_HOST_DEVICE T silu_mul_grad_up(T dy, T g, T s) {
  return dy * (g * s);
}

}  // namespace math
}  // namespace ortmodule
