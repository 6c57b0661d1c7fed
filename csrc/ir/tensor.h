// Engine tensor: a dense, contiguous, row-major block plus dtype and shape.
//
// Storage is reference counted so that views (Reshape, Squeeze, ...) share memory
// and a buffer returns to the allocator when its last user releases it. Storage
// can also wrap memory owned by someone else (a torch tensor): the deleter then
// drops that owner.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/device.h"
#include "base/storage.h"
#include "ir/dtype.h"

namespace ortmodule {

using Shape = std::vector<int64_t>;

int64_t shape_numel(const Shape& s);
// Elements of `s`, or -1 when a dim is negative or the product of the non-zero dims
// overflows int64 (so an empty tensor cannot have absurd other dims either).
int64_t shape_numel_checked(const Shape& s);
// Bytes of `numel` elements of `dtype`, or SIZE_MAX when that overflows size_t.
size_t tensor_bytes_checked(int64_t numel, DType dtype);
std::string shape_str(const Shape& s);

class Tensor {
 public:
  Tensor() = default;
  Tensor(std::shared_ptr<Storage> storage, DType dtype, Shape shape)
      : storage_(std::move(storage)), dtype_(dtype), shape_(std::move(shape)) {}

  // Allocates from the engine's caching allocator, or on a CUDA device from torch's
  // (contents undefined).
  static Tensor empty(DType dtype, const Shape& shape, Device device = Device());
  static Tensor zeros(DType dtype, const Shape& shape, Device device = Device());
  // An empty tensor that carries `handle` (see Storage::handle).
  static Tensor opaque(std::shared_ptr<void> handle);

  bool defined() const { return storage_ != nullptr; }
  DType dtype() const { return dtype_; }
  Device device() const { return storage_ ? storage_->device : Device(); }
  // A copy on `device` (this tensor itself when it is there already).
  Tensor to(Device device) const;
  const Shape& shape() const { return shape_; }
  int64_t dim(size_t i) const { return shape_[i]; }
  size_t rank() const { return shape_.size(); }
  int64_t numel() const { return shape_numel(shape_); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
  void* raw() const { return storage_ ? storage_->data : nullptr; }
  template <typename T>
  T* data() const {
    return static_cast<T*>(raw());
  }
  const std::shared_ptr<Storage>& storage() const { return storage_; }
  const std::shared_ptr<void>& handle() const;  // null unless made by opaque()
  // Same memory, other shape (numel must match).
  Tensor view(const Shape& shape) const;
  // Element i as double / int64 whatever the dtype (for small shape tensors).
  int64_t int_at(int64_t i) const;
  double float_at(int64_t i) const;
  std::vector<int64_t> to_int_vector() const;

 private:
  std::shared_ptr<Storage> storage_;
  DType dtype_ = DType::Undefined;
  Shape shape_;
};

// Copies src's bytes into dst (same byte size), across devices where they differ.
void copy_tensor_data(const Tensor& dst, const Tensor& src);

}  // namespace ortmodule
