// The floating-point representation functions torch.nextafter and torch.frexp, shared by the
// CPU loops and the CUDA kernels.
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/math/host_device.h"

namespace ortmodule {
namespace math {

// The representable value after a in the direction of b; b itself where a == b (so the
// sign of a zero b), NaN where either is.
template <typename T>
ORTM_HOST_DEVICE T next_after(T a, T b) {
  return std::nextafter(a, b);
}

// x = mantissa 2^exponent with |mantissa| in [0.5, 1); 0, infinities and NaN are their own
// mantissa with exponent 0.
template <typename T>
ORTM_HOST_DEVICE T frexp_mantissa(T x) {
  int exponent = 0;
  return std::frexp(x, &exponent);
}
template <typename T>
ORTM_HOST_DEVICE int32_t frexp_exponent(T x) {
  int exponent = 0;
  std::frexp(x, &exponent);
  return std::isfinite(x) ? static_cast<int32_t>(exponent) : 0;
}

}  // namespace math
}  // namespace ortmodule
