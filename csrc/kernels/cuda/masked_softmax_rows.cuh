// The row kernels of ScaledMaskedSoftmax and its gradient (attention.cu's ops and
// FusedAttention's softmax). Device code: .cu files only.
//
// Rows of up to kWarpRowMax elements (attention's key length) take one warp each, kRowThreads /
// kWarp rows per block, reduced by warp shuffles alone; longer rows take a block each. Each
// thread revisits only the elements it wrote. The per-element formulas (scaled_masked,
// softmax_grad) are kernels/math/softmax.h's, shared with the CPU; the forward's row sum
// accumulates in double as the CPU row does.
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/cuda/block_reduce.cuh"
#include "kernels/math/softmax.h"

namespace ortmodule {
namespace cuda {
// Internal to each including file (as softmax.cuh).
namespace {

constexpr int64_t kWarpRowMax = 1024;

// The value of op over the warp's 32 lanes, in every lane.
template <typename A, typename Op>
__device__ A warp_all(A v, Op op) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2)
    v = op(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// x_rows / mask_rows: the output's leading dims (all but the last) with each operand's
// broadcast strides, so row r of x starts at dims_offset(x_rows, r); x_step / mask_step: the
// operand's stride along the last dim (0 where it broadcasts there).
template <typename T>
__global__ void __launch_bounds__(kRowThreads)
    scaled_masked_softmax_rows(int64_t rows, int64_t dim, Dims x_rows, int64_t x_step,
                               Dims mask_rows, int64_t mask_step, T scale, const T* x,
                               const T* mask, const uint8_t* keep, T fill, T* y) {
  __shared__ T shared_max[kWarp];
  __shared__ double shared_sum[kWarp];
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* xr = x + dims_offset(x_rows, row);
    const T* mr = mask ? mask + dims_offset(mask_rows, row) : nullptr;
    const uint8_t* kr = keep ? keep + dims_offset(mask_rows, row) : nullptr;
    T* yr = y + row * dim;
    T m = -INFINITY;
    for (int64_t k = threadIdx.x; k < dim; k += blockDim.x) {
      const T v = kr   ? scaled_or_fill(xr[k * x_step], scale, kr[k * mask_step] != 0, fill)
                  : mr ? scaled_masked(xr[k * x_step], scale, mr[k * mask_step])
                       : xr[k * x_step] * scale;
      yr[k] = v;
      m = MaxOp()(m, v);
    }
    m = block_reduce(m, MaxOp(), T(-INFINITY), shared_max);
    double s = 0;
    for (int64_t k = threadIdx.x; k < dim; k += blockDim.x) s += std::exp(yr[k] - m);
    s = block_reduce(s, SumOp(), 0.0, shared_sum);
    const T inv_sum = static_cast<T>(1.0 / s);
    for (int64_t k = threadIdx.x; k < dim; k += blockDim.x) yr[k] = std::exp(yr[k] - m) * inv_sum;
  }
}

// dx = scale * softmax_grad(dy, y, sum(dy * y)) per row, 0 where keep (when given, rows
// and step as the forward's mask) drops the element; dx may alias dy.
template <typename T>
__global__ void __launch_bounds__(kRowThreads)
    scaled_masked_softmax_grad_rows(int64_t rows, int64_t dim, T scale, const T* dy, const T* y,
                                    Dims keep_rows, int64_t keep_step, const uint8_t* keep, T* dx) {
  __shared__ T shared[kWarp];
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const int64_t off = row * dim;
    T s = 0;
    for (int64_t k = threadIdx.x; k < dim; k += blockDim.x) s += dy[off + k] * y[off + k];
    s = block_reduce(s, SumOp(), T(0), shared);
    const uint8_t* kr = keep ? keep + dims_offset(keep_rows, row) : nullptr;
    for (int64_t k = threadIdx.x; k < dim; k += blockDim.x) {
      const T g = softmax_grad(dy[off + k], y[off + k], s);
      dx[off + k] = kr && !kr[k * keep_step] ? T(0) : scale == T(1) ? g : g * scale;
    }
  }
}

// The output's leading dims with the strides of `operand` broadcast to `out`, and the
// operand's stride along the last dim.
Dims row_dims(const Shape& operand, const Shape& out, int64_t* step) {
  const size_t rank = out.size();
  Dims d;
  d.rank = static_cast<int>(rank) - 1;
  int64_t k = 1;
  for (size_t i = rank; i-- > 0;) {
    const int64_t j = static_cast<int64_t>(i) - static_cast<int64_t>(rank - operand.size());
    const int64_t n = j >= 0 ? operand[j] : 1;
    const int64_t stride = n == 1 ? 0 : k;
    if (i + 1 == rank) {
      *step = stride;
    } else {
      d.size[i] = out[i];
      d.stride[i] = stride;
    }
    k *= n;
  }
  return d;
}

// Warp-per-row twins of the two kernels above, for rows of at most kWarpRowMax elements.
template <typename T>
__global__ void __launch_bounds__(kRowThreads)
    scaled_masked_softmax_warp_rows(int64_t rows, int64_t dim, Dims x_rows, int64_t x_step,
                                    Dims mask_rows, int64_t mask_step, T scale, const T* x,
                                    const T* mask, const uint8_t* keep, T fill, T* y) {
  const int lane = threadIdx.x % kWarp;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x / kWarp);
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * (blockDim.x / kWarp) + threadIdx.x / kWarp;
       row < rows; row += warps) {
    const T* xr = x + dims_offset(x_rows, row);
    const T* mr = mask ? mask + dims_offset(mask_rows, row) : nullptr;
    const uint8_t* kr = keep ? keep + dims_offset(mask_rows, row) : nullptr;
    T* yr = y + row * dim;
    T m = -INFINITY;
    for (int64_t k = lane; k < dim; k += kWarp) {
      const T v = kr   ? scaled_or_fill(xr[k * x_step], scale, kr[k * mask_step] != 0, fill)
                  : mr ? scaled_masked(xr[k * x_step], scale, mr[k * mask_step])
                       : xr[k * x_step] * scale;
      yr[k] = v;
      m = MaxOp()(m, v);
    }
    m = warp_all(m, MaxOp());
    double s = 0;
    for (int64_t k = lane; k < dim; k += kWarp) s += std::exp(yr[k] - m);
    s = warp_all(s, SumOp());
    const T inv_sum = static_cast<T>(1.0 / s);
    for (int64_t k = lane; k < dim; k += kWarp) yr[k] = std::exp(yr[k] - m) * inv_sum;
  }
}

template <typename T>
__global__ void __launch_bounds__(kRowThreads)
    scaled_masked_softmax_grad_warp_rows(int64_t rows, int64_t dim, T scale, const T* dy,
                                         const T* y, Dims keep_rows, int64_t keep_step,
                                         const uint8_t* keep, T* dx) {
  const int lane = threadIdx.x % kWarp;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x / kWarp);
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * (blockDim.x / kWarp) + threadIdx.x / kWarp;
       row < rows; row += warps) {
    const int64_t off = row * dim;
    T s = 0;
    for (int64_t k = lane; k < dim; k += kWarp) s += dy[off + k] * y[off + k];
    s = warp_all(s, SumOp());
    const uint8_t* kr = keep ? keep + dims_offset(keep_rows, row) : nullptr;
    for (int64_t k = lane; k < dim; k += kWarp) {
      const T g = softmax_grad(dy[off + k], y[off + k], s);
      dx[off + k] = kr && !kr[k * keep_step] ? T(0) : scale == T(1) ? g : g * scale;
    }
  }
}

// Launches the warp or the block kernel for `rows` rows of `dim` elements on `stream`.
template <typename T>
void launch_scaled_masked_softmax_rows(cudaStream_t stream, int64_t rows, int64_t dim, Dims x_rows,
                                       int64_t x_step, Dims mask_rows, int64_t mask_step, T scale,
                                       const T* x, const T* mask, const uint8_t* keep, T fill,
                                       T* y) {
  if (dim <= kWarpRowMax) {
    const int64_t per_block = kRowThreads / kWarp;
    scaled_masked_softmax_warp_rows<T>
        <<<row_blocks((rows + per_block - 1) / per_block), kRowThreads, 0, stream>>>(
            rows, dim, x_rows, x_step, mask_rows, mask_step, scale, x, mask, keep, fill, y);
  } else {
    scaled_masked_softmax_rows<T><<<row_blocks(rows), kRowThreads, 0, stream>>>(
        rows, dim, x_rows, x_step, mask_rows, mask_step, scale, x, mask, keep, fill, y);
  }
}

template <typename T>
void launch_scaled_masked_softmax_grad_rows(cudaStream_t stream, int64_t rows, int64_t dim, T scale,
                                            const T* dy, const T* y, Dims keep_rows,
                                            int64_t keep_step, const uint8_t* keep, T* dx) {
  if (dim <= kWarpRowMax) {
    const int64_t per_block = kRowThreads / kWarp;
    scaled_masked_softmax_grad_warp_rows<T>
        <<<row_blocks((rows + per_block - 1) / per_block), kRowThreads, 0, stream>>>(
            rows, dim, scale, dy, y, keep_rows, keep_step, keep, dx);
  } else {
    scaled_masked_softmax_grad_rows<T><<<row_blocks(rows), kRowThreads, 0, stream>>>(
        rows, dim, scale, dy, y, keep_rows, keep_step, keep, dx);
  }
}

}  // namespace
}  // namespace cuda
}  // namespace ortmodule
