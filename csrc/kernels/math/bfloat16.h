// bfloat16 <-> float conversion (the upper 16 bits of an IEEE float32), shared by the CPU
// loops and the CUDA kernels.
#pragma once

#include <cstdint>
#include <cstring>

#include "kernels/math/host_device.h"

namespace ortmodule {
namespace math {

ORTM_HOST_DEVICE float bf16_to_float(uint16_t v) {
  uint32_t bits = static_cast<uint32_t>(v) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

// Round to nearest, ties to even, as torch does; NaN stays a (quiet) NaN.
ORTM_HOST_DEVICE uint16_t float_to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x0040u);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

}  // namespace math
}  // namespace ortmodule
