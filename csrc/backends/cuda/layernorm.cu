// CUDA twins of LayerNormalization and com.microsoft LayerNormalizationGrad over the
// [rows, cols] view (cols = the normalised trailing dims), as kernels/cpu/layernorm.h, and of
// their uncentred form, com.microsoft SimplifiedLayerNormalization(Grad) (RMS normalisation:
// kCentred = false takes the mean as 0, drops mean(g) from dx and has no bias).
//
// y, dx: one block per row; row sums in double by warp shuffles (block_reduce), statistics
// kept in T (float for float32 rows, as the CPU's vector rows keep them) through the shared
// formulas of kernels/math/layernorm.h.
// dscale, dbias: sums over rows per column. A grid of (column tiles of 32) x (row slices): each
// block sums its slice's rows into per-slice partials (double), then one pass adds the
// partials in slice order. No atomics: the result is deterministic.
#include <algorithm>
#include <cstdint>

#include "kernels/cuda/block_reduce.cuh"
#include "kernels/math/layernorm.h"
#include "ops/op_utils.h"

namespace ortmodule {

namespace {

using cuda::kRowThreads;
using cuda::kWarp;

// x: [rows, cols], scale, bias?: [cols] -> y: [rows, cols], mean?, inv_std?: [rows]
template <typename T, bool kCentred>
__global__ void __launch_bounds__(kRowThreads)
    layernorm_forward_rows(int64_t rows, int64_t cols, double eps, const T* x, const T* scale,
                           const T* bias, T* y, T* mean, T* inv_std) {
  __shared__ double shared[kWarp];
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* xr = x + row * cols;
    T m = T(0);
    if (kCentred) {
      double sum = 0;
      for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) sum += static_cast<double>(xr[c]);
      sum = cuda::block_reduce(sum, cuda::SumOp(), 0.0, shared);
      m = math::layernorm_mean<T>(sum, cols);
    }
    double sq = 0;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      const T d = xr[c] - m;
      sq += static_cast<double>(d) * d;
    }
    sq = cuda::block_reduce(sq, cuda::SumOp(), 0.0, shared);
    const T is = math::layernorm_inv_std<T>(sq, cols, eps);
    T* yr = y + row * cols;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      const T v = (xr[c] - m) * is * scale[c];
      yr[c] = bias ? v + bias[c] : v;
    }
    if (threadIdx.x == 0) {
      if (mean) mean[row] = m;
      if (inv_std) inv_std[row] = is;
    }
  }
}

// dy, x: [rows, cols], scale: [cols], mean (kCentred), inv_std: [rows] -> dx: [rows, cols]
template <typename T, bool kCentred>
__global__ void __launch_bounds__(kRowThreads)
    layernorm_dx_rows(int64_t rows, int64_t cols, const T* dy, const T* x, const T* scale,
                      const T* mean, const T* inv_std, T* dx) {
  __shared__ double shared[kWarp];
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const int64_t off = row * cols;
    const T m = kCentred ? mean[row] : T(0), is = inv_std[row];
    double sum_g = 0, sum_gx = 0;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      const T g = dy[off + c] * scale[c];
      sum_g += static_cast<double>(g);
      sum_gx += static_cast<double>(g) * ((x[off + c] - m) * is);
    }
    if (kCentred) sum_g = cuda::block_reduce(sum_g, cuda::SumOp(), 0.0, shared);
    sum_gx = cuda::block_reduce(sum_gx, cuda::SumOp(), 0.0, shared);
    const T mg = kCentred ? math::layernorm_mean<T>(sum_g, cols) : T(0);
    const T mgx = math::layernorm_mean<T>(sum_gx, cols);
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      const T g = dy[off + c] * scale[c];
      const T xhat = (x[off + c] - m) * is;
      dx[off + c] = math::layernorm_dx(g, xhat, is, mg, mgx);
    }
  }
}

constexpr int kTileCols = 32;  // threadIdx.x: a column of the tile (coalesced row reads)
constexpr int kTileRows = 8;   // threadIdx.y: rows interleaved within a block's slice

// partial: [slices, 2, cols], slice s = blockIdx.y covering rows [s * slice_rows, ...):
// partial[s, 0, c] = sum dy * xhat, partial[s, 1, c] = sum dy, in double (mean null: 0).
template <typename T>
__global__ void layernorm_param_partials(int64_t rows, int64_t cols, int64_t slice_rows,
                                         const T* dy, const T* x, const T* mean, const T* inv_std,
                                         double* partial) {
  __shared__ double s_scale[kTileRows][kTileCols + 1];
  __shared__ double s_bias[kTileRows][kTileCols + 1];
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * slice_rows;
  const int64_t r1 = rows < r0 + slice_rows ? rows : r0 + slice_rows;
  for (int64_t tile = blockIdx.x; tile * kTileCols < cols; tile += gridDim.x) {
    const int64_t c = tile * kTileCols + threadIdx.x;
    double a = 0, b = 0;
    if (c < cols) {
      for (int64_t r = r0 + threadIdx.y; r < r1; r += kTileRows) {
        const double g = static_cast<double>(dy[r * cols + c]);
        const double m = mean ? static_cast<double>(mean[r]) : 0.0, is = inv_std[r];
        a += g * (static_cast<double>(x[r * cols + c]) - m) * is;
        b += g;
      }
    }
    s_scale[threadIdx.y][threadIdx.x] = a;
    s_bias[threadIdx.y][threadIdx.x] = b;
    __syncthreads();
    if (threadIdx.y == 0 && c < cols) {
      for (int k = 1; k < kTileRows; ++k) {
        a += s_scale[k][threadIdx.x];
        b += s_bias[k][threadIdx.x];
      }
      double* p = partial + static_cast<int64_t>(blockIdx.y) * 2 * cols;
      p[c] = a;
      p[cols + c] = b;
    }
    __syncthreads();  // the tile's shared rows are rewritten by the next tile
  }
}

template <typename T>
__global__ void layernorm_param_sum(int64_t cols, int64_t slices, const double* partial, T* dscale,
                                    T* dbias) {
  const int64_t step = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < cols;
       c += step) {
    double a = 0, b = 0;
    for (int64_t s = 0; s < slices; ++s) {
      a += partial[s * 2 * cols + c];
      b += partial[s * 2 * cols + cols + c];
    }
    if (dscale) dscale[c] = static_cast<T>(a);
    if (dbias) dbias[c] = static_cast<T>(b);
  }
}

template <typename T, bool kCentred>
void launch_layernorm(OpContext& ctx, int64_t rows, int64_t cols) {
  if (rows == 0) return;
  auto out = [&](size_t i) { return ctx.has_output(i) ? ctx.out(i).data<T>() : nullptr; };
  const Tensor& x = ctx.in(0);
  // cols == 0 still runs: an empty row's mean and inv_std are 0 / 0 = NaN, as on the CPU.
  const double eps = ctx.node.attr_float("epsilon", 1e-5f);
  // Outputs: Y, Mean?, InvStdDev? centred; Y, inv_std_var? uncentred (no bias input).
  T* mean = kCentred ? out(1) : nullptr;
  T* inv_std = out(kCentred ? 2 : 1);
  const T* bias = kCentred && ctx.has_input(2) ? ctx.in(2).data<T>() : nullptr;
  layernorm_forward_rows<T, kCentred>
      <<<cuda::row_blocks(rows), kRowThreads, 0, cuda::stream(x.device())>>>(
          rows, cols, eps, x.data<T>(), ctx.in(1).data<T>(), bias, out(0), mean, inv_std);
  cuda::check_launch(kCentred ? "LayerNormalization" : "SimplifiedLayerNormalization");
}

// Inputs: dY, X, scale, mean, inv_std centred; dY, X, scale, inv_std_var uncentred.
template <typename T, bool kCentred>
void launch_layernorm_grad(OpContext& ctx, int64_t rows, int64_t cols) {
  auto in = [&](size_t i) { return ctx.in(i).data<T>(); };
  auto out = [&](size_t i) { return ctx.has_output(i) ? ctx.out(i).data<T>() : nullptr; };
  const Device device = ctx.in(1).device();
  cudaStream_t stream = cuda::stream(device);
  const T* mean = kCentred ? in(3) : nullptr;
  const T* inv_std = in(kCentred ? 4 : 3);
  T* dscale = out(1);
  T* dbias = kCentred ? out(2) : nullptr;
  if (cols > 0 && (dscale || dbias) && rows == 0) {
    // Sums over no rows.
    if (dscale) cuda::check(cudaMemsetAsync(dscale, 0, cols * sizeof(T), stream), "dScale");
    if (dbias) cuda::check(cudaMemsetAsync(dbias, 0, cols * sizeof(T), stream), "dBias");
  }
  if (rows == 0 || cols == 0) return;
  if (T* dx = out(0)) {
    layernorm_dx_rows<T, kCentred><<<cuda::row_blocks(rows), kRowThreads, 0, stream>>>(
        rows, cols, in(0), in(1), in(2), mean, inv_std, dx);
    cuda::check_launch(kCentred ? "LayerNormalizationGrad (dX)"
                                : "SimplifiedLayerNormalizationGrad (dX)");
  }
  if (!dscale && !dbias) return;
  // Slices of at least 32 rows per thread row, at most 256 slices.
  const int64_t slices =
      std::clamp<int64_t>((rows + kTileRows * 32 - 1) / (kTileRows * 32), 1, 256);
  const int64_t slice_rows = (rows + slices - 1) / slices;
  const int64_t tiles = std::min<int64_t>((cols + kTileCols - 1) / kTileCols, 65535);
  Tensor partial = Tensor::empty(DType::Float64, {slices, 2, cols}, device);
  layernorm_param_partials<T><<<dim3(static_cast<unsigned>(tiles), static_cast<unsigned>(slices)),
                                dim3(kTileCols, kTileRows), 0, stream>>>(
      rows, cols, slice_rows, in(0), in(1), mean, inv_std, partial.data<double>());
  cuda::check_launch(kCentred ? "LayerNormalizationGrad (dScale, dBias partials)"
                              : "SimplifiedLayerNormalizationGrad (dScale partials)");
  layernorm_param_sum<T><<<cuda::blocks_for(cols), cuda::kThreads, 0, stream>>>(
      cols, slices, partial.data<double>(), dscale, dbias);
  cuda::check_launch(kCentred ? "LayerNormalizationGrad (dScale, dBias)"
                              : "SimplifiedLayerNormalizationGrad (dScale)");
}

}  // namespace

void cuda_layernorm(OpContext& ctx) {
  int64_t axis, rows, cols;
  layernorm_dims(ctx, ctx.in(0), ctx.in(1), &axis, &rows, &cols);
  ORTM_DISPATCH_FLOAT(ctx.in(0).dtype(), ctx, (launch_layernorm<scalar_t, true>(ctx, rows, cols)));
}

void cuda_simplified_layernorm(OpContext& ctx) {
  int64_t axis, rows, cols;
  layernorm_dims(ctx, ctx.in(0), ctx.in(1), &axis, &rows, &cols);
  ORTM_DISPATCH_FLOAT(ctx.in(0).dtype(), ctx, (launch_layernorm<scalar_t, false>(ctx, rows, cols)));
}

void cuda_layernorm_grad(OpContext& ctx) {
  int64_t axis, rows, cols;
  layernorm_dims(ctx, ctx.in(1), ctx.in(2), &axis, &rows, &cols);
  ORTM_DISPATCH_FLOAT(ctx.in(0).dtype(), ctx,
                      (launch_layernorm_grad<scalar_t, true>(ctx, rows, cols)));
}

void cuda_simplified_layernorm_grad(OpContext& ctx) {
  int64_t axis, rows, cols;
  layernorm_dims(ctx, ctx.in(1), ctx.in(2), &axis, &rows, &cols);
  ORTM_DISPATCH_FLOAT(ctx.in(0).dtype(), ctx,
                      (launch_layernorm_grad<scalar_t, false>(ctx, rows, cols)));
}

}  // namespace ortmodule
