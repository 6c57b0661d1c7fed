// CUDA twins of the recurrent layer ops (ops/rnn_ops.cpp): kernels/rnn_loop.h's time loop with
// cuBLAS products (cublas_gemm.h, on torch's handle and stream) and one element kernel per
// step over [B, H] (the cells of kernels/math/rnn.h, the arithmetic the CPU runs).
#include <cstdint>

#include "backends/cuda/cublas_gemm.h"
#include "kernels/cuda/cuda_common.h"
#include "kernels/math/rnn.h"
#include "kernels/rnn_loop.h"
#include "ops/op_utils.h"
#include "ops/rnn_layer.h"

namespace ortmodule {

namespace {

// [B, H] elements of one step, grid-stride.
template <typename T>
__global__ void rnn_step_forward_kernel(math::RnnStepForward<T> step, int64_t n) {
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < n;
       e += int64_t(blockDim.x) * gridDim.x)
    math::rnn_step_forward(step, e / step.H, e % step.H);
}

template <typename T>
__global__ void rnn_step_backward_kernel(math::RnnStepBackward<T> step, int64_t n) {
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < n;
       e += int64_t(blockDim.x) * gridDim.x)
    math::rnn_step_backward(step, e / step.H, e % step.H);
}

// src: [rows, cols] -> dst[c] = sum_r src[r, c], a thread per column (reads coalesce across
// the columns), the rows in order: deterministic.
template <typename T>
__global__ void rnn_column_sums_kernel(int64_t rows, int64_t cols, const T* src, T* dst) {
  for (int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; c < cols;
       c += int64_t(blockDim.x) * gridDim.x) {
    T sum = T(0);
    for (int64_t r = 0; r < rows; ++r) sum += src[r * cols + c];
    dst[c] = sum;
  }
}

int as_int(const OpContext& ctx, int64_t v, const char* what) {
  if (v > INT32_MAX)
    ctx.fail(std::string(what) + " = " + std::to_string(v) + " exceeds cuBLAS's int");
  return static_cast<int>(v);
}

// The CUDA side of rnn_loop.h's Exec.
template <typename T>
struct CudaRnnExec {
  OpContext& ctx;
  Device device;
  cudaStream_t stream;

  void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const T* A, int64_t lda, const T* B,
            int64_t ldb, T beta, T* C, int64_t ldc) {
    const T alpha = T(1);
    // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: B before A.
    cuda::check_blas(
        cuda::gemm_one(cuda::blas_handle(device), tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                       ta ? CUBLAS_OP_T : CUBLAS_OP_N, as_int(ctx, N, "N"), as_int(ctx, M, "M"),
                       as_int(ctx, K, "K"), &alpha, B, as_int(ctx, ldb, "ldb"), A,
                       as_int(ctx, lda, "lda"), &beta, C, as_int(ctx, ldc, "ldc")),
        "recurrent layer (cublas<t>gemm)");
  }
  void recurrent_gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const T* A, int64_t lda,
                      const T* B, int64_t ldb, T beta, T* C, int64_t ldc) {
    gemm(ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc);
  }
  void step_forward(const math::RnnStepForward<T>& step, int64_t B) {
    const int64_t n = B * step.H;
    if (n == 0) return;
    rnn_step_forward_kernel<T><<<cuda::blocks_for(n), cuda::kThreads, 0, stream>>>(step, n);
    cuda::check_launch("recurrent layer step");
  }
  void step_backward(const math::RnnStepBackward<T>& step, int64_t B) {
    const int64_t n = B * step.H;
    if (n == 0) return;
    rnn_step_backward_kernel<T><<<cuda::blocks_for(n), cuda::kThreads, 0, stream>>>(step, n);
    cuda::check_launch("recurrent layer step (backward)");
  }
  void copy_rows(int64_t rows, int64_t cols, const T* src, int64_t src_ld, T* dst) {
    if (rows == 0 || cols == 0) return;
    cuda::check(cudaMemcpy2DAsync(dst, cols * sizeof(T), src, src_ld * sizeof(T), cols * sizeof(T),
                                  rows, cudaMemcpyDeviceToDevice, stream),
                "recurrent layer (copy of a state)");
  }
  void fill_zero(int64_t n, T* dst) {
    if (n == 0) return;
    cuda::check(cudaMemsetAsync(dst, 0, n * sizeof(T), stream), "recurrent layer (zeros)");
  }
  void column_sums(int64_t rows, int64_t cols, const T* src, T* dst) {
    if (cols == 0) return;
    rnn_column_sums_kernel<T>
        <<<cuda::blocks_for(cols), cuda::kThreads, 0, stream>>>(rows, cols, src, dst);
    cuda::check_launch("recurrent layer (bias gradient)");
  }
};

}  // namespace

void cuda_rnn_layer(OpContext& ctx) {
  const rnn::RnnDims d = rnn_layer_dims(ctx, false);
  const Device device = ctx.in(rnn_io::kX).device();
  RnnScratch scratch;
  ORTM_DISPATCH_FLOAT(ctx.in(rnn_io::kX).dtype(), ctx, {
    CudaRnnExec<scalar_t> exec{ctx, device, cuda::stream(device)};
    rnn::rnn_forward(exec, d, rnn_forward_args<scalar_t>(ctx, d, scratch));
  });
}

void cuda_rnn_layer_grad(OpContext& ctx) {
  const rnn::RnnDims d = rnn_layer_dims(ctx, true);
  const Device device = ctx.in(rnn_io::kGradX).device();
  RnnScratch scratch;
  ORTM_DISPATCH_FLOAT(ctx.in(rnn_io::kGradX).dtype(), ctx, {
    CudaRnnExec<scalar_t> exec{ctx, device, cuda::stream(device)};
    rnn::rnn_backward(exec, d, rnn_backward_args<scalar_t>(ctx, d, scratch));
  });
}

}  // namespace ortmodule
