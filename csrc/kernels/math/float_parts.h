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

// next_after on the bits of a float16 (inf_bits 0x7c00) or bfloat16 (0x7f80): both are
// sign-magnitude, so a step away from zero adds 1 to the bits and a step towards it subtracts
// 1 (the smallest subnormal steps to a zero of its own sign, the largest finite to inf).
ORTM_HOST_DEVICE uint16_t next_after_bits16(uint16_t a, uint16_t b, uint16_t inf_bits) {
  const uint16_t a_mag = a & 0x7fff;
  const uint16_t b_mag = b & 0x7fff;
  if (a_mag > inf_bits) return a;
  if (b_mag > inf_bits) return b;
  if (a == b || (a_mag == 0 && b_mag == 0)) return b;
  if (a_mag == 0) return static_cast<uint16_t>((b & 0x8000) | 1);
  const int32_t a_key = a & 0x8000 ? -int32_t{a_mag} : int32_t{a_mag};
  const int32_t b_key = b & 0x8000 ? -int32_t{b_mag} : int32_t{b_mag};
  const bool away_from_zero = (a_key > 0) == (b_key > a_key);
  return static_cast<uint16_t>(away_from_zero ? a + 1 : a - 1);
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
