// CUDA twins of FusedLinearCrossEntropy and FusedLinearCrossEntropyGrad
// (ops/linear_cross_entropy_ops.cpp), with the CPU kernels' semantics and blocking
// (kernels/cpu/linear_cross_entropy.h): per block of rows, cuBLAS computes the block's logits
// into scratch, one thread block per row reduces them (in double), and in backward the block
// becomes dlogits in place before the products dx = dlogits op(w)^T and dw += dlogits^T x.
// The final loss sum runs in one thread block in double: deterministic, no atomics.
//
// Labels are copied to the host once per call (one small copy and a stream sync) and checked
// there as the CPU checks them, which also yields the Mean divisor.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "backends/cuda/cublas_gemm.h"
#include "kernels/cpu/loss.h"
#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/cuda_common.h"
#include "ops/linear_cross_entropy_attrs.h"
#include "ops/op_utils.h"

namespace ortmodule {

namespace {

using cuda::kRowThreads;
using cuda::kWarp;

// Row-major C[M, N] = op(A) op(B) + beta * C, as cuBLAS's column-major C^T = op(B)^T op(A)^T.
template <typename T>
void product(OpContext& ctx, Device device, bool ta, bool tb, int64_t M, int64_t N, int64_t K,
             const T* A, int64_t lda, const T* B, int64_t ldb, T beta, T* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  for (int64_t v : {M, N, K, lda, ldb, ldc})
    if (v > INT32_MAX)
      ctx.fail("a product dim of " + std::to_string(v) + " is above cuBLAS's int limit");
  const T alpha = T(1);
  cuda::check_blas(
      cuda::gemm_one(cuda::blas_handle(device), tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                     ta ? CUBLAS_OP_T : CUBLAS_OP_N, static_cast<int>(N), static_cast<int>(M),
                     static_cast<int>(K), &alpha, B, static_cast<int>(std::max<int64_t>(1, ldb)), A,
                     static_cast<int>(std::max<int64_t>(1, lda)), &beta, C,
                     static_cast<int>(std::max<int64_t>(1, ldc))),
      "FusedLinearCrossEntropy (cublas<t>gemm)");
}

struct RowParams {
  int64_t r0 = 0, n = 0, classes = 0;
  int64_t ignore_index = -100;
  bool has_ignore_index = false;
};

__device__ bool row_ignored(const RowParams& p, int64_t label) {
  return loss_entry_ignored(label, p.ignore_index, p.has_ignore_index);
}

template <typename T>
__global__ void fill_bias_rows(int64_t count, int64_t classes, const T* bias, T* block) {
  const int64_t step = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += step)
    block[i] = bias[i % classes];
}

// One thread block per row of the block: lse[r] and row_loss[r] (0 where ignored).
template <typename T>
__global__ void __launch_bounds__(kRowThreads)
    row_lse(RowParams p, const T* block, const int64_t* labels, T* lse, double* row_loss) {
  __shared__ double shared[kWarp];
  for (int64_t i = blockIdx.x; i < p.n; i += gridDim.x) {
    const T* row = block + i * p.classes;
    const double neg_inf = -static_cast<double>(INFINITY);
    double m = neg_inf;
    for (int64_t k = threadIdx.x; k < p.classes; k += blockDim.x)
      m = cuda::MaxOp()(m, static_cast<double>(row[k]));
    m = cuda::block_reduce(m, cuda::MaxOp(), neg_inf, shared);
    double s = 0;
    for (int64_t k = threadIdx.x; k < p.classes; k += blockDim.x)
      s += exp(static_cast<double>(row[k]) - m);
    s = cuda::block_reduce(s, cuda::SumOp(), 0.0, shared);
    if (threadIdx.x == 0) {
      const int64_t r = p.r0 + i, label = labels[r];
      const double log_sum = log(s);
      lse[r] = static_cast<T>(m + log_sum);
      row_loss[r] = row_ignored(p, label) ? 0.0 : (m - static_cast<double>(row[label])) + log_sum;
    }
  }
}

// reduction none: loss[r] = row_loss[r]; else one block: loss[0] = sum (/ kept for Mean).
template <typename T>
__global__ void write_row_losses(int64_t rows, const double* row_loss, T* loss) {
  const int64_t step = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; r < rows; r += step)
    loss[r] = static_cast<T>(row_loss[r]);
}
template <typename T>
__global__ void __launch_bounds__(kRowThreads)
    sum_row_losses(int64_t rows, const double* row_loss, double divisor, T* loss) {
  __shared__ double shared[kWarp];
  double s = 0;
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) s += row_loss[r];
  s = cuda::block_reduce(s, cuda::SumOp(), 0.0, shared);
  if (threadIdx.x == 0) loss[0] = static_cast<T>(s / divisor);
}

// block (the logits of rows r0..r0+n) becomes dlogits = (exp(logits - lse) - onehot) * g.
template <typename T>
__global__ void block_dlogits(RowParams p, const T* dloss, bool per_row, double divisor,
                              const int64_t* labels, const T* lse, T* block) {
  const int64_t count = p.n * p.classes;
  const int64_t step = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < count;
       e += step) {
    const int64_t i = e / p.classes, k = e % p.classes, r = p.r0 + i, label = labels[r];
    if (row_ignored(p, label)) {
      block[e] = T(0);
      continue;
    }
    const T g = static_cast<T>(static_cast<double>(per_row ? dloss[r] : dloss[0]) / divisor);
    block[e] = exp(block[e] - lse[r]) * g - (k == label ? g : T(0));
  }
}

// dbias[k] += sum over the block's rows of dlogits[., k] (one thread per class, rows in order).
template <typename T>
__global__ void add_column_sums(int64_t n, int64_t classes, const T* block, T* dbias) {
  const int64_t step = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t k = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < classes;
       k += step) {
    double s = 0;
    for (int64_t i = 0; i < n; ++i) s += static_cast<double>(block[i * classes + k]);
    dbias[k] = static_cast<T>(static_cast<double>(dbias[k]) + s);
  }
}

// The labels, checked on the host; returns the number of rows not ignored.
int64_t checked_kept_rows(const LinearCrossEntropyDims& d, const Tensor& labels,
                          cudaStream_t stream, const char* op) {
  std::vector<int64_t> host(static_cast<size_t>(d.rows));
  if (d.rows) {
    cuda::check(cudaMemcpyAsync(host.data(), labels.raw(), d.rows * sizeof(int64_t),
                                cudaMemcpyDeviceToHost, stream),
                "FusedLinearCrossEntropy labels (read back)");
    cuda::check(cudaStreamSynchronize(stream), "FusedLinearCrossEntropy labels (sync)");
  }
  check_loss_labels(op, d.rows, d.classes, 1, host.data(), d.ignore_index, d.has_ignore_index);
  int64_t kept = 0;
  for (int64_t label : host) kept += !loss_entry_ignored(label, d.ignore_index, d.has_ignore_index);
  return kept;
}

RowParams row_params(const LinearCrossEntropyDims& d, int64_t r0, int64_t n) {
  RowParams p;
  p.r0 = r0;
  p.n = n;
  p.classes = d.classes;
  p.ignore_index = d.ignore_index;
  p.has_ignore_index = d.has_ignore_index;
  return p;
}

template <typename T>
void block_logits(OpContext& ctx, const LinearCrossEntropyDims& d, int64_t r0, int64_t n,
                  const T* x, const T* w, const T* bias, T* block, cudaStream_t stream,
                  Device device) {
  if (bias) {
    fill_bias_rows<T><<<cuda::blocks_for(n * d.classes), cuda::kThreads, 0, stream>>>(
        n * d.classes, d.classes, bias, block);
    cuda::check_launch("FusedLinearCrossEntropy (bias)");
  }
  product<T>(ctx, device, false, d.trans_w, n, d.classes, d.hidden, x + r0 * d.hidden, d.hidden, w,
             d.trans_w ? d.hidden : d.classes, bias ? T(1) : T(0), block, d.classes);
}

template <typename T>
void run_forward(OpContext& ctx) {
  const LinearCrossEntropyDims d = linear_cross_entropy_dims(ctx, 0);
  const Tensor& x = ctx.in(0);
  const Device device = x.device();
  cudaStream_t stream = cuda::stream(device);
  const int64_t kept = checked_kept_rows(d, ctx.in(2), stream, "FusedLinearCrossEntropy");
  Tensor lse = ctx.has_output(1) ? ctx.out(1) : Tensor::empty(x.dtype(), {d.rows}, device);
  Tensor block = Tensor::empty(x.dtype(), {d.block_rows, d.classes}, device);
  Tensor row_loss = Tensor::empty(DType::Float64, {d.rows}, device);
  const T* bias = ctx.has_input(3) ? ctx.in(3).data<T>() : nullptr;
  for (int64_t r0 = 0; r0 < d.rows; r0 += d.block_rows) {
    const int64_t n = std::min(d.block_rows, d.rows - r0);
    block_logits<T>(ctx, d, r0, n, x.data<T>(), ctx.in(1).data<T>(), bias, block.data<T>(), stream,
                    device);
    row_lse<T><<<cuda::row_blocks(n), kRowThreads, 0, stream>>>(
        row_params(d, r0, n), block.data<T>(), ctx.in(2).data<int64_t>(), lse.data<T>(),
        row_loss.data<double>());
    cuda::check_launch("FusedLinearCrossEntropy (rows)");
  }
  if (d.reduction == Reduction::None) {
    if (d.rows)
      write_row_losses<T><<<cuda::blocks_for(d.rows), cuda::kThreads, 0, stream>>>(
          d.rows, row_loss.data<double>(), ctx.out(0).data<T>());
  } else {
    // Mean with nothing kept is 0/0 = NaN, matching PyTorch.
    const double divisor = d.reduction == Reduction::Mean ? static_cast<double>(kept) : 1.0;
    sum_row_losses<T><<<1, kRowThreads, 0, stream>>>(d.rows, row_loss.data<double>(), divisor,
                                                     ctx.out(0).data<T>());
  }
  cuda::check_launch("FusedLinearCrossEntropy (loss)");
}

template <typename T>
void run_backward(OpContext& ctx) {
  const LinearCrossEntropyDims d = linear_cross_entropy_dims(ctx, 1);
  const Tensor& x = ctx.in(1);
  const Device device = x.device();
  cudaStream_t stream = cuda::stream(device);
  const int64_t kept = checked_kept_rows(d, ctx.in(3), stream, "FusedLinearCrossEntropy backward");
  const double divisor = d.reduction == Reduction::Mean ? static_cast<double>(kept) : 1.0;
  Tensor block = Tensor::empty(x.dtype(), {d.block_rows, d.classes}, device);
  const T* w = ctx.in(2).data<T>();
  const T* bias = ctx.has_input(5) ? ctx.in(5).data<T>() : nullptr;
  T* dx = ctx.has_output(0) ? ctx.out(0).data<T>() : nullptr;
  T* dw = ctx.has_output(1) ? ctx.out(1).data<T>() : nullptr;
  T* dbias = ctx.has_output(2) ? ctx.out(2).data<T>() : nullptr;
  if (dw)
    cuda::check(cudaMemsetAsync(dw, 0, ctx.out(1).nbytes(), stream),
                "FusedLinearCrossEntropy backward (zero dw)");
  if (dbias)
    cuda::check(cudaMemsetAsync(dbias, 0, ctx.out(2).nbytes(), stream),
                "FusedLinearCrossEntropy backward (zero dbias)");
  const int64_t V = d.classes, K = d.hidden;
  for (int64_t r0 = 0; r0 < d.rows; r0 += d.block_rows) {
    const int64_t n = std::min(d.block_rows, d.rows - r0);
    const T* xb = x.data<T>() + r0 * K;
    block_logits<T>(ctx, d, r0, n, x.data<T>(), w, bias, block.data<T>(), stream, device);
    block_dlogits<T><<<cuda::blocks_for(n * V), cuda::kThreads, 0, stream>>>(
        row_params(d, r0, n), ctx.in(0).data<T>(), d.reduction == Reduction::None, divisor,
        ctx.in(3).data<int64_t>(), ctx.in(4).data<T>(), block.data<T>());
    cuda::check_launch("FusedLinearCrossEntropy backward (dlogits)");
    if (dx)
      product<T>(ctx, device, false, !d.trans_w, n, K, V, block.data<T>(), V, w, d.trans_w ? K : V,
                 T(0), dx + r0 * K, K);
    if (dw) {
      if (d.trans_w)
        product<T>(ctx, device, true, false, V, K, n, block.data<T>(), V, xb, K, T(1), dw, K);
      else
        product<T>(ctx, device, true, false, K, V, n, xb, K, block.data<T>(), V, T(1), dw, V);
    }
    if (dbias) {
      add_column_sums<T>
          <<<cuda::blocks_for(V), cuda::kThreads, 0, stream>>>(n, V, block.data<T>(), dbias);
      cuda::check_launch("FusedLinearCrossEntropy backward (dbias)");
    }
  }
}

}  // namespace

void cuda_fused_linear_cross_entropy(OpContext& ctx) {
  ORTM_DISPATCH_FLOAT(ctx.in(0).dtype(), ctx, run_forward<scalar_t>(ctx));
}
void cuda_fused_linear_cross_entropy_grad(OpContext& ctx) {
  ORTM_DISPATCH_FLOAT(ctx.in(1).dtype(), ctx, run_backward<scalar_t>(ctx));
}

}  // namespace ortmodule
