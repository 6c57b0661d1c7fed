// Per-element softmax / log-softmax gradient formulas shared by the CPU loops and the CUDA
// kernels. Both take the forward output y and one sum along the axis, so a kernel makes one
// reduction pass and one elementwise pass.
#pragma once

#include <cmath>

#include "kernels/math/host_device.h"

namespace ortmodule {

// y = softmax(x), s = sum_k(dy_k * y_k):  dx = y * (dy - s)
template <typename T>
ORTM_HOST_DEVICE T softmax_grad(T dy, T y, T s) {
  return y * (dy - s);
}

// y = log_softmax(x), s = sum_k(dy_k):  dx = dy - softmax * s, and softmax = exp(y).
template <typename T>
ORTM_HOST_DEVICE T log_softmax_grad(T dy, T y, T s) {
  using std::exp;
  return dy - exp(y) * s;
}

// ScaledMaskedSoftmax's input to the softmax: scale * x + mask.
template <typename T>
ORTM_HOST_DEVICE T scaled_masked(T x, T scale, T mask) {
  return x * scale + mask;
}

// ScaledMaskedSoftmax's input to the softmax with a boolean mask: scale * x where the mask
// keeps the element, the fill value where it does not (torch's masked attention scores).
template <typename T>
ORTM_HOST_DEVICE T scaled_or_fill(T x, T scale, bool keep, T fill) {
  return keep ? x * scale : fill;
}

}  // namespace ortmodule
