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
};

size_t dtype_size(DType t);
std::string dtype_name(DType t);
bool dtype_is_floating(DType t);
// float16 and bfloat16: stored in 16 bits, computed in float32 (passes/low_precision).
bool dtype_is_low_precision(DType t);
// Known to the engine (others are rejected at load time with a clear error).
bool dtype_is_supported(int32_t onnx_type);

}  // namespace ortmodule
