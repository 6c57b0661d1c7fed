// Per-element conversions of Cast/CastLike, shared by the CPU loops (ops/cast_ops.cpp,
// ops/cast_low_bit.cpp) and the CUDA kernels (backends/cuda/cast.cu). As numpy's astype
// (what onnx.reference runs) wherever ONNX defines the result: float to integer truncates
// toward zero, x != 0 makes bool, float16 and bfloat16 round to nearest even; a float out
// of an integer type's range follows float_to_int_bits's rule.
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/math/bfloat16.h"
#include "kernels/math/elementwise.h"
#include "kernels/math/float16.h"
#include "kernels/math/host_device.h"

namespace ortmodule {
namespace math {

struct StoreFloat16 {
  template <typename V>
  ORTM_HOST_DEVICE uint16_t operator()(V v) const {
    return double_to_half(static_cast<double>(v));
  }
};
struct StoreBFloat16 {
  template <typename V>
  ORTM_HOST_DEVICE uint16_t operator()(V v) const {
    return float_to_bf16(static_cast<float>(v));
  }
};
struct StoreBool {
  template <typename V>
  ORTM_HOST_DEVICE uint8_t operator()(V v) const {
    return static_cast<uint8_t>(v != V(0));
  }
};

// A floating value into an integer type of `bits` bits (2 to 64), as docs/behaviour.md
// ("Float to integer") defines it: inside the type's range the value truncated toward zero
// (what ONNX defines); outside it, where ONNX leaves the result undefined, NaN gives 0, an
// infinity the type's limit of its sign, and a finite value is truncated toward zero and
// wraps modulo 2^bits (keeps the low bits of its two's complement, as an integer that does
// not fit does). Returns those low `bits` bits.
ORTM_HOST_DEVICE uint64_t float_to_int_bits(double v, int bits, bool is_signed) {
  const uint64_t mask = bits >= 64 ? ~uint64_t{0} : (uint64_t{1} << bits) - 1;
  if (v != v) return 0;
  if (v > 1.7976931348623157e308) return is_signed ? mask >> 1 : mask;
  if (v < -1.7976931348623157e308) return is_signed ? (mask >> 1) + 1 : 0;
  uint64_t u;
  if (v > -9223372036854775808.0 && v < 9223372036854775808.0) {
    u = static_cast<uint64_t>(static_cast<int64_t>(v));
  } else {
    // |v| >= 2^63 is an integer: its remainder modulo 2^64 is exact, and below 2^64.
    const double r = std::fmod(v, 18446744073709551616.0);
    u = r >= 0 ? static_cast<uint64_t>(r) : uint64_t{0} - static_cast<uint64_t>(-r);
  }
  return u & mask;
}

template <typename I>
ORTM_HOST_DEVICE I float_to_int(double v) {
  return static_cast<I>(float_to_int_bits(v, 8 * sizeof(I), std::is_signed<I>::value));
}

// Stores a loaded value `v` in destination type D (a floating value into an integer type
// by float_to_int's rule).
template <typename D>
struct StoreAs {
  template <typename V>
  ORTM_HOST_DEVICE D operator()(V v) const {
    if constexpr (std::is_integral<D>::value && std::is_floating_point<V>::value) {
      return float_to_int<D>(static_cast<double>(v));
    } else {
      return static_cast<D>(v);
    }
  }
};

}  // namespace math
}  // namespace ortmodule
