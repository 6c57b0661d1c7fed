// CUDA twins of the Cholesky and Householder QR ops (ops/linalg_cholesky_ops.cpp,
// linalg_qr_ops.cpp): one thread per matrix runs the CPU kernels' per-matrix functor
// (kernels/math/linalg_cholesky.h, linalg_qr.h, filled by ops/linalg_qr_setup.h), with its
// double workspace in one device buffer. The matrices these ops see in training (factors
// of covariance or weight blocks) are small, and a batch of them fills the threads.
#include <cstdint>
#include <vector>

#include "kernels/cuda/cuda_common.h"
#include "ops/linalg_qr_setup.h"

namespace ortmodule {

namespace {

constexpr int kMatrixThreads = 64;

template <typename F>
__global__ void per_matrix_kernel(F f, int64_t batch, double* work) {
  const int64_t b = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (b < batch) f(b, work + b * f.work);
}

template <typename F>
void run_cuda(OpContext& ctx, const Tensor& like, int64_t batch, const F& f, const char* name) {
  if (batch == 0) return;
  const Tensor work =
      Tensor::empty(DType::Float64, Shape{batch * (f.work > 0 ? f.work : 1)}, like.device());
  const unsigned blocks = static_cast<unsigned>((batch + kMatrixThreads - 1) / kMatrixThreads);
  per_matrix_kernel<<<blocks, kMatrixThreads, 0, cuda::stream(like.device())>>>(
      f, batch, work.data<double>());
  cuda::check_launch(name);
  (void)ctx;
}

int64_t out_batch(OpContext& ctx, size_t i) {
  const Tensor& y = ctx.out(i);
  return dims_product(y.shape(), 0, y.rank() - 2);
}

}  // namespace

void cuda_cholesky(OpContext& ctx) {
  const Tensor& a = ctx.in(0);
  const int64_t batch = linalg::batch_of(ctx, a, "input 0 (A)");
  ORTM_DISPATCH_FLOAT(a.dtype(), ctx,
                      run_cuda(ctx, a, batch, linalg::cholesky_fn<scalar_t>(ctx), "Cholesky"));
  if (ctx.node.attr_int("check_errors", 0) && batch > 0) {
    std::vector<int32_t> info(static_cast<size_t>(batch));
    cudaStream_t stream = cuda::stream(a.device());
    cuda::check(cudaMemcpyAsync(info.data(), ctx.out(1).raw(), info.size() * sizeof(int32_t),
                                cudaMemcpyDeviceToHost, stream),
                "Cholesky info");
    cuda::check(cudaStreamSynchronize(stream), "Cholesky info");
    linalg::check_cholesky_info(ctx, info.data(), batch);
  }
}
void cuda_cholesky_grad(OpContext& ctx) {
  const int64_t batch = linalg::batch_of(ctx, ctx.in(0), "input 0 (L)");
  ORTM_DISPATCH_FLOAT(
      ctx.in(0).dtype(), ctx,
      run_cuda(ctx, ctx.in(0), batch, linalg::cholesky_grad_fn<scalar_t>(ctx), "CholeskyGrad"));
}
void cuda_cholesky_solve(OpContext& ctx) {
  ORTM_DISPATCH_FLOAT(ctx.in(0).dtype(), ctx,
                      run_cuda(ctx, ctx.in(0), out_batch(ctx, 0),
                               linalg::cholesky_solve_fn<scalar_t>(ctx), "CholeskySolve"));
}
void cuda_cholesky_solve_grad(OpContext& ctx) {
  const int64_t batch = linalg::batch_of(ctx, ctx.in(0), "input 0 (gX)");
  ORTM_DISPATCH_FLOAT(ctx.in(0).dtype(), ctx,
                      run_cuda(ctx, ctx.in(0), batch, linalg::cholesky_solve_grad_fn<scalar_t>(ctx),
                               "CholeskySolveGrad"));
}
void cuda_cholesky_inverse(OpContext& ctx) {
  const int64_t batch = linalg::batch_of(ctx, ctx.in(0), "input 0 (the factor)");
  ORTM_DISPATCH_FLOAT(ctx.in(0).dtype(), ctx,
                      run_cuda(ctx, ctx.in(0), batch, linalg::cholesky_inverse_fn<scalar_t>(ctx),
                               "CholeskyInverse"));
}
void cuda_cholesky_inverse_grad(OpContext& ctx) {
  const int64_t batch = linalg::batch_of(ctx, ctx.in(1), "input 1 (the factor)");
  ORTM_DISPATCH_FLOAT(
      ctx.in(0).dtype(), ctx,
      run_cuda(ctx, ctx.in(0), batch, linalg::cholesky_inverse_grad_fn<scalar_t>(ctx),
               "CholeskyInverseGrad"));
}
void cuda_geqrf(OpContext& ctx) {
  const int64_t batch = linalg::batch_of(ctx, ctx.in(0), "input 0 (A)");
  ORTM_DISPATCH_FLOAT(ctx.in(0).dtype(), ctx,
                      run_cuda(ctx, ctx.in(0), batch, linalg::geqrf_fn<scalar_t>(ctx), "Geqrf"));
}
void cuda_linalg_qr(OpContext& ctx) {
  const int64_t batch = linalg::batch_of(ctx, ctx.in(0), "input 0 (A)");
  ORTM_DISPATCH_FLOAT(ctx.in(0).dtype(), ctx,
                      run_cuda(ctx, ctx.in(0), batch, linalg::qr_fn<scalar_t>(ctx), "LinalgQr"));
}
void cuda_qr_grad(OpContext& ctx) {
  ORTM_DISPATCH_FLOAT(
      ctx.in(0).dtype(), ctx,
      run_cuda(ctx, ctx.in(0), out_batch(ctx, 0), linalg::qr_grad_fn<scalar_t>(ctx), "QrGrad"));
}
void cuda_householder_product(OpContext& ctx) {
  ORTM_DISPATCH_FLOAT(
      ctx.in(0).dtype(), ctx,
      run_cuda(ctx, ctx.in(0), out_batch(ctx, 0), linalg::householder_product_fn<scalar_t>(ctx),
               "HouseholderProduct"));
}
void cuda_householder_product_grad(OpContext& ctx) {
  const int64_t batch = linalg::batch_of(ctx, ctx.in(0), "input 0 (V)");
  ORTM_DISPATCH_FLOAT(
      ctx.in(0).dtype(), ctx,
      run_cuda(ctx, ctx.in(0), batch, linalg::householder_product_grad_fn<scalar_t>(ctx),
               "HouseholderProductGrad"));
}
void cuda_ormqr(OpContext& ctx) {
  ORTM_DISPATCH_FLOAT(
      ctx.in(0).dtype(), ctx,
      run_cuda(ctx, ctx.in(0), out_batch(ctx, 0), linalg::ormqr_fn<scalar_t>(ctx), "Ormqr"));
}
void cuda_ormqr_grad(OpContext& ctx) {
  const int64_t batch = linalg::batch_of(ctx, ctx.in(2), "input 2 (C)");
  ORTM_DISPATCH_FLOAT(
      ctx.in(0).dtype(), ctx,
      run_cuda(ctx, ctx.in(0), batch, linalg::ormqr_grad_fn<scalar_t>(ctx), "OrmqrGrad"));
}

}  // namespace ortmodule
