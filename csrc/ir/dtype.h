// Element types. Values equal ONNX TensorProto.DataType so conversion is a cast.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace ortmodule {

enum class DType : int32_t {
  Undefined = 0,
  Float32 = 1,
  UInt8 = 2,
  Int8 = 3,
  UInt16 = 4,
  Int16 = 5,
  Int32 = 6,
  Int64 = 7,
  Bool = 9,
  Float16 = 10,
  Float64 = 11,
  UInt32 = 12,
  UInt64 = 13,
  BFloat16 = 16,
  // Low-bit types: Cast/CastLike convert to and from them, data movement ops copy them.
  // The engine stores one element per byte (the element's bit pattern in the low bits,
  // the rest zero, as ml_dtypes does); ONNX files pack the 4/2/6-bit ones (see
  // dtype_packed_bits). Math: kernels/math/float8.h.
  Float8E4M3FN = 17,
  Float8E4M3FNUZ = 18,
  Float8E5M2 = 19,
  Float8E5M2FNUZ = 20,
  UInt4 = 21,
  Int4 = 22,
  Float4E2M1 = 23,
  Float8E8M0 = 24,
  UInt2 = 25,
  Int2 = 26,
  Float6E2M3 = 27,
  Float6E3M2 = 28,
};

size_t dtype_size(DType t);
std::string dtype_name(DType t);
bool dtype_is_floating(DType t);
// One of the low-bit types above (Float8E4M3FN .. Float6E3M2).
bool dtype_is_low_bit(DType t);
// Bits per element in ONNX's packed storage (raw_data): 4, 2 or 6 for the sub-byte
// types, 8 * dtype_size for the others.
int dtype_packed_bits(DType t);
// float16 and bfloat16: stored in 16 bits, computed in float32 (passes/low_precision).
bool dtype_is_low_precision(DType t);
// Known to the engine (others are rejected at load time with a clear error).
bool dtype_is_supported(int32_t onnx_type);

}  // namespace ortmodule
