// CUDA twins of the LU family (LUFactor, LUUnpack, LUUnpackGrad, TriangularSolve, Det,
// SlogDet): one thread per matrix runs the CPU kernels' per-matrix routines
// (kernels/math/linalg_lu.h), factorizations in a double scratch buffer. Suited to the small
// matrices models factorize; LUUnpackGrad is one thread per element.
#include <cstdint>
#include <vector>

#include "kernels/cuda/cuda_common.h"
#include "kernels/math/linalg_lu.h"
#include "ops/linalg_lu_dims.h"
#include "ops/op_utils.h"

namespace ortmodule {

namespace {

// Per matrix b: work = a as double, factorized; lu (if any) = work rounded; piv, info.
template <typename T>
__global__ void lu_factor_kernel(int64_t batch, int64_t m, int64_t n, const T* a, T* lu,
                                 int32_t* piv, int32_t* info, double* work, uint8_t* odd) {
  const int64_t k = m < n ? m : n;
  const int64_t step = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t b = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; b < batch;
       b += step) {
    double* w = work + b * m * n;
    for (int64_t e = 0; e < m * n; ++e) w[e] = static_cast<double>(a[b * m * n + e]);
    bool o = false;
    const int64_t i = math::lu_factor_inplace(w, m, n, piv + b * k, &o);
    if (info) info[b] = static_cast<int32_t>(i);
    if (odd) odd[b] = o;
    if (lu)
      for (int64_t e = 0; e < m * n; ++e) lu[b * m * n + e] = static_cast<T>(w[e]);
  }
}

template <typename T, typename I>
__global__ void lu_unpack_kernel(int64_t batch, int64_t m, int64_t n, const T* lu, const I* piv,
                                 T* l, T* u, T* p, int64_t* perm) {
  const int64_t k = m < n ? m : n;
  const int64_t step = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t b = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; b < batch;
       b += step) {
    const T* a = lu + b * m * n;
    if (l)
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < k; ++j)
          l[b * m * k + i * k + j] = i > j ? a[i * n + j] : T(i == j ? 1 : 0);
    if (u)
      for (int64_t i = 0; i < k; ++i)
        for (int64_t j = 0; j < n; ++j) u[b * k * n + i * n + j] = j >= i ? a[i * n + j] : T(0);
    if (p) {
      int64_t* pr = perm + b * m;
      // Pivots outside [1, m] (checked on the CPU) leave the identity.
      if (!math::lu_permutation(piv + b * k, m, k, pr))
        for (int64_t i = 0; i < m; ++i) pr[i] = i;
      T* pb = p + b * m * m;
      for (int64_t e = 0; e < m * m; ++e) pb[e] = T(0);
      for (int64_t i = 0; i < m; ++i) pb[pr[i] * m + i] = T(1);
    }
  }
}

template <typename T>
__global__ void lu_unpack_grad_kernel(int64_t total, int64_t m, int64_t n, const T* dl, const T* du,
                                      T* y) {
  const int64_t k = m < n ? m : n;
  const int64_t step = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
       e += step)
    y[e] = math::lu_unpack_grad_at(dl, du, e, m, n, k);
}

template <typename T>
__global__ void triangular_solve_kernel(int64_t batch, math::TriangularSystem s,
                                        math::BatchBroadcast bb, const T* a, const T* b, T* x) {
  const int64_t an = s.n * s.n, bn = s.n * s.r;
  const int64_t step = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < batch;
       i += step) {
    int64_t ia = 0, ib = 0;
    math::batch_broadcast_index(bb, i, &ia, &ib);
    for (int64_t e = 0; e < bn; ++e) x[i * bn + e] = b[ib * bn + e];
    math::triangular_solve_matrix(s, a + ia * an, x + i * bn);
  }
}

// From factorized matrices (work, odd): det into y0, or sign into y0 and log|det| into y1.
template <typename T>
__global__ void det_kernel(int64_t batch, int64_t n, const double* work, const uint8_t* odd, T* y0,
                           T* y1, bool slog) {
  const int64_t step = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t b = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; b < batch;
       b += step) {
    const double* lu = work + b * n * n;
    if (!slog) {
      y0[b] = static_cast<T>(math::lu_det(lu, n, odd[b] != 0));
      continue;
    }
    double s = 0, l = 0;
    math::lu_slogdet(lu, n, odd[b] != 0, &s, &l);
    if (y0) y0[b] = static_cast<T>(s);
    if (y1) y1[b] = static_cast<T>(l);
  }
}

// Factorizes input 0 on the device: the double factors and swap parities, in scratch
// tensors; lu, piv and info where given.
template <typename T>
void factorize(OpContext& ctx, const MatrixBatch& mb, T* lu, int32_t* piv, int32_t* info,
               Tensor* work, Tensor* odd) {
  const Device device = ctx.in(0).device();
  *work = Tensor::empty(DType::Float64, {mb.batch * mb.m * mb.n}, device);
  *odd = Tensor::empty(DType::UInt8, {mb.batch}, device);
  Tensor piv_scratch;
  if (!piv) {
    piv_scratch = Tensor::empty(DType::Int32, {mb.batch * mb.k()}, device);
    piv = piv_scratch.data<int32_t>();
  }
  cudaStream_t stream = cuda::stream(device);
  lu_factor_kernel<T><<<cuda::blocks_for(mb.batch), cuda::kThreads, 0, stream>>>(
      mb.batch, mb.m, mb.n, ctx.in(0).data<T>(), lu, piv, info, work->data<double>(),
      odd->data<uint8_t>());
  cuda::check_launch("LUFactor");
}

}  // namespace

void cuda_lu_factor(OpContext& ctx) {
  const MatrixBatch mb = matrix_batch(ctx, 0, false);
  if (mb.batch == 0) return;
  const bool check = ctx.node.attr_int("check_errors", 0) != 0;
  const Device device = ctx.in(0).device();
  Tensor info_scratch;
  int32_t* info = ctx.has_output(2) ? ctx.out(2).data<int32_t>() : nullptr;
  if (!info && check) {
    info_scratch = Tensor::empty(DType::Int32, {mb.batch}, device);
    info = info_scratch.data<int32_t>();
  }
  ORTM_DISPATCH_FLOAT(ctx.in(0).dtype(), ctx, {
    Tensor work, odd;
    factorize<scalar_t>(ctx, mb, ctx.has_output(0) ? ctx.out(0).data<scalar_t>() : nullptr,
                        ctx.has_output(1) ? ctx.out(1).data<int32_t>() : nullptr, info, &work,
                        &odd);
  });
  if (!check) return;
  std::vector<int32_t> host(static_cast<size_t>(mb.batch));
  cudaStream_t stream = cuda::stream(device);
  cuda::check(cudaMemcpyAsync(host.data(), info, host.size() * sizeof(int32_t),
                              cudaMemcpyDeviceToHost, stream),
              "LUFactor info");
  cuda::check(cudaStreamSynchronize(stream), "LUFactor info");
  lu_check_info(ctx, host.data(), mb.batch);
}

void cuda_lu_unpack(OpContext& ctx) {
  const MatrixBatch mb = matrix_batch(ctx, 0, false);
  if (mb.batch == 0) return;
  const Device device = ctx.in(0).device();
  Tensor perm = Tensor::empty(DType::Int64, {mb.batch * mb.m}, device);
  cudaStream_t stream = cuda::stream(device);
  ORTM_DISPATCH_FLOAT(ctx.in(0).dtype(), ctx, {
    scalar_t* l = ctx.has_output(0) ? ctx.out(0).data<scalar_t>() : nullptr;
    scalar_t* u = ctx.has_output(1) ? ctx.out(1).data<scalar_t>() : nullptr;
    scalar_t* p = ctx.has_output(2) ? ctx.out(2).data<scalar_t>() : nullptr;
    if (ctx.in(1).dtype() == DType::Int32)
      lu_unpack_kernel<scalar_t, int32_t>
          <<<cuda::blocks_for(mb.batch), cuda::kThreads, 0, stream>>>(
              mb.batch, mb.m, mb.n, ctx.in(0).data<scalar_t>(), ctx.in(1).data<int32_t>(), l, u, p,
              perm.data<int64_t>());
    else
      lu_unpack_kernel<scalar_t, int64_t>
          <<<cuda::blocks_for(mb.batch), cuda::kThreads, 0, stream>>>(
              mb.batch, mb.m, mb.n, ctx.in(0).data<scalar_t>(), ctx.in(1).data<int64_t>(), l, u, p,
              perm.data<int64_t>());
  });
  cuda::check_launch("LUUnpack");
}

void cuda_lu_unpack_grad(OpContext& ctx) {
  const MatrixBatch mb = matrix_batch(ctx, 0, false);
  const int64_t total = mb.batch * mb.m * mb.n;
  if (total == 0) return;
  cudaStream_t stream = cuda::stream(ctx.in(0).device());
  ORTM_DISPATCH_FLOAT(ctx.in(0).dtype(), ctx, {
    lu_unpack_grad_kernel<scalar_t><<<cuda::blocks_for(total), cuda::kThreads, 0, stream>>>(
        total, mb.m, mb.n, ctx.has_input(1) ? ctx.in(1).data<scalar_t>() : nullptr,
        ctx.has_input(2) ? ctx.in(2).data<scalar_t>() : nullptr, ctx.out(0).data<scalar_t>());
  });
  cuda::check_launch("LUUnpackGrad");
}

void cuda_triangular_solve(OpContext& ctx) {
  const TriangularSolveDims d = triangular_solve_dims(ctx);
  if (d.batch == 0 || d.system.n * d.system.r == 0) return;
  cudaStream_t stream = cuda::stream(ctx.in(0).device());
  ORTM_DISPATCH_FLOAT(ctx.in(0).dtype(), ctx, {
    triangular_solve_kernel<scalar_t><<<cuda::blocks_for(d.batch), cuda::kThreads, 0, stream>>>(
        d.batch, d.system, d.batches, ctx.in(0).data<scalar_t>(), ctx.in(1).data<scalar_t>(),
        ctx.out(0).data<scalar_t>());
  });
  cuda::check_launch("TriangularSolve");
}

namespace {

void det_common(OpContext& ctx, bool slog) {
  const MatrixBatch mb = matrix_batch(ctx, 0, true);
  if (mb.batch == 0) return;
  cudaStream_t stream = cuda::stream(ctx.in(0).device());
  ORTM_DISPATCH_FLOAT(ctx.in(0).dtype(), ctx, {
    Tensor work, odd;
    factorize<scalar_t>(ctx, mb, nullptr, nullptr, nullptr, &work, &odd);
    scalar_t* y0 = ctx.has_output(0) ? ctx.out(0).data<scalar_t>() : nullptr;
    scalar_t* y1 = ctx.has_output(1) ? ctx.out(1).data<scalar_t>() : nullptr;
    det_kernel<scalar_t><<<cuda::blocks_for(mb.batch), cuda::kThreads, 0, stream>>>(
        mb.batch, mb.n, work.data<double>(), odd.data<uint8_t>(), y0, y1, slog);
  });
  cuda::check_launch(slog ? "SlogDet" : "Det");
}

}  // namespace

void cuda_det(OpContext& ctx) { det_common(ctx, false); }
void cuda_slog_det(OpContext& ctx) { det_common(ctx, true); }

}  // namespace ortmodule
