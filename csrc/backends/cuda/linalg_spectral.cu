// CUDA twins of Eigh, Svd, Pinv, MatrixRank and their gradients EighGrad, SvdGrad and
// PinvGrad: one thread per matrix runs the CPU kernels' routines (kernels/math/
// linalg_spectral*.h, Jacobi rotations in double) in a double workspace of its own, so the
// GPU computes exactly the CPU's arithmetic. Suited to the small matrices these ops see in
// models (covariances, whitening, small pseudo-inverses), batched.
#include <cfloat>
#include <cstdint>
#include <vector>

#include "kernels/cuda/cuda_common.h"
#include "kernels/math/linalg_spectral.h"
#include "kernels/math/linalg_spectral_grad.h"
#include "ops/linalg_spectral_tolerance.h"
#include "ops/op_utils.h"

namespace ortmodule {

namespace {

constexpr int kMatrixThreads = 64;

struct Dims {
  int64_t batch = 1, m = 0, n = 0;
};

Dims dims_of(const Tensor& a) {
  const Shape& s = a.shape();
  Dims d;
  d.m = s[s.size() - 2];
  d.n = s[s.size() - 1];
  d.batch = dims_product(s, 0, s.size() - 2);
  return d;
}

unsigned matrix_blocks(int64_t batch) {
  return static_cast<unsigned>((batch + kMatrixThreads - 1) / kMatrixThreads);
}

// A double workspace of `per_matrix` elements for each of `batch` matrices.
Tensor workspace(int64_t batch, int64_t per_matrix, Device device) {
  return Tensor::empty(DType::Float64, {batch * (per_matrix > 0 ? per_matrix : 1)}, device);
}

template <typename T>
const T* optional_data(const OpContext& ctx, size_t i) {
  return ctx.has_input(i) ? ctx.in(i).data<T>() : nullptr;
}

template <typename T>
__global__ void eigh_kernel(int64_t batch, int64_t n, bool lower, const T* a, T* w, T* v,
                            double* work, int64_t per) {
  const int64_t b = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (b >= batch) return;
  math::eigh_matrix(a + b * n * n, n, lower, w + b * n, v + b * n * n, work + b * per);
}

template <typename T>
__global__ void eigh_grad_kernel(int64_t batch, int64_t n, const T* w, const T* v, const T* gw,
                                 const T* gv, T* ga, double* work, int64_t per) {
  const int64_t b = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (b >= batch) return;
  math::eigh_grad_matrix(w + b * n, v + b * n * n, gw ? gw + b * n : nullptr,
                         gv ? gv + b * n * n : nullptr, n, ga + b * n * n, work + b * per);
}

template <typename T>
__global__ void svd_kernel(int64_t batch, int64_t m, int64_t n, const T* a, T* u, T* s, T* vt,
                           double* work, int64_t per) {
  const int64_t b = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (b >= batch) return;
  const int64_t k = m < n ? m : n;
  math::svd_matrix(a + b * m * n, m, n, u + b * m * k, s + b * k, vt + b * k * n, work + b * per);
}

template <typename T>
__global__ void svd_grad_kernel(int64_t batch, int64_t m, int64_t n, const T* u, const T* s,
                                const T* vt, const T* gu, const T* gs, const T* gvt, T* ga,
                                double* work, int64_t per) {
  const int64_t b = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (b >= batch) return;
  const int64_t k = m < n ? m : n;
  math::svd_grad_matrix(u + b * m * k, s + b * k, vt + b * k * n, gu ? gu + b * m * k : nullptr,
                        gs ? gs + b * k : nullptr, gvt ? gvt + b * k * n : nullptr, m, n,
                        ga + b * m * n, work + b * per);
}

// The tolerances of each matrix on the device: atol [batch] then rtol [batch].
Tensor upload_tolerances(const OpContext& ctx, int64_t batch, Device device, cudaStream_t stream) {
  const SpectralTolerances tol = spectral_tolerances(ctx);
  std::vector<double> packed(tol.atol);
  packed.insert(packed.end(), tol.rtol.begin(), tol.rtol.end());
  Tensor out = Tensor::empty(DType::Float64, {2 * batch}, device);
  // From pageable memory the copy is staged before the call returns.
  cuda::check(cudaMemcpyAsync(out.raw(), packed.data(), packed.size() * sizeof(double),
                              cudaMemcpyHostToDevice, stream),
              "spectral tolerances");
  return out;
}

template <typename T>
__global__ void pinv_kernel(int64_t batch, int64_t m, int64_t n, bool hermitian, const double* tol,
                            double eps, const T* a, T* p, double* work, int64_t per) {
  const int64_t b = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (b >= batch) return;
  math::pinv_matrix(a + b * m * n, m, n, hermitian, tol[b], tol[batch + b], eps, p + b * m * n,
                    work + b * per);
}

template <typename T>
__global__ void pinv_grad_kernel(int64_t batch, int64_t m, int64_t n, const T* a, const T* p,
                                 const T* gp, T* ga, double* work, int64_t per) {
  const int64_t b = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (b >= batch) return;
  const int64_t at = b * m * n;
  math::pinv_grad_matrix(a + at, p + at, gp + at, m, n, ga + at, work + b * per);
}

template <typename T>
__global__ void matrix_rank_kernel(int64_t batch, int64_t m, int64_t n, bool hermitian,
                                   const double* tol, double eps, const T* a, int64_t* rank,
                                   double* work, int64_t per) {
  const int64_t b = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (b >= batch) return;
  rank[b] = math::matrix_rank_matrix(a + b * m * n, m, n, hermitian, tol[b], tol[batch + b], eps,
                                     work + b * per);
}

double dtype_eps(DType dtype) { return dtype == DType::Float64 ? DBL_EPSILON : FLT_EPSILON; }

}  // namespace

void cuda_eigh(OpContext& ctx) {
  const Tensor& a = ctx.in(0);
  const Dims d = dims_of(a);
  if (d.batch == 0 || d.n == 0) return;
  const bool lower = ctx.node.attr_int("lower", 1) != 0;
  const int64_t per = math::eigh_work(d.n);
  Tensor work = workspace(d.batch, per, a.device());
  cudaStream_t stream = cuda::stream(a.device());
  ORTM_DISPATCH_FLOAT(a.dtype(), ctx, {
    eigh_kernel<scalar_t><<<matrix_blocks(d.batch), kMatrixThreads, 0, stream>>>(
        d.batch, d.n, lower, a.data<scalar_t>(), ctx.out(0).data<scalar_t>(),
        ctx.out(1).data<scalar_t>(), work.data<double>(), per);
  });
  cuda::check_launch("Eigh");
}

void cuda_eigh_grad(OpContext& ctx) {
  const Tensor& v = ctx.in(1);
  const Dims d = dims_of(v);
  if (d.batch == 0 || d.n == 0) return;
  const int64_t per = math::eigh_grad_work(d.n);
  Tensor work = workspace(d.batch, per, v.device());
  cudaStream_t stream = cuda::stream(v.device());
  ORTM_DISPATCH_FLOAT(v.dtype(), ctx, {
    eigh_grad_kernel<scalar_t><<<matrix_blocks(d.batch), kMatrixThreads, 0, stream>>>(
        d.batch, d.n, ctx.in(0).data<scalar_t>(), v.data<scalar_t>(),
        optional_data<scalar_t>(ctx, 2), optional_data<scalar_t>(ctx, 3),
        ctx.out(0).data<scalar_t>(), work.data<double>(), per);
  });
  cuda::check_launch("EighGrad");
}

void cuda_svd(OpContext& ctx) {
  const Tensor& a = ctx.in(0);
  const Dims d = dims_of(a);
  if (d.batch == 0 || d.m == 0 || d.n == 0) return;
  const int64_t per = math::svd_matrix_work(d.m, d.n);
  Tensor work = workspace(d.batch, per, a.device());
  cudaStream_t stream = cuda::stream(a.device());
  ORTM_DISPATCH_FLOAT(a.dtype(), ctx, {
    svd_kernel<scalar_t><<<matrix_blocks(d.batch), kMatrixThreads, 0, stream>>>(
        d.batch, d.m, d.n, a.data<scalar_t>(), ctx.out(0).data<scalar_t>(),
        ctx.out(1).data<scalar_t>(), ctx.out(2).data<scalar_t>(), work.data<double>(), per);
  });
  cuda::check_launch("Svd");
}

void cuda_svd_grad(OpContext& ctx) {
  const Tensor& u = ctx.in(0);
  const Dims du = dims_of(u);
  const int64_t m = du.m, n = ctx.in(2).shape().back();
  Tensor& ga = ctx.out(0);
  if (ga.numel() == 0) return;
  cudaStream_t stream = cuda::stream(u.device());
  const int64_t per = math::svd_grad_work(m, n);
  Tensor work = workspace(du.batch, per, u.device());
  ORTM_DISPATCH_FLOAT(u.dtype(), ctx, {
    svd_grad_kernel<scalar_t><<<matrix_blocks(du.batch), kMatrixThreads, 0, stream>>>(
        du.batch, m, n, u.data<scalar_t>(), ctx.in(1).data<scalar_t>(), ctx.in(2).data<scalar_t>(),
        optional_data<scalar_t>(ctx, 3), optional_data<scalar_t>(ctx, 4),
        optional_data<scalar_t>(ctx, 5), ga.data<scalar_t>(), work.data<double>(), per);
  });
  cuda::check_launch("SvdGrad");
}

void cuda_pinv(OpContext& ctx) {
  const Tensor& a = ctx.in(0);
  const Dims d = dims_of(a);
  if (d.batch == 0 || d.m == 0 || d.n == 0) return;
  const bool hermitian = ctx.node.attr_int("hermitian", 0) != 0;
  const int64_t per = math::pinv_work(d.m, d.n);
  cudaStream_t stream = cuda::stream(a.device());
  Tensor tol = upload_tolerances(ctx, d.batch, a.device(), stream);
  Tensor work = workspace(d.batch, per, a.device());
  ORTM_DISPATCH_FLOAT(a.dtype(), ctx, {
    pinv_kernel<scalar_t><<<matrix_blocks(d.batch), kMatrixThreads, 0, stream>>>(
        d.batch, d.m, d.n, hermitian, tol.data<double>(), dtype_eps(a.dtype()), a.data<scalar_t>(),
        ctx.out(0).data<scalar_t>(), work.data<double>(), per);
  });
  cuda::check_launch("Pinv");
}

void cuda_pinv_grad(OpContext& ctx) {
  const Tensor& a = ctx.in(0);
  const Dims d = dims_of(a);
  if (d.batch == 0 || d.m == 0 || d.n == 0) return;
  const int64_t per = math::pinv_grad_work(d.m, d.n);
  Tensor work = workspace(d.batch, per, a.device());
  cudaStream_t stream = cuda::stream(a.device());
  ORTM_DISPATCH_FLOAT(a.dtype(), ctx, {
    pinv_grad_kernel<scalar_t><<<matrix_blocks(d.batch), kMatrixThreads, 0, stream>>>(
        d.batch, d.m, d.n, a.data<scalar_t>(), ctx.in(1).data<scalar_t>(),
        ctx.in(2).data<scalar_t>(), ctx.out(0).data<scalar_t>(), work.data<double>(), per);
  });
  cuda::check_launch("PinvGrad");
}

void cuda_matrix_rank(OpContext& ctx) {
  const Tensor& a = ctx.in(0);
  const Dims d = dims_of(a);
  Tensor& rank = ctx.out(0);
  if (d.batch == 0) return;
  cudaStream_t stream = cuda::stream(a.device());
  if (d.m == 0 || d.n == 0) {
    cuda::check(cudaMemsetAsync(rank.raw(), 0, rank.nbytes(), stream), "MatrixRank");
    return;
  }
  const bool hermitian = ctx.node.attr_int("hermitian", 0) != 0;
  const int64_t per = math::pinv_work(d.m, d.n);
  Tensor tol = upload_tolerances(ctx, d.batch, a.device(), stream);
  Tensor work = workspace(d.batch, per, a.device());
  ORTM_DISPATCH_FLOAT(a.dtype(), ctx, {
    matrix_rank_kernel<scalar_t><<<matrix_blocks(d.batch), kMatrixThreads, 0, stream>>>(
        d.batch, d.m, d.n, hermitian, tol.data<double>(), dtype_eps(a.dtype()), a.data<scalar_t>(),
        rank.data<int64_t>(), work.data<double>(), per);
  });
  cuda::check_launch("MatrixRank");
}

}  // namespace ortmodule
