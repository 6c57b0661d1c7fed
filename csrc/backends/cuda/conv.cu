// CUDA twins of Conv, ConvGrad (com.microsoft) and ConvTranspose, 1-D, 2-D and 3-D through one
// 3-D form (conv_geometry and conv_transpose_geometry in ops/window.h: lower ranks have
// leading spatial dims of 1). ConvTranspose is its Conv pair's dX (conv_grad below).
//
// A geometry torch's convolution computes (both ends of every axis padded alike:
// aten_conv_fits) runs there, which is cuDNN (runtime/aten_conv.h; it follows torch's cuDNN
// settings, TF32 included). The others (ONNX pads that differ between the two ends of an
// axis) run here, as im2col, cuBLAS GEMM and col2im:
//
// Images go in chunks of B. A chunk's column buffer is col: [C * taps, L], L = B * P, with
// image b in columns [b * P, (b + 1) * P) of every row, so group g's rows are one block
// [K, L] (K = C/group * taps) at g * K * L, and every product of a chunk is one GEMM
// strided-batched over the groups:
//   forward   out_g [Mg, L]  = w_g [Mg, K] * col_g [K, L]
//   dw        dw_g  [Mg, K] += dy_g [Mg, L] * col_g^T          (beta = 1 after the first chunk)
//   dx        dcol_g [K, L]  = w_g^T * dy_g [Mg, L]            -> col2im onto dx
// where out and dy are [M, L] ([M, B, P]); a chunk of one image reads and writes y / dy in
// place, larger chunks permute them to and from [B, M, P]. col2im is a gather (each input
// cell sums the column entries of the taps that read it): no atomics, deterministic. dbias
// is a per-channel reduction, one block per channel, in double as on the CPU.
#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>

#include "backends/cuda/cublas_gemm.h"
#include "kernels/cuda/channel_reduce.cuh"
#include "kernels/cuda/cuda_common.h"
#include "ops/op_utils.h"
#include "ops/window.h"
#include "runtime/aten_conv.h"

namespace ortmodule {

namespace {

// Column-buffer (and permute-buffer) elements per chunk of images: bounds the scratch memory
// (64 MiB of float) while keeping the GEMMs large for small images.
constexpr int64_t kChunkElems = int64_t(1) << 24;

// Conv3dParams with the sizes the kernels derive from it.
struct ConvGeom {
  int64_t C, M, group;
  int64_t in[3], kernel[3], out[3], stride[3], pad[3], dil[3];
  int64_t X, P, taps;  // input plane, output plane, kernel taps
};

ConvGeom make_geom(const Conv3dParams& p) {
  ConvGeom g{};
  g.C = p.C;
  g.M = p.M;
  g.group = p.group;
  for (int i = 0; i < 3; ++i) {
    g.in[i] = p.in[i];
    g.kernel[i] = p.kernel[i];
    g.out[i] = p.out[i];
    g.stride[i] = p.stride[i];
    g.pad[i] = p.pad_begin[i];
    g.dil[i] = p.dilation[i];
  }
  g.X = g.in[0] * g.in[1] * g.in[2];
  g.P = g.out[0] * g.out[1] * g.out[2];
  g.taps = g.kernel[0] * g.kernel[1] * g.kernel[2];
  return g;
}

// A 1x1 kernel mapping each input cell to the same output cell: one image's column buffer is
// the image itself.
bool is_pointwise(const ConvGeom& g) {
  for (int i = 0; i < 3; ++i) {
    if (g.kernel[i] != 1 || g.stride[i] != 1 || g.pad[i] != 0 || g.out[i] != g.in[i]) return false;
  }
  return true;
}

// x: B images [C, X] (image stride C * X) -> col: [C * taps, B * P], zero where a tap falls
// in the padding. One thread per column-buffer element; consecutive threads write
// consecutive columns.
template <typename T>
__global__ void im2col_kernel(ConvGeom g, int64_t B, const T* x, T* col) {
  const int64_t L = B * g.P, n = g.C * g.taps * L;
  const int64_t step = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    const int64_t j = i % L, row = i / L;
    const int64_t b = j / g.P, q = j % g.P, c = row / g.taps, t = row % g.taps;
    const int64_t k[3] = {t / (g.kernel[1] * g.kernel[2]), (t / g.kernel[2]) % g.kernel[1],
                          t % g.kernel[2]};
    const int64_t o[3] = {q / (g.out[1] * g.out[2]), (q / g.out[2]) % g.out[1], q % g.out[2]};
    int64_t at = 0;
    bool inside = true;
    for (int d = 0; d < 3; ++d) {
      const int64_t pos = o[d] * g.stride[d] - g.pad[d] + k[d] * g.dil[d];
      inside = inside && pos >= 0 && pos < g.in[d];
      at = at * g.in[d] + pos;
    }
    col[i] = inside ? x[(b * g.C + c) * g.X + at] : T(0);
  }
}

// col: [C * taps, B * P] -> dx: B images [C, X], overwritten. Input cell i (per axis) is read
// by tap k of output o where o * stride - pad + k * dil = i; each thread walks its cell's
// taps and sums their column entries.
template <typename T>
__global__ void col2im_kernel(ConvGeom g, int64_t B, const T* col, T* dx) {
  const int64_t L = B * g.P, n = B * g.C * g.X;
  const int64_t step = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    const int64_t pos = i % g.X, bc = i / g.X, c = bc % g.C, b = bc / g.C;
    const int64_t cell[3] = {pos / (g.in[1] * g.in[2]), (pos / g.in[2]) % g.in[1], pos % g.in[2]};
    const T* base = col + c * g.taps * L + b * g.P;
    T acc = 0;
    for (int64_t k0 = 0; k0 < g.kernel[0]; ++k0) {
      const int64_t s0 = cell[0] + g.pad[0] - k0 * g.dil[0];
      if (s0 < 0) break;  // later taps start further left still
      if (s0 % g.stride[0] != 0 || s0 / g.stride[0] >= g.out[0]) continue;
      for (int64_t k1 = 0; k1 < g.kernel[1]; ++k1) {
        const int64_t s1 = cell[1] + g.pad[1] - k1 * g.dil[1];
        if (s1 < 0) break;
        if (s1 % g.stride[1] != 0 || s1 / g.stride[1] >= g.out[1]) continue;
        for (int64_t k2 = 0; k2 < g.kernel[2]; ++k2) {
          const int64_t s2 = cell[2] + g.pad[2] - k2 * g.dil[2];
          if (s2 < 0) break;
          if (s2 % g.stride[2] != 0 || s2 / g.stride[2] >= g.out[2]) continue;
          const int64_t t = (k0 * g.kernel[1] + k1) * g.kernel[2] + k2;
          const int64_t q =
              ((s0 / g.stride[0]) * g.out[1] + s1 / g.stride[1]) * g.out[2] + s2 / g.stride[2];
          acc += base[t * L + q];
        }
      }
    }
    dx[i] = acc;
  }
}

// dst: [A1, A0, Q] from src: [A0, A1, Q] (swaps the two leading dims).
template <typename T>
__global__ void swap_leading_kernel(int64_t A0, int64_t A1, int64_t Q, const T* src, T* dst) {
  const int64_t n = A0 * A1 * Q;
  const int64_t step = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    const int64_t q = i % Q, r = i / Q, a0 = r % A0, a1 = r / A0;
    dst[i] = src[(a0 * A1 + a1) * Q + q];
  }
}

// y: [N, M, P] += bias[m].
template <typename T>
__global__ void add_bias_kernel(int64_t n, int64_t M, int64_t P, const T* bias, T* y) {
  const int64_t step = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step)
    y[i] += bias[(i / P) % M];
}

// dbias[m] = sum over n, q of dy[n, m, q], accumulated in double: one block per channel.
template <typename T>
__global__ void __launch_bounds__(cuda::kReduceThreads)
    channel_sum_kernel(int64_t N, int64_t M, int64_t P, const T* dy, T* dbias) {
  __shared__ double shared[2 * cuda::kWarp];
  for (int64_t m = blockIdx.x; m < M; m += gridDim.x) {
    double sum = 0, unused = 0;
    for (int64_t j = threadIdx.x; j < N * P; j += blockDim.x)
      sum += dy[((j / P) * M + m) * P + j % P];
    cuda::block_sum2(&sum, &unused, shared);
    if (threadIdx.x == 0) dbias[m] = static_cast<T>(sum);
  }
}

template <typename T>
DType dtype_of() {
  return std::is_same<T, double>::value ? DType::Float64 : DType::Float32;
}

// cuBLAS takes int dims: larger ones are refused rather than truncated.
int as_int(const OpContext& ctx, int64_t v, const char* what) {
  if (v > INT32_MAX) {
    ctx.fail(std::string(what) + " " + std::to_string(v) +
             " is above cuBLAS's int limit in the CUDA Conv kernel; use smaller images or "
             "fewer channels per group");
  }
  return static_cast<int>(v);
}

// Row-major C[i] = op(A[i]) op(B[i]) + beta * C[i] for i < batch, contiguous operands
// (op(A) [M, K], op(B) [K, N], C [M, N]), A[i] = A + i * sa. Computed as the column-major
// C^T = op(B)^T op(A)^T (see matmul.cu).
template <typename T>
void gemm_batched(OpContext& ctx, Device device, bool ta, bool tb, int64_t batch, int64_t M,
                  int64_t N, int64_t K, const T* A, int64_t sa, const T* B, int64_t sb, T beta,
                  T* C, int64_t sc) {
  if (batch == 0 || M == 0 || N == 0) return;
  const int m = as_int(ctx, M, "M"), n = as_int(ctx, N, "N"), k = as_int(ctx, K, "K");
  const int lda = std::max(1, ta ? m : k), ldb = std::max(1, tb ? k : n), ldc = std::max(1, n);
  const T alpha = 1;
  cuda::check_blas(cuda::gemm_strided(cuda::blas_handle(device), tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                                      ta ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &alpha, B, ldb, sb,
                                      A, lda, sa, &beta, C, ldc, sc, as_int(ctx, batch, "groups")),
                   "Conv (cublas<t>gemmStridedBatched)");
}

// The convolution for torch, where its geometry fits (see the file comment).
bool run_in_torch(const Tensor& x, const Conv3dParams& p, AtenConv* conv) {
  if (!aten_conv_fits(p)) return false;
  *conv = AtenConv{p, static_cast<int>(x.rank()) - 2, x.device(), x.dtype()};
  return true;
}

// Images per chunk: as many as keep the column and permute buffers under kChunkElems.
int64_t chunk_images(const ConvGeom& g, int64_t N) {
  const int64_t per_image = std::max<int64_t>(1, std::max(g.C * g.taps, g.M) * g.P);
  return std::max<int64_t>(1, std::min(N, kChunkElems / per_image));
}

// The chunk's column buffer: the images themselves for a single pointwise image, otherwise
// im2col of images [n0, n0 + B) into col.
template <typename T>
const T* columns(const ConvGeom& g, cudaStream_t stream, const T* x, int64_t n0, int64_t B,
                 T* col) {
  const T* images = x + n0 * g.C * g.X;
  if (B == 1 && is_pointwise(g)) return images;
  const int64_t n = g.C * g.taps * B * g.P;
  im2col_kernel<T><<<cuda::blocks_for(n), cuda::kThreads, 0, stream>>>(g, B, images, col);
  cuda::check_launch("Conv (im2col)");
  return col;
}

template <typename T>
void swap_leading(cudaStream_t stream, int64_t A0, int64_t A1, int64_t Q, const T* src, T* dst) {
  swap_leading_kernel<T>
      <<<cuda::blocks_for(A0 * A1 * Q), cuda::kThreads, 0, stream>>>(A0, A1, Q, src, dst);
  cuda::check_launch("Conv (permute)");
}

template <typename T>
void run_conv(OpContext& ctx) {
  const Tensor& x = ctx.in(0);
  const Tensor& w = ctx.in(1);
  Tensor& y = ctx.out(0);
  const int64_t N = x.dim(0);
  const Conv3dParams params = conv_geometry(ctx, x.shape(), w.shape());
  if (y.numel() == 0) return;
  AtenConv conv;
  if (run_in_torch(x, params, &conv)) {
    aten_conv_forward(conv, x.raw(), w.raw(), ctx.has_input(2) ? ctx.in(2).raw() : nullptr,
                      y.raw());
    return;
  }
  const ConvGeom g = make_geom(params);
  const Device device = y.device();
  cudaStream_t stream = cuda::stream(device);
  const int64_t Mg = g.M / g.group, K = g.C / g.group * g.taps;
  const int64_t max_b = chunk_images(g, N);
  const bool needs_col = !(max_b == 1 && is_pointwise(g));
  Tensor col = Tensor::empty(x.dtype(), {needs_col ? g.C * g.taps * max_b * g.P : 0}, device);
  Tensor out = Tensor::empty(x.dtype(), {max_b > 1 ? g.M * max_b * g.P : 0}, device);
  for (int64_t n0 = 0; n0 < N; n0 += max_b) {
    const int64_t B = std::min(max_b, N - n0), L = B * g.P;
    const T* cols = columns<T>(g, stream, x.data<T>(), n0, B, col.data<T>());
    T* yc = y.data<T>() + n0 * g.M * g.P;
    T* dst = B == 1 ? yc : out.data<T>();
    gemm_batched<T>(ctx, device, false, false, g.group, Mg, L, K, w.data<T>(), Mg * K, cols, K * L,
                    T(0), dst, Mg * L);
    if (B > 1) swap_leading<T>(stream, g.M, B, g.P, dst, yc);
  }
  if (ctx.has_input(2)) {
    add_bias_kernel<T><<<cuda::blocks_for(y.numel()), cuda::kThreads, 0, stream>>>(
        y.numel(), g.M, g.P, ctx.in(2).data<T>(), y.data<T>());
    cuda::check_launch("Conv (bias)");
  }
}

// The gradients of the Conv `params` (spatial rank `rank`) for dy [N, M, out...]: dx, dw and
// db, each nullable (not computed) and overwritten. x is read only for dw (nullable without
// it): ConvTranspose runs its forward here as dx alone.
template <typename T>
void conv_grad(OpContext& ctx, const Conv3dParams& params, int rank, Device device, const T* dy,
               const T* x, const T* w, T* dx, T* dw, T* db) {
  const int64_t N = params.N;
  if (aten_conv_fits(params)) {
    const AtenConv conv{params, rank, device, dtype_of<T>()};
    aten_conv_backward(conv, dy, x, w, dx, dw, db);
    return;
  }
  const ConvGeom g = make_geom(params);
  cudaStream_t stream = cuda::stream(device);
  if (db != nullptr && g.M > 0) {
    channel_sum_kernel<T>
        <<<cuda::item_blocks(g.M), cuda::kReduceThreads, 0, stream>>>(N, g.M, g.P, dy, db);
    cuda::check_launch("ConvGrad (dB)");
  }
  const int64_t w_elems = g.M * (g.C / g.group) * g.taps;
  if (dw != nullptr && N == 0) {
    cuda::check(cudaMemsetAsync(dw, 0, w_elems * sizeof(T), stream), "ConvGrad (dW = 0)");
  }
  if ((dw == nullptr && dx == nullptr) || N == 0) return;
  const DType dtype = dtype_of<T>();
  const int64_t Mg = g.M / g.group, K = g.C / g.group * g.taps;
  const int64_t max_b = chunk_images(g, N);
  const bool pointwise_images = max_b == 1 && is_pointwise(g);
  // One buffer for the chunk's columns (read by dW) and then its column gradient (dX).
  Tensor col = Tensor::empty(dtype, {pointwise_images ? 0 : g.C * g.taps * max_b * g.P}, device);
  Tensor dy_chunk = Tensor::empty(dtype, {max_b > 1 ? g.M * max_b * g.P : 0}, device);
  for (int64_t n0 = 0; n0 < N; n0 += max_b) {
    const int64_t B = std::min(max_b, N - n0), L = B * g.P;
    const T* dyc = dy + n0 * g.M * g.P;
    if (B > 1) {
      swap_leading<T>(stream, B, g.M, g.P, dyc, dy_chunk.data<T>());
      dyc = dy_chunk.data<T>();
    }
    if (dw != nullptr) {
      const T* cols = columns<T>(g, stream, x, n0, B, col.data<T>());
      gemm_batched<T>(ctx, device, false, true, g.group, Mg, K, L, dyc, Mg * L, cols, K * L,
                      n0 == 0 ? T(0) : T(1), dw, Mg * K);
    }
    if (dx == nullptr) continue;
    T* dxc = dx + n0 * g.C * g.X;
    // A single pointwise image: the column gradient is dX itself.
    T* dcol = pointwise_images ? dxc : col.data<T>();
    gemm_batched<T>(ctx, device, true, false, g.group, K, L, Mg, w, Mg * K, dyc, Mg * L, T(0), dcol,
                    K * L);
    if (pointwise_images) continue;
    col2im_kernel<T>
        <<<cuda::blocks_for(B * g.C * g.X), cuda::kThreads, 0, stream>>>(g, B, dcol, dxc);
    cuda::check_launch("ConvGrad (col2im)");
  }
}

// ConvGrad(dY, X, W) -> dX, dW, dB, each optional.
template <typename T>
void run_conv_grad(OpContext& ctx) {
  const Tensor& x = ctx.in(1);
  const Conv3dParams params = conv_geometry(ctx, x.shape(), ctx.in(2).shape());
  auto out = [&ctx](size_t k) {
    return ctx.has_output(k) && ctx.out(k).numel() > 0 ? ctx.out(k).data<T>() : nullptr;
  };
  T* db = ctx.has_output(2) ? ctx.out(2).data<T>() : nullptr;
  conv_grad<T>(ctx, params, static_cast<int>(x.rank()) - 2, x.device(), ctx.in(0).data<T>(),
               x.data<T>(), ctx.in(2).data<T>(), out(0), out(1), db);
}

// ConvTranspose(X, W, B?): its Conv pair's dX for dY := X (see ops/conv_transpose_ops.cpp),
// plus the bias per channel.
template <typename T>
void run_conv_transpose(OpContext& ctx) {
  const Tensor& x = ctx.in(0);
  Tensor& y = ctx.out(0);
  const Conv3dParams params = conv_transpose_geometry(ctx);
  if (y.numel() == 0) return;
  conv_grad<T>(ctx, params, static_cast<int>(x.rank()) - 2, y.device(), x.data<T>(), nullptr,
               ctx.in(1).data<T>(), y.data<T>(), nullptr, nullptr);
  if (!ctx.has_input(2)) return;
  const int64_t P = params.in[0] * params.in[1] * params.in[2];
  cudaStream_t stream = cuda::stream(y.device());
  add_bias_kernel<T><<<cuda::blocks_for(y.numel()), cuda::kThreads, 0, stream>>>(
      y.numel(), params.C, P, ctx.in(2).data<T>(), y.data<T>());
  cuda::check_launch("ConvTranspose (bias)");
}

// float16/bfloat16 Conv and ConvGrad (autocast keeps convolutions with even pads in 16 bits,
// passes/low_precision.h): torch's convolution alone computes them.
void conv_low_precision(OpContext& ctx, bool grad) {
  const Tensor& x = ctx.in(grad ? 1 : 0);
  const Tensor& w = ctx.in(grad ? 2 : 1);
  const Conv3dParams params = conv_geometry(ctx, x.shape(), w.shape());
  AtenConv conv;
  if (!run_in_torch(x, params, &conv)) {
    bool empty = params.N == 0;
    for (int i = 0; i < 3; ++i) empty = empty || params.out[i] == 0;
    if (empty) {
      // No output cell (an empty batch or window): every gradient is zeros.
      cudaStream_t stream = cuda::stream(x.device());
      for (size_t k = 0; grad && k < 3; ++k) {
        if (!ctx.has_output(k)) continue;
        cuda::check(cudaMemsetAsync(ctx.out(k).raw(), 0, ctx.out(k).nbytes(), stream),
                    "ConvGrad (zero gradients)");
      }
      return;
    }
    ctx.fail("a " + dtype_name(x.dtype()) +
             " convolution on CUDA needs the same pads at both ends of every axis (torch's "
             "convolution computes it); this one's differ. Cast its inputs to float32");
  }
  auto out = [&ctx](size_t k) { return ctx.has_output(k) ? ctx.out(k).raw() : nullptr; };
  if (!grad) {
    aten_conv_forward(conv, x.raw(), w.raw(), ctx.has_input(2) ? ctx.in(2).raw() : nullptr, out(0));
    return;
  }
  aten_conv_backward(conv, ctx.in(0).raw(), x.raw(), w.raw(), out(0), out(1), out(2));
}

// float16/bfloat16 ConvTranspose: torch's transposed convolution, where its geometry fits.
void conv_transpose_low_precision(OpContext& ctx) {
  const Tensor& x = ctx.in(0);
  const Conv3dParams params = conv_transpose_geometry(ctx);
  if (ctx.out(0).numel() == 0) return;
  if (!aten_conv_fits(params)) {
    ctx.fail("a " + dtype_name(x.dtype()) +
             " ConvTranspose on CUDA needs the same pads at both ends of every axis (torch's "
             "transposed convolution computes it); this one's differ. Cast its inputs to float32");
  }
  const AtenConv conv{params, static_cast<int>(x.rank()) - 2, x.device(), x.dtype()};
  aten_conv_transpose_forward(conv, x.raw(), ctx.in(1).raw(),
                              ctx.has_input(2) ? ctx.in(2).raw() : nullptr, ctx.out(0).raw());
}

}  // namespace

void cuda_conv(OpContext& ctx) {
  if (dtype_is_low_precision(ctx.in(0).dtype())) return conv_low_precision(ctx, false);
  ORTM_DISPATCH_FLOAT(ctx.in(0).dtype(), ctx, run_conv<scalar_t>(ctx));
}

void cuda_conv_grad(OpContext& ctx) {
  if (dtype_is_low_precision(ctx.in(0).dtype())) return conv_low_precision(ctx, true);
  ORTM_DISPATCH_FLOAT(ctx.in(0).dtype(), ctx, run_conv_grad<scalar_t>(ctx));
}

void cuda_conv_transpose(OpContext& ctx) {
  if (dtype_is_low_precision(ctx.in(0).dtype())) return conv_transpose_low_precision(ctx);
  ORTM_DISPATCH_FLOAT(ctx.in(0).dtype(), ctx, run_conv_transpose<scalar_t>(ctx));
}

}  // namespace ortmodule
