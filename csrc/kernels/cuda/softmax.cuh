// Softmax and log-softmax kernels over the [outer, dim, inner] layout, forward and backward,
// shared by softmax.cu (Softmax, LogSoftmax and their gradients) and loss.cu
// (SoftmaxCrossEntropyLoss). Device code: .cu files only.
//
// inner == 1 (rows): one block per row, max and sum by warp shuffles and a shared-memory
// step across warps. inner > 1: one thread per (outer, inner) column, walking the axis with
// stride `inner` (reads of consecutive threads are consecutive). The gradient formulas are
// kernels/math/softmax.h, as on the CPU.
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/cuda/block_reduce.cuh"
#include "kernels/math/softmax.h"

namespace ortmodule {
namespace cuda {
// Internal to each including file: every .cu gets its own copies of the kernels (no template
// kernel shared across translation units and their separately registered device images).
namespace {

// float accumulates in float, double in double.
template <typename T>
__global__ void __launch_bounds__(kRowThreads)
    softmax_rows(int64_t outer, int64_t dim, const T* x, T* y, bool log) {
  __shared__ T shared[kWarp];
  for (int64_t row = blockIdx.x; row < outer; row += gridDim.x) {
    const T* xr = x + row * dim;
    T* yr = y + row * dim;
    T m = -INFINITY;
    for (int64_t k = threadIdx.x; k < dim; k += blockDim.x) m = MaxOp()(m, xr[k]);
    m = block_reduce(m, MaxOp(), T(-INFINITY), shared);
    T s = 0;
    for (int64_t k = threadIdx.x; k < dim; k += blockDim.x) s += std::exp(xr[k] - m);
    s = block_reduce(s, SumOp(), T(0), shared);
    if (log) {
      const T log_sum = std::log(s);
      for (int64_t k = threadIdx.x; k < dim; k += blockDim.x) yr[k] = (xr[k] - m) - log_sum;
    } else {
      const T inv_sum = T(1) / s;
      for (int64_t k = threadIdx.x; k < dim; k += blockDim.x) yr[k] = std::exp(xr[k] - m) * inv_sum;
    }
  }
}

template <typename T>
__global__ void softmax_columns(int64_t outer, int64_t dim, int64_t inner, const T* x, T* y,
                                bool log) {
  const int64_t columns = outer * inner;
  const int64_t step = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < columns;
       c += step) {
    const int64_t base = (c / inner) * dim * inner + c % inner;
    T m = -INFINITY;
    for (int64_t d = 0; d < dim; ++d) m = MaxOp()(m, x[base + d * inner]);
    T s = 0;
    for (int64_t d = 0; d < dim; ++d) s += std::exp(x[base + d * inner] - m);
    const T log_sum = std::log(s), inv_sum = T(1) / s;
    for (int64_t d = 0; d < dim; ++d) {
      const T v = x[base + d * inner] - m;
      y[base + d * inner] = log ? v - log_sum : std::exp(v) * inv_sum;
    }
  }
}

// s = sum(dy * y) for softmax, sum(dy) for log-softmax; dx from kernels/math/softmax.h.
template <typename T>
__device__ T grad_term(T dy, T y, bool log) {
  return log ? dy : dy * y;
}
template <typename T>
__device__ T grad_value(T dy, T y, T s, bool log) {
  return log ? log_softmax_grad(dy, y, s) : softmax_grad(dy, y, s);
}

template <typename T>
__global__ void __launch_bounds__(kRowThreads)
    softmax_grad_rows(int64_t outer, int64_t dim, const T* dy, const T* y, T* dx, bool log) {
  __shared__ T shared[kWarp];
  for (int64_t row = blockIdx.x; row < outer; row += gridDim.x) {
    const int64_t off = row * dim;
    T s = 0;
    for (int64_t k = threadIdx.x; k < dim; k += blockDim.x)
      s += grad_term(dy[off + k], y[off + k], log);
    s = block_reduce(s, SumOp(), T(0), shared);
    for (int64_t k = threadIdx.x; k < dim; k += blockDim.x)
      dx[off + k] = grad_value(dy[off + k], y[off + k], s, log);
  }
}

template <typename T>
__global__ void softmax_grad_columns(int64_t outer, int64_t dim, int64_t inner, const T* dy,
                                     const T* y, T* dx, bool log) {
  const int64_t columns = outer * inner;
  const int64_t step = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < columns;
       c += step) {
    const int64_t base = (c / inner) * dim * inner + c % inner;
    T s = 0;
    for (int64_t d = 0; d < dim; ++d)
      s += grad_term(dy[base + d * inner], y[base + d * inner], log);
    for (int64_t d = 0; d < dim; ++d) {
      const int64_t i = base + d * inner;
      dx[i] = grad_value(dy[i], y[i], s, log);
    }
  }
}

// y = (log_)softmax(x) along dim of [outer, dim, inner]; launches nothing for an empty tensor.
template <typename T>
void launch_softmax_layout(cudaStream_t stream, int64_t outer, int64_t dim, int64_t inner,
                           const T* x, T* y, bool log) {
  if (outer == 0 || dim == 0 || inner == 0) return;
  if (inner == 1) {
    softmax_rows<T><<<row_blocks(outer), kRowThreads, 0, stream>>>(outer, dim, x, y, log);
  } else {
    softmax_columns<T>
        <<<blocks_for(outer * inner), kThreads, 0, stream>>>(outer, dim, inner, x, y, log);
  }
  check_launch(log ? "LogSoftmax" : "Softmax");
}

// dx from dy and the forward output y; dx may alias dy (each element is read by the thread
// that writes it, after the row's sum).
template <typename T>
void launch_softmax_grad_layout(cudaStream_t stream, int64_t outer, int64_t dim, int64_t inner,
                                const T* dy, const T* y, T* dx, bool log) {
  if (outer == 0 || dim == 0 || inner == 0) return;
  if (inner == 1) {
    softmax_grad_rows<T><<<row_blocks(outer), kRowThreads, 0, stream>>>(outer, dim, dy, y, dx, log);
  } else {
    softmax_grad_columns<T>
        <<<blocks_for(outer * inner), kThreads, 0, stream>>>(outer, dim, inner, dy, y, dx, log);
  }
  check_launch(log ? "LogSoftmaxGrad" : "SoftmaxGrad");
}

}  // namespace
}  // namespace cuda
}  // namespace ortmodule
