// The engine's CUDA backend in the CUDA build of the extension: device memory from torch's
// CUDA caching allocator, work on torch's current stream. Installed when the extension
// loads (ir/device.h); nothing here runs on a machine without a GPU until a CUDA tensor
// reaches the engine.
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <memory>
#include <stdexcept>
#include <string>

#include "ir/tensor.h"
#include "kernels/cuda/cuda_common.h"

namespace ortmodule {
namespace cuda {

cudaStream_t stream(Device device) {
  const auto index = static_cast<c10::DeviceIndex>(device.index);
  if (c10::cuda::current_device() != index) c10::cuda::set_device(index);
  return c10::cuda::getCurrentCUDAStream(index).stream();
}

cublasHandle_t blas_handle(Device device) {
  stream(device);  // makes the device current: torch binds its handle to its current stream
  return at::cuda::getCurrentCUDABlasHandle();
}

cublasLtHandle_t blas_lt_handle(Device device) {
  stream(device);
  return at::cuda::getCurrentCUDABlasLtHandle();
}

void check_blas(cublasStatus_t status, const char* what) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  throw std::runtime_error(std::string(what) +
                           " failed in cuBLAS: " + cublasGetStatusString(status));
}

void check(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return;
  throw std::runtime_error(std::string(what) + " failed on the GPU: " + cudaGetErrorName(err) +
                           " (" + cudaGetErrorString(err) + ")");
}

}  // namespace cuda

namespace {

std::shared_ptr<Storage> allocate(size_t bytes, int device) {
  c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device));
  // The DataPtr returns the block to the caching allocator, ordered on the stream that was
  // current here (the one the engine's kernels use).
  auto block =
      std::make_shared<c10::DataPtr>(c10::cuda::CUDACachingAllocator::get()->allocate(bytes));
  auto storage = std::make_shared<Storage>(block->get(), bytes, [block](void*) {});
  storage->device = Device::cuda(device);
  return storage;
}

void zero(void* data, size_t bytes, int device) {
  cuda::check(cudaMemsetAsync(data, 0, bytes, cuda::stream(Device::cuda(device))),
              "cudaMemsetAsync");
}

void copy(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes) {
  const Device on = dst_device.is_cuda() ? dst_device : src_device;
  cudaStream_t s = cuda::stream(on);
  cuda::check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s), "cudaMemcpyAsync");
  // The host reads what it receives right away. A pageable host source has been staged
  // when cudaMemcpyAsync returns, so it may be freed then without a synchronization.
  if (dst_device.is_cpu()) cuda::check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
}

int device_count() { return static_cast<int>(c10::cuda::device_count()); }

const CudaBackend kBackend{allocate, zero, copy, device_count};

struct Install {
  Install() { set_cuda_backend(&kBackend); }
} install;

}  // namespace
}  // namespace ortmodule
