#include "ir/tensor.h"

#include <cstdint>
#include <cstring>
#include <stdexcept>

#include "base/allocator.h"
#include "kernels/math/bfloat16.h"
#include "kernels/math/float16.h"

namespace ortmodule {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::Float32:
    case DType::Int32:
    case DType::UInt32:
      return 4;
    case DType::Float64:
    case DType::Int64:
    case DType::UInt64:
      return 8;
    case DType::Float16:
    case DType::BFloat16:
    case DType::Int16:
    case DType::UInt16:
      return 2;
    case DType::UInt8:
    case DType::Int8:
    case DType::Bool:
      return 1;
    default:
      return dtype_is_low_bit(t) ? 1 : 0;
  }
}

std::string dtype_name(DType t) {
  switch (t) {
    case DType::Float32:
      return "float32";
    case DType::Float64:
      return "float64";
    case DType::Float16:
      return "float16";
    case DType::BFloat16:
      return "bfloat16";
    case DType::Int64:
      return "int64";
    case DType::Int32:
      return "int32";
    case DType::Int16:
      return "int16";
    case DType::UInt64:
      return "uint64";
    case DType::UInt32:
      return "uint32";
    case DType::UInt16:
      return "uint16";
    case DType::Int8:
      return "int8";
    case DType::UInt8:
      return "uint8";
    case DType::Bool:
      return "bool";
    case DType::Float8E4M3FN:
      return "float8e4m3fn";
    case DType::Float8E4M3FNUZ:
      return "float8e4m3fnuz";
    case DType::Float8E5M2:
      return "float8e5m2";
    case DType::Float8E5M2FNUZ:
      return "float8e5m2fnuz";
    case DType::UInt4:
      return "uint4";
    case DType::Int4:
      return "int4";
    case DType::Float4E2M1:
      return "float4e2m1";
    case DType::Float8E8M0:
      return "float8e8m0";
    case DType::UInt2:
      return "uint2";
    case DType::Int2:
      return "int2";
    case DType::Float6E2M3:
      return "float6e2m3";
    case DType::Float6E3M2:
      return "float6e3m2";
    default:
      return "undefined";
  }
}

bool dtype_is_floating(DType t) {
  return t == DType::Float32 || t == DType::Float64 || t == DType::Float16 || t == DType::BFloat16;
}

bool dtype_is_low_bit(DType t) {
  const auto v = static_cast<int32_t>(t);
  return v >= static_cast<int32_t>(DType::Float8E4M3FN) &&
         v <= static_cast<int32_t>(DType::Float6E3M2);
}

int dtype_packed_bits(DType t) {
  switch (t) {
    case DType::UInt4:
    case DType::Int4:
    case DType::Float4E2M1:
      return 4;
    case DType::UInt2:
    case DType::Int2:
      return 2;
    case DType::Float6E2M3:
    case DType::Float6E3M2:
      return 6;
    default:
      return static_cast<int>(8 * dtype_size(t));
  }
}
bool dtype_is_low_precision(DType t) { return t == DType::Float16 || t == DType::BFloat16; }

bool dtype_is_supported(int32_t onnx_type) {
  if (dtype_is_low_bit(static_cast<DType>(onnx_type))) return true;
  switch (static_cast<DType>(onnx_type)) {
    case DType::Float32:
    case DType::Float64:
    case DType::Float16:
    case DType::BFloat16:
    case DType::Int64:
    case DType::Int32:
    case DType::Int16:
    case DType::Int8:
    case DType::UInt64:
    case DType::UInt32:
    case DType::UInt16:
    case DType::UInt8:
    case DType::Bool:
      return true;
    default:
      return false;
  }
}

int64_t shape_numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

int64_t shape_numel_checked(const Shape& s) {
  int64_t n = 1;
  // The product of the non-zero dims must fit too: kernels compute strides and partial
  // products of an empty tensor's shape as well.
  bool empty = false;
  for (int64_t d : s) {
    if (d < 0) return -1;
    if (d == 0) {
      empty = true;
      continue;
    }
    if (n > INT64_MAX / d) return -1;
    n *= d;
  }
  return empty ? 0 : n;
}

size_t tensor_bytes_checked(int64_t numel, DType dtype) {
  const size_t elem = dtype_size(dtype);
  if (numel < 0 || (elem && static_cast<uint64_t>(numel) > SIZE_MAX / elem)) return SIZE_MAX;
  return static_cast<size_t>(numel) * elem;
}

std::string shape_str(const Shape& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(s[i]);
  }
  return out + "]";
}

Tensor Tensor::empty(DType dtype, const Shape& shape, Device device) {
  const int64_t numel = shape_numel_checked(shape);
  if (numel < 0) {
    throw std::runtime_error("cannot allocate a tensor of shape " + shape_str(shape) +
                             ": dimensions must be non-negative and their product must fit "
                             "in int64 (it would overflow)");
  }
  size_t bytes = tensor_bytes_checked(numel, dtype);
  if (device.is_cuda()) {
    const CudaBackend& cuda = *require_cuda_backend("a tensor on " + device.str());
    return Tensor(cuda.allocate(bytes, device.index), dtype, shape);
  }
  return Tensor(allocate_storage(bytes), dtype, shape);
}

Tensor Tensor::zeros(DType dtype, const Shape& shape, Device device) {
  Tensor t = empty(dtype, shape, device);
  if (!t.nbytes()) return t;
  if (device.is_cuda())
    cuda_backend()->zero(t.raw(), t.nbytes(), device.index);
  else
    std::memset(t.raw(), 0, t.nbytes());
  return t;
}

Tensor Tensor::to(Device device) const {
  if (!defined() || this->device() == device) return *this;
  const CudaBackend& cuda = *require_cuda_backend("copying a tensor from " + this->device().str() +
                                                  " to " + device.str());
  Tensor copy = empty(dtype_, shape_, device);
  if (nbytes()) cuda.copy(copy.raw(), device, raw(), this->device(), nbytes());
  return copy;
}

Tensor Tensor::opaque(std::shared_ptr<void> handle) {
  auto storage = std::make_shared<Storage>(nullptr, 0, nullptr);
  storage->handle = std::move(handle);
  storage->writable = false;
  return Tensor(std::move(storage), DType::UInt8, {0});
}

const std::shared_ptr<void>& Tensor::handle() const {
  static const std::shared_ptr<void> none;
  return storage_ ? storage_->handle : none;
}

Tensor Tensor::view(const Shape& shape) const {
  if (shape_numel_checked(shape) != numel()) {
    throw std::runtime_error("cannot view a tensor of shape " + shape_str(shape_) + " as " +
                             shape_str(shape));
  }
  return Tensor(storage_, dtype_, shape);
}

void copy_tensor_data(const Tensor& dst, const Tensor& src) {
  if (dst.device().is_cpu() && src.device().is_cpu()) {
    std::memcpy(dst.raw(), src.raw(), src.nbytes());
    return;
  }
  require_cuda_backend("copying from " + src.device().str() + " to " + dst.device().str())
      ->copy(dst.raw(), dst.device(), src.raw(), src.device(), src.nbytes());
}

namespace {
// Float to int64 without undefined behaviour: NaN is 0, out-of-range values saturate.
int64_t saturate_to_int64(double v) {
  if (v != v) return 0;
  if (v >= 9.2233720368547758e18) return INT64_MAX;
  if (v <= -9.2233720368547758e18) return INT64_MIN;
  return static_cast<int64_t>(v);
}
}  // namespace

namespace {
void expect_host(const Tensor& t, int64_t i) {
  if (t.device().is_cuda()) {
    throw std::logic_error("internal error: reading element " + std::to_string(i) +
                           " of a tensor on " + t.device().str() +
                           " on the host; the op must list that input as read on the host");
  }
}
}  // namespace

int64_t Tensor::int_at(int64_t i) const {
  expect_host(*this, i);
  switch (dtype_) {
    case DType::Int64:
      return data<int64_t>()[i];
    case DType::Int32:
      return data<int32_t>()[i];
    case DType::Float32:
      return saturate_to_int64(data<float>()[i]);
    case DType::Float64:
      return saturate_to_int64(data<double>()[i]);
    case DType::Bool:
    case DType::UInt8:
      return data<uint8_t>()[i];
    case DType::Int8:
      return data<int8_t>()[i];
    case DType::Int16:
      return data<int16_t>()[i];
    case DType::UInt16:
      return data<uint16_t>()[i];
    case DType::UInt32:
      return data<uint32_t>()[i];
    case DType::UInt64:
      return static_cast<int64_t>(data<uint64_t>()[i]);
    case DType::Float16:
    case DType::BFloat16:
      return saturate_to_int64(float_at(i));
    default:
      throw std::runtime_error("int_at: unsupported dtype " + dtype_name(dtype_));
  }
}

double Tensor::float_at(int64_t i) const {
  expect_host(*this, i);
  switch (dtype_) {
    case DType::Float32:
      return data<float>()[i];
    case DType::Float64:
      return data<double>()[i];
    case DType::Float16:
      return math::half_to_float(data<uint16_t>()[i]);
    case DType::BFloat16:
      return math::bf16_to_float(data<uint16_t>()[i]);
    case DType::UInt64:
      return static_cast<double>(data<uint64_t>()[i]);
    default:
      return static_cast<double>(int_at(i));
  }
}

std::vector<int64_t> Tensor::to_int_vector() const {
  std::vector<int64_t> v(static_cast<size_t>(numel()));
  for (int64_t i = 0; i < numel(); ++i) v[i] = int_at(i);
  return v;
}

}  // namespace ortmodule
