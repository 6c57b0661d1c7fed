// Per-element conversions of Cast/CastLike, shared by the CPU loops (ops/cast_ops.cpp,
// ops/cast_low_bit.cpp) and the CUDA kernels (kernels/cuda/cast.cu). numpy's astype
// semantics (what onnx.reference runs): float to integer truncates toward zero, x != 0
// makes bool, float16 and bfloat16 round to nearest even.
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

// Stores a loaded value `v` in destination type D.
template <typename D>
struct StoreAs {
  template <typename V>
  ORTM_HOST_DEVICE D operator()(V v) const {
    return static_cast<D>(v);
  }
};
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

// A floating value into an integer type where a low-bit type is involved: NaN gives 0, an
// infinity the type's limit, a finite value is truncated toward zero and keeps the type's
// low bits (as the onnx reference's ml_dtypes converts the low-bit floats; ONNX leaves
// out-of-range undefined).
template <typename I>
ORTM_HOST_DEVICE I float_to_int(double v) {
  if (v != v) return 0;
  if (v > 1.7976931348623157e308 || v < -1.7976931348623157e308)
    return v > 0 ? int_max<I>() : int_lowest<I>();
  if (v >= 9223372036854775808.0) return static_cast<I>(int_max<int64_t>());
  if (v < -9223372036854775808.0) return static_cast<I>(int_lowest<int64_t>());
  return static_cast<I>(static_cast<uint64_t>(static_cast<int64_t>(v)));
}

}  // namespace math
}  // namespace ortmodule
