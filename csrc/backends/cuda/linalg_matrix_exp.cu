// CUDA twin of MatrixExp: one thread per matrix runs the CPU kernel's per-matrix routine
// (kernels/math/linalg_matrix_exp.h) in a double scratch buffer. Suited to the small matrices
// models exponentiate (rotations, flows, Lie-group layers).
#include <cstdint>

#include "kernels/cuda/cuda_common.h"
#include "kernels/math/linalg_matrix_exp.h"
#include "ops/linalg_lu_dims.h"
#include "ops/op_utils.h"

namespace ortmodule {

namespace {

// Per matrix b: x = a as double, exponentiated with `work` and `piv`, rounded into y.
template <typename T>
__global__ void matrix_exp_kernel(int64_t batch, int64_t n, const T* a, T* y, double* x,
                                  double* work, int32_t* piv) {
  const int64_t nn = n * n;
  const int64_t step = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t b = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; b < batch;
       b += step) {
    double* xb = x + b * nn;
    for (int64_t e = 0; e < nn; ++e) xb[e] = static_cast<double>(a[b * nn + e]);
    math::matrix_exp_inplace(xb, n, work + b * math::kMatrixExpWorkMatrices * nn, piv + b * n);
    for (int64_t e = 0; e < nn; ++e) y[b * nn + e] = static_cast<T>(xb[e]);
  }
}

}  // namespace

void cuda_matrix_exp(OpContext& ctx) {
  const MatrixBatch mb = matrix_batch(ctx, 0, true);
  const int64_t n = mb.n, nn = n * n;
  if (mb.batch == 0 || nn == 0) return;
  const Device device = ctx.in(0).device();
  Tensor x = Tensor::empty(DType::Float64, {mb.batch * nn}, device);
  Tensor work =
      Tensor::empty(DType::Float64, {mb.batch * math::kMatrixExpWorkMatrices * nn}, device);
  Tensor piv = Tensor::empty(DType::Int32, {mb.batch * n}, device);
  cudaStream_t stream = cuda::stream(device);
  ORTM_DISPATCH_FLOAT(ctx.in(0).dtype(), ctx, {
    matrix_exp_kernel<scalar_t><<<cuda::blocks_for(mb.batch), cuda::kThreads, 0, stream>>>(
        mb.batch, n, ctx.in(0).data<scalar_t>(), ctx.out(0).data<scalar_t>(), x.data<double>(),
        work.data<double>(), piv.data<int32_t>());
  });
  cuda::check_launch("MatrixExp");
}

}  // namespace ortmodule
