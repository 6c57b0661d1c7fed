// IEEE float16 <-> float / double conversion, shared by the CPU loops and the CUDA kernels.
// Rounding is to nearest, ties to even, straight from the source precision (a double is
// not rounded to float first), as numpy and torch convert.
#pragma once

#include <cstdint>
#include <cstring>

#include "kernels/math/host_device.h"

namespace ortmodule {
namespace math {

ORTM_HOST_DEVICE float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0x1fu) {
    bits = sign | 0x7f800000u | (man << 13);  // inf, NaN (payload kept)
  } else if (exp != 0) {
    bits = sign | ((exp + 112u) << 23) | (man << 13);  // 112 = 127 - 15
  } else if (man == 0) {
    bits = sign;  // signed zero
  } else {
    // Subnormal: shift the mantissa up until its leading one is the implicit bit.
    exp = 113u;
    while ((man & 0x400u) == 0) {
      man <<= 1;
      --exp;
    }
    bits = sign | (exp << 23) | ((man & 0x3ffu) << 13);
  }
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

ORTM_HOST_DEVICE uint16_t double_to_half(double d) {
  uint64_t bits;
  std::memcpy(&bits, &d, sizeof(bits));
  const uint16_t sign = static_cast<uint16_t>((bits >> 48) & 0x8000u);
  const int64_t exp = static_cast<int64_t>((bits >> 52) & 0x7ffu);
  const uint64_t man = bits & 0xfffffffffffffull;
  if (exp == 0x7ff) {
    if (man == 0) return static_cast<uint16_t>(sign | 0x7c00u);  // inf
    // NaN: keep the top payload bits, and stay a (quiet) NaN.
    return static_cast<uint16_t>(sign | 0x7e00u | (man >> 42));
  }
  const int64_t e = exp - 1023 + 15;                            // biased float16 exponent
  if (e >= 0x1f) return static_cast<uint16_t>(sign | 0x7c00u);  // overflows to inf
  // The value's 53-bit significand (implicit one included) and how far it shifts down to
  // the float16 mantissa: 42 bits for normals, more for subnormals.
  if (exp == 0 || e < -10) return sign;  // below half the smallest subnormal: zero
  const uint64_t sig = man | (1ull << 52);
  const int shift = e >= 1 ? 42 : static_cast<int>(42 + 1 - e);
  uint64_t out = sig >> shift;
  const uint64_t rest = sig & ((1ull << shift) - 1);
  const uint64_t half = 1ull << (shift - 1);
  if (rest > half || (rest == half && (out & 1u))) ++out;  // nearest, ties to even
  // For normals `out` holds the implicit bit at 1 << 10, which the exponent field absorbs;
  // a carry out of the mantissa moves to the next exponent (or to inf) the same way.
  const uint64_t field = e >= 1 ? (static_cast<uint64_t>(e - 1) << 10) + out : out;
  return static_cast<uint16_t>(sign | static_cast<uint16_t>(field));
}

ORTM_HOST_DEVICE uint16_t float_to_half(float f) { return double_to_half(static_cast<double>(f)); }

}  // namespace math
}  // namespace ortmodule
