// Multi-tensor AdamW and SGD on a CUDA device (ortmodule.optim.FusedAdamW / FusedSGD on CUDA
// parameters): the twins of optim/multi_tensor.cpp, declared in optim/multi_tensor_cuda.h.
//
// As torch's multi_tensor_apply does, every tensor of a group is cut into chunks of at most
// kChunkElements; the chunks' pointers, sizes and per-tensor bias corrections go to the device
// as one array (an asynchronous copy from host memory on torch's current stream), and one
// launch per dtype updates them all: block k updates chunk k (a grid-stride loop over the
// chunks), its threads stride over the chunk's elements. Each element is read and written
// once, by one thread, so the results do not depend on the launch configuration.
//
// The per-element arithmetic is kernels/math/optim.h's, with FusedMulAdd and the IEEE
// square root: bitwise the CPU's FusedAdamW(match_torch_sqrt=False) / FusedSGD on a CPU with
// FMA.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "ir/tensor.h"
#include "kernels/cuda/cuda_common.h"
#include "kernels/math/optim.h"
#include "optim/multi_tensor_cuda.h"

namespace ortmodule {

namespace {

// Elements per chunk (per block): 128 per thread of a 256-thread block.
constexpr int64_t kChunkElements = 32768;
// Blocks per launch at most; the grid-stride loop covers any further chunks.
constexpr int64_t kMaxBlocks = int64_t(1) << 20;

// Shape: every pointer is the chunk's first element; numel <= kChunkElements.
template <typename T>
struct AdamWChunk {
  T* param;
  const T* grad;
  T* exp_avg;
  T* exp_avg_sq;
  T* max_exp_avg_sq;  // null without amsgrad
  int64_t numel;
  T step_size;  // the tensor's -(lr / (1 - beta1^t))
  T bc2_sqrt;   // the tensor's (1 - beta2^t)^0.5
};

template <typename T>
struct SGDChunk {
  T* param;
  const T* grad;
  T* momentum_buffer;  // null without momentum
  int64_t numel;
  bool first_step;  // the tensor's buffer is written as the gradient
};

template <typename T, bool kAmsgrad>
__global__ void adamw_chunks_kernel(AdamWScalars<T> s, const AdamWChunk<T>* chunks, int64_t count) {
  for (int64_t k = blockIdx.x; k < count; k += gridDim.x) {
    const AdamWChunk<T> c = chunks[k];
    for (int64_t i = threadIdx.x; i < c.numel; i += blockDim.x) {
      const T g = adamw_grad(s, c.grad[i]);
      const T m = adamw_exp_avg<FusedMulAdd>(s, g, c.exp_avg[i]);
      const T v = adamw_exp_avg_sq<FusedMulAdd>(s, g, c.exp_avg_sq[i]);
      T second = v;
      if constexpr (kAmsgrad) {
        second = nan_propagating_max(c.max_exp_avg_sq[i], v);
        c.max_exp_avg_sq[i] = second;
      }
      c.param[i] = adamw_param(s, c.step_size, c.bc2_sqrt, c.param[i], m, ieee_sqrt(second));
      c.exp_avg[i] = m;
      c.exp_avg_sq[i] = v;
    }
  }
}

template <typename T, bool kMomentum>
__global__ void sgd_chunks_kernel(SGDScalars<T> s, const SGDChunk<T>* chunks, int64_t count) {
  for (int64_t k = blockIdx.x; k < count; k += gridDim.x) {
    const SGDChunk<T> c = chunks[k];
    for (int64_t i = threadIdx.x; i < c.numel; i += blockDim.x) {
      T d = sgd_grad<FusedMulAdd>(s, c.grad[i], c.param[i]);
      if constexpr (kMomentum) {
        const T b = sgd_momentum_buffer<FusedMulAdd>(s, c.first_step, d, c.momentum_buffer[i]);
        c.momentum_buffer[i] = b;
        d = sgd_direction<FusedMulAdd>(s, d, b);
      }
      c.param[i] = sgd_param<FusedMulAdd>(s, c.param[i], d);
    }
  }
}

// make(offset, size) for each chunk of each tensor, in order.
template <typename Tensors, typename Make>
auto cut_into_chunks(const Tensors& tensors, const Make& make) {
  std::vector<decltype(make(tensors.front(), int64_t(0), int64_t(0)))> chunks;
  for (const auto& x : tensors) {
    for (int64_t b = 0; b < x.numel; b += kChunkElements) {
      chunks.push_back(make(x, b, std::min(kChunkElements, x.numel - b)));
    }
  }
  return chunks;
}

// The chunks in device memory of `device` from torch's caching allocator, filled by an
// asynchronous copy on the device's stream. The copy reads pageable host memory, which the
// driver has staged when cudaMemcpyAsync returns, so `chunks` may go right after. The
// returned tensor's memory goes back to the allocator when it dies, ordered on the same
// stream: after the kernel that reads it.
template <typename Chunk>
Tensor device_array(const std::vector<Chunk>& chunks, Device device, cudaStream_t stream,
                    const char* what) {
  const int64_t bytes = static_cast<int64_t>(chunks.size() * sizeof(Chunk));
  Tensor array = Tensor::empty(DType::UInt8, {bytes}, device);
  cuda::check(cudaMemcpyAsync(array.raw(), chunks.data(), static_cast<size_t>(bytes),
                              cudaMemcpyHostToDevice, stream),
              what);
  return array;
}

unsigned chunk_blocks(size_t count) {
  return static_cast<unsigned>(std::min<int64_t>(static_cast<int64_t>(count), kMaxBlocks));
}

template <typename T>
void launch_adamw(const AdamWHyperParams& h, Device device,
                  const std::vector<AdamWTensor<T>>& tensors) {
  const auto chunks = cut_into_chunks(tensors, [&](const AdamWTensor<T>& x, int64_t b, int64_t n) {
    const AdamWBiasCorrection<T> bc = adamw_bias_correction<T>(h.lr, h.beta1, h.beta2, x.step);
    return AdamWChunk<T>{x.param + b,
                         x.grad + b,
                         x.exp_avg + b,
                         x.exp_avg_sq + b,
                         h.amsgrad ? x.max_exp_avg_sq + b : nullptr,
                         n,
                         bc.step_size,
                         bc.bc2_sqrt};
  });
  if (chunks.empty()) return;
  const char* name = "FusedAdamW (CUDA multi-tensor kernel)";
  cudaStream_t stream = cuda::stream(device);
  const Tensor array = device_array(chunks, device, stream, name);
  const auto* d = static_cast<const AdamWChunk<T>*>(array.raw());
  const auto count = static_cast<int64_t>(chunks.size());
  const AdamWScalars<T> s =
      adamw_scalars<T>(h.lr, h.beta1, h.beta2, h.eps, h.weight_decay, h.maximize);
  if (h.amsgrad) {
    adamw_chunks_kernel<T, true>
        <<<chunk_blocks(chunks.size()), cuda::kThreads, 0, stream>>>(s, d, count);
  } else {
    adamw_chunks_kernel<T, false>
        <<<chunk_blocks(chunks.size()), cuda::kThreads, 0, stream>>>(s, d, count);
  }
  cuda::check_launch(name);
}

template <typename T>
void launch_sgd(const SGDHyperParams& h, Device device, const std::vector<SGDTensor<T>>& tensors) {
  const bool momentum = h.momentum != 0;
  const auto chunks = cut_into_chunks(tensors, [&](const SGDTensor<T>& x, int64_t b, int64_t n) {
    return SGDChunk<T>{x.param + b, x.grad + b, momentum ? x.momentum_buffer + b : nullptr, n,
                       x.first_step};
  });
  if (chunks.empty()) return;
  const char* name = "FusedSGD (CUDA multi-tensor kernel)";
  cudaStream_t stream = cuda::stream(device);
  const Tensor array = device_array(chunks, device, stream, name);
  const auto* d = static_cast<const SGDChunk<T>*>(array.raw());
  const auto count = static_cast<int64_t>(chunks.size());
  const SGDScalars<T> s =
      sgd_scalars<T>(h.lr, h.momentum, h.dampening, h.weight_decay, h.nesterov, h.maximize);
  if (momentum) {
    sgd_chunks_kernel<T, true>
        <<<chunk_blocks(chunks.size()), cuda::kThreads, 0, stream>>>(s, d, count);
  } else {
    sgd_chunks_kernel<T, false>
        <<<chunk_blocks(chunks.size()), cuda::kThreads, 0, stream>>>(s, d, count);
  }
  cuda::check_launch(name);
}

}  // namespace

void cuda_multi_tensor_adamw(const AdamWHyperParams& h, int device,
                             const std::vector<AdamWTensor<float>>& f32,
                             const std::vector<AdamWTensor<double>>& f64) {
  const char* op = "cuda_multi_tensor_adamw";
  check_adamw_tensors(op, h, f32);
  check_adamw_tensors(op, h, f64);
  launch_adamw(h, Device::cuda(device), f32);
  launch_adamw(h, Device::cuda(device), f64);
}

void cuda_multi_tensor_sgd(const SGDHyperParams& h, int device,
                           const std::vector<SGDTensor<float>>& f32,
                           const std::vector<SGDTensor<double>>& f64) {
  const char* op = "cuda_multi_tensor_sgd";
  check_sgd_tensors(op, h, f32);
  check_sgd_tensors(op, h, f64);
  launch_sgd(h, Device::cuda(device), f32);
  launch_sgd(h, Device::cuda(device), f64);
}

}  // namespace ortmodule
