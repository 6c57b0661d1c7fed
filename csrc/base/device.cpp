#include "base/device.h"

#include <atomic>
#include <stdexcept>

namespace ortmodule {

std::string Device::str() const {
  return is_cpu() ? std::string("cpu") : "cuda:" + std::to_string(index);
}

namespace {
std::atomic<const CudaBackend*>& backend_slot() {
  static std::atomic<const CudaBackend*> slot{nullptr};
  return slot;
}
}  // namespace

void set_cuda_backend(const CudaBackend* backend) { backend_slot().store(backend); }

const CudaBackend* cuda_backend() { return backend_slot().load(); }

const CudaBackend* require_cuda_backend(const std::string& what) {
  const CudaBackend* backend = cuda_backend();
  if (!backend) {
    throw std::runtime_error(what +
                             " needs CUDA, but this build of ortmodule has no CUDA kernels; "
                             "build it against a CUDA build of torch with nvcc on the PATH "
                             "(see README: make cuda-check), or keep the model on the CPU");
  }
  return backend;
}

}  // namespace ortmodule
