// What the CUDA kernels share: the stream they run on, error checks and launch sizes.
// Host code only (includable from .cu and .cpp files of the CUDA build); the stream and
// handles come from torch (runtime/cuda_backend.cpp), so the kernels carry no torch headers.
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "base/device.h"

namespace ortmodule {
namespace cuda {

// Makes `device` current and returns torch's current stream on it: every kernel of a step
// is launched there, so it is ordered with torch's own work and the caching allocator's
// frees.
cudaStream_t stream(Device device);

// torch's cuBLAS handle for `device`, bound to stream(device). Its math mode follows
// torch.backends.cuda.matmul.allow_tf32 (TF32 only when the user opts in there).
cublasHandle_t blas_handle(Device device);
void check_blas(cublasStatus_t status, const char* what);
// torch's cuBLASLt handle for `device` (the products with a bias epilogue,
// backends/cuda/lt_gemm.cu).
cublasLtHandle_t blas_lt_handle(Device device);

// Throws std::runtime_error naming `what` and the CUDA error when `err` is not cudaSuccess.
void check(cudaError_t err, const char* what);
// After a launch: reports a failed launch (bad configuration, no kernel image for the
// device) by the kernel's name.
inline void check_launch(const char* kernel) { check(cudaGetLastError(), kernel); }

constexpr int kThreads = 256;
// Dims the broadcasting and reduction kernels index (their index structs are passed by value).
constexpr int kMaxRank = 8;
// Blocks for a grid-stride loop over n elements (at least 1; grids stay well under the
// 2^31 - 1 limit and the loop covers the rest).
inline unsigned blocks_for(int64_t n) {
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(std::clamp<int64_t>(blocks, 1, int64_t(1) << 20));
}

}  // namespace cuda
}  // namespace ortmodule
