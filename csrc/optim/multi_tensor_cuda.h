// The CUDA twins of multi_tensor_adamw / multi_tensor_sgd (kernels/cuda/optim.cu).
//
// Declared weak, as the op table's CUDA kernels are (ops/cuda_ops.h): the CUDA build of the
// extension links their definitions, every other target links none, so their addresses are
// null there and cuda_multi_tensor_optimizers_linked() says so.
//
// Every buffer lives on CUDA device `device`. One launch per dtype updates all the tensors on
// torch's current stream of that device: the elements are cut into chunks whose (pointers,
// size, bias corrections) are copied to the device as one array, and each block of the
// kernel updates one chunk. Nothing waits for the device. The arithmetic is the CPU's with
// MultiplyAdd::kFused and the IEEE square root (kernels/math/optim.h): the GPU fuses every
// a*b + c as torch's CUDA kernels do, and its square root is correctly rounded.
#pragma once

#include <vector>

#include "optim/multi_tensor.h"

#define ORTM_CUDA_OPTIMIZER __attribute__((weak, visibility("hidden")))

namespace ortmodule {

// Throws std::invalid_argument as the CPU versions do (step below 1, missing buffers), and
// std::runtime_error when a launch fails.
ORTM_CUDA_OPTIMIZER void cuda_multi_tensor_adamw(const AdamWHyperParams& h, int device,
                                                 const std::vector<AdamWTensor<float>>& f32,
                                                 const std::vector<AdamWTensor<double>>& f64);
ORTM_CUDA_OPTIMIZER void cuda_multi_tensor_sgd(const SGDHyperParams& h, int device,
                                               const std::vector<SGDTensor<float>>& f32,
                                               const std::vector<SGDTensor<double>>& f64);

inline bool cuda_multi_tensor_optimizers_linked() {
  return &cuda_multi_tensor_adamw != nullptr && &cuda_multi_tensor_sgd != nullptr;
}

}  // namespace ortmodule
