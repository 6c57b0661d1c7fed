// Where a tensor's memory lives: the host, or one CUDA device.
//
// The engine itself has no CUDA dependency. A build with CUDA kernels installs a
// CudaBackend (runtime/cuda_backend.cpp, compiled only into the CUDA build of the
// extension) that allocates from torch's CUDA caching allocator and copies on torch's
// current stream; without one, asking for CUDA memory fails with an error saying so.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace ortmodule {

enum class DeviceType : int8_t { CPU = 0, CUDA = 1 };

struct Device {
  DeviceType type = DeviceType::CPU;
  int index = 0;  // the CUDA ordinal; 0 on the host

  static Device cuda(int index) { return Device{DeviceType::CUDA, index}; }
  bool is_cpu() const { return type == DeviceType::CPU; }
  bool is_cuda() const { return type == DeviceType::CUDA; }
  bool operator==(const Device& o) const { return type == o.type && index == o.index; }
  bool operator!=(const Device& o) const { return !(*this == o); }
  // "cpu" or "cuda:N", as torch spells devices.
  std::string str() const;
};

struct Storage;

// What the engine needs from a CUDA runtime. Every operation is ordered on the device's
// current stream (torch's), so kernels, copies and frees stay in the order they were issued.
struct CudaBackend {
  // `bytes` of device memory on `device` (contents undefined), freed back to the caching
  // allocator when the storage is released.
  std::shared_ptr<Storage> (*allocate)(size_t bytes, int device);
  void (*zero)(void* data, size_t bytes, int device);
  // Copies between host and device or within a device; returns once `dst` may be read on
  // the host when it is host memory.
  void (*copy)(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes);
  int (*device_count)();  // devices the process sees (0 on a machine without a GPU)
};

// Installed once, at load time, by a build that has CUDA kernels.
void set_cuda_backend(const CudaBackend* backend);
// nullptr when this build has no CUDA kernels.
const CudaBackend* cuda_backend();
// The backend (never null), or an error that names `what` needed CUDA and says how to get a
// CUDA build. A pointer, not a reference: callers pass temporary strings, and a reference
// returned from a call with temporary arguments reads as dangling to GCC 13.
const CudaBackend* require_cuda_backend(const std::string& what);

}  // namespace ortmodule
