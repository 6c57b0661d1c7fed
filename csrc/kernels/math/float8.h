// Conversions between float/double/int64 and the low-bit ONNX element types: the float8
// formats, float4 e2m1, float6 e2m3/e3m2, float8 e8m0 (a power of two) and the 4-bit and
// 2-bit integers. Each element is one byte holding its bit pattern in the low bits.
//
// Rounding and special values follow ONNX's Cast (the tables in its description) and the
// onnx reference implementation (ml_dtypes): round to nearest, ties to even; with
// `saturate` an out-of-range value or an infinity becomes the largest finite value of its
// sign, without it an infinity (E5M2) or NaN (the other float8 formats). float4 and float6
// have neither infinities nor NaN: they always saturate, and NaN becomes a zero of the
// opposite sign (what ml_dtypes, and so the onnx reference, produces). float16 is the same
// scheme with 5 exponent and 10 mantissa bits, used where a low-bit type meets float16.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/math/host_device.h"

namespace ortmodule {
namespace math {

// How a format encodes what is not a finite number.
enum class MiniSpecials {
  Ieee,  // the all-ones exponent holds infinities (mantissa 0) and NaNs (E5M2, float16)
  Fn,    // no infinities; all ones (exponent and mantissa) is NaN (E4M3FN)
  Fnuz,  // no infinities, no negative zero; the negative-zero pattern is NaN (E4M3FNUZ, E5M2FNUZ)
  None,  // finite values only (float4 e2m1, float6 e2m3 / e3m2)
};

struct MiniFloat {
  int exp_bits;
  int man_bits;
  int bias;
  MiniSpecials specials;

  ORTM_HOST_DEVICE int width() const { return 1 + exp_bits + man_bits; }
  ORTM_HOST_DEVICE uint32_t sign_bit() const { return 1u << (exp_bits + man_bits); }
  // Largest finite magnitude's bit pattern.
  ORTM_HOST_DEVICE uint32_t max_finite() const {
    const uint32_t all = sign_bit() - 1;
    switch (specials) {
      case MiniSpecials::Ieee:
        return all - (1u << man_bits);  // exponent all ones minus one, mantissa all ones
      case MiniSpecials::Fn:
        return all - 1;
      case MiniSpecials::Fnuz:
      case MiniSpecials::None:
        return all;
    }
    return all;
  }
  ORTM_HOST_DEVICE uint32_t nan(bool negative) const {
    switch (specials) {
      case MiniSpecials::Ieee:  // quiet NaN: exponent all ones, top mantissa bit
        return (negative ? sign_bit() : 0) | (((1u << exp_bits) - 1) << man_bits) |
               (1u << (man_bits - 1));
      case MiniSpecials::Fn:
        return (negative ? sign_bit() : 0) | (sign_bit() - 1);
      case MiniSpecials::Fnuz:
        return sign_bit();
      case MiniSpecials::None:  // no NaN: a zero of the opposite sign, as ml_dtypes
        return negative ? 0 : sign_bit();
    }
    return 0;
  }
};

constexpr MiniFloat kFloat8E4M3FN{4, 3, 7, MiniSpecials::Fn};
constexpr MiniFloat kFloat8E4M3FNUZ{4, 3, 8, MiniSpecials::Fnuz};
constexpr MiniFloat kFloat8E5M2{5, 2, 15, MiniSpecials::Ieee};
constexpr MiniFloat kFloat8E5M2FNUZ{5, 2, 16, MiniSpecials::Fnuz};
constexpr MiniFloat kFloat4E2M1{2, 1, 1, MiniSpecials::None};
constexpr MiniFloat kFloat6E2M3{2, 3, 1, MiniSpecials::None};
constexpr MiniFloat kFloat6E3M2{3, 2, 3, MiniSpecials::None};
constexpr MiniFloat kFloat16{5, 10, 15, MiniSpecials::Ieee};

// A float from its bit pattern (NaN and infinities without <limits>, in device code too).
ORTM_HOST_DEVICE float float_from_bits(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}
// 2^k as a float, for k in the normal range [-126, 127].
ORTM_HOST_DEVICE float exp2_float(int k) {
  return float_from_bits(static_cast<uint32_t>(k + 127) << 23);
}

// The value of bit pattern `code` (exact: every format here fits in a float).
ORTM_HOST_DEVICE float minifloat_to_float(uint32_t code, const MiniFloat& f) {
  const bool negative = (code & f.sign_bit()) != 0;
  const uint32_t mag = code & (f.sign_bit() - 1);
  const uint32_t exp = mag >> f.man_bits;
  const uint32_t man = mag & ((1u << f.man_bits) - 1);
  const uint32_t exp_ones = (1u << f.exp_bits) - 1;
  float v;
  switch (f.specials) {
    case MiniSpecials::Ieee:
      if (exp == exp_ones) {
        v = float_from_bits(man ? 0x7fc00000u : 0x7f800000u);  // quiet NaN, infinity
        return negative ? -v : v;
      }
      break;
    case MiniSpecials::Fn:
      if (mag == f.sign_bit() - 1) return float_from_bits(negative ? 0xffc00000u : 0x7fc00000u);
      break;
    case MiniSpecials::Fnuz:
      if (code == f.sign_bit()) return float_from_bits(0xffc00000u);  // its sign bit is set
      break;
    case MiniSpecials::None:
      break;
  }
  if (exp == 0) {
    v = static_cast<float>(man) * exp2_float(1 - f.bias - f.man_bits);  // exact
  } else {
    v = static_cast<float>(man | (1u << f.man_bits)) *
        exp2_float(static_cast<int>(exp) - f.bias - f.man_bits);
  }
  return negative ? -v : v;
}

// Rounds x to the nearest value of format f (ties to even) and returns its bit pattern.
// `saturate`: see the top of the file; formats without infinities and NaN always saturate.
ORTM_HOST_DEVICE uint32_t double_to_minifloat(double x, const MiniFloat& f, bool saturate) {
  uint64_t bits;
  std::memcpy(&bits, &x, sizeof(bits));
  const bool negative = (bits >> 63) != 0;
  const uint32_t sign = negative ? f.sign_bit() : 0;
  const uint32_t zero = f.specials == MiniSpecials::Fnuz ? 0 : sign;  // FNUZ: no -0
  const int exp = static_cast<int>((bits >> 52) & 0x7ff);
  const uint64_t man = bits & ((uint64_t{1} << 52) - 1);
  if (exp == 0x7ff && man != 0) return f.nan(negative);
  // Overflow: an infinity, or a finite value that rounds past the largest finite one.
  auto overflow = [&]() -> uint32_t {
    if (saturate || f.specials == MiniSpecials::None) return sign | f.max_finite();
    if (f.specials == MiniSpecials::Ieee)
      return sign | (((1u << f.exp_bits) - 1) << f.man_bits);  // infinity
    return f.nan(negative);
  };
  if (exp == 0x7ff) return overflow();
  if (exp == 0) return zero;  // zero, or a double subnormal: far below every format's range
  const int e = exp - 1023;   // unbiased exponent of x
  const int emin = 1 - f.bias;
  const int emax = static_cast<int>(f.max_finite() >> f.man_bits) - f.bias;
  if (e > emax + 1) return overflow();
  // Significand with its leading one, shifted down to the format's precision at e (fewer
  // bits below emin: subnormals).
  const uint64_t sig = man | (uint64_t{1} << 52);
  const int shift = 52 - f.man_bits + (e < emin ? emin - e : 0);
  if (shift > 53) return zero;  // below half the smallest subnormal
  uint64_t q = sig >> shift;
  const uint64_t rem = sig & ((uint64_t{1} << shift) - 1);
  const uint64_t half = uint64_t{1} << (shift - 1);
  if (rem > half || (rem == half && (q & 1))) ++q;
  // Normal: q is in [2^m, 2^(m+1)] and the leading one lands in the exponent field (a
  // carry to 2^(m+1) bumps the exponent); subnormal: q is the mantissa, and q == 2^m is
  // the smallest normal.
  const uint64_t mag = e < emin ? q : (static_cast<uint64_t>(e + f.bias - 1) << f.man_bits) + q;
  if (mag > f.max_finite()) return overflow();
  if (mag == 0) return zero;
  return sign | static_cast<uint32_t>(mag);
}

ORTM_HOST_DEVICE uint16_t float_to_half_bits(float x) {
  return static_cast<uint16_t>(
      double_to_minifloat(x, MiniFloat{5, 10, 15, MiniSpecials::Ieee}, false));  // kFloat16
}
ORTM_HOST_DEVICE float half_bits_to_float(uint16_t h) {
  return minifloat_to_float(h, MiniFloat{5, 10, 15, MiniSpecials::Ieee});  // kFloat16
}

// float8 e8m0: eight exponent bits, no sign, no mantissa: 2^(code - 127); 0xff is NaN.
enum class E8M0Rounding { Up, Down, Nearest };

ORTM_HOST_DEVICE float e8m0_to_float(uint8_t code) {
  if (code == 0xff) return float_from_bits(0x7fc00000u);
  uint32_t bits = code == 0 ? 0x00400000u : static_cast<uint32_t>(code) << 23;  // 2^-127
  float v;
  std::memcpy(&v, &bits, sizeof(v));
  return v;
}

// The exponent of x (as a float32; its sign is ignored), rounded per `mode`. NaN and
// infinities give 0xff. `saturate` keeps a value rounding past 2^127 at 2^127 instead of
// turning it into NaN. This is the onnx reference's to_float8e8m0 step by step.
ORTM_HOST_DEVICE uint8_t float_to_e8m0(float x, bool saturate, E8M0Rounding mode) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof(bits));
  uint32_t exp = (bits >> 23) & 0xff;
  if (exp == 0xff) return 0xff;
  bool up = false;
  switch (mode) {
    case E8M0Rounding::Up:
      up = (bits & 0x7fffffu) != 0;
      break;
    case E8M0Rounding::Down:
      break;
    case E8M0Rounding::Nearest: {
      const bool guard = (bits & 0x400000u) != 0;
      const bool round = (bits & 0x200000u) != 0;
      const bool sticky = (bits & 0x1fffffu) != 0;
      up = guard && (round || sticky || exp > 0);
      break;
    }
  }
  if (up && !(saturate && exp == 0xfe)) ++exp;
  return static_cast<uint8_t>(exp);
}

// The 4-bit and 2-bit integers: `bits` wide, two's complement when `is_signed`; stored
// as the low bits of a byte.
ORTM_HOST_DEVICE int64_t small_int_value(uint8_t code, int bits, bool is_signed) {
  const int64_t v = code & ((1 << bits) - 1);
  return is_signed && v >= (int64_t{1} << (bits - 1)) ? v - (int64_t{1} << bits) : v;
}

// An integer keeps its low bits (ONNX's rule for a fixed-point type out of range).
ORTM_HOST_DEVICE uint8_t int_to_small_int(int64_t v, int bits) {
  return static_cast<uint8_t>(static_cast<uint64_t>(v) & ((1u << bits) - 1));
}

}  // namespace math
}  // namespace ortmodule
