// CUDA twins of Dropout (opset 12+: ratio and training_mode inputs, read on the host; and the
// legacy rows before 12, which run as inference) and com.microsoft DropoutGrad.
//
// The mask is the CPU's, bit for bit: element i is kept when
// math::dropout_keeps(seed, i, ratio), the counter-based generator of kernels/math/random.h,
// with the node's seed from math::dropout_seed (ops/nn_ops.cpp: dropout_stream_seed). Any
// thread can draw any element, so the CPU and CUDA kernels draw identical masks for the same
// seed whatever the launch shape.
#include <cstdint>

#include "kernels/cuda/cuda_common.h"
#include "kernels/math/random.h"
#include "ops/op_utils.h"

namespace ortmodule {

namespace {

// y = keep ? x * scale : 0, mask = keep (mask may be null); keep = true when !active.
template <typename T>
__global__ void dropout_kernel(int64_t n, uint64_t seed, double ratio, bool active, T scale,
                               const T* x, T* y, uint8_t* mask) {
  const int64_t step = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    const bool keep = !active || math::dropout_keeps(seed, static_cast<uint64_t>(i), ratio);
    if (mask) mask[i] = keep;
    y[i] = keep ? x[i] * scale : T(0);
  }
}

// dx = mask ? dy * scale : 0; dx may alias dy.
template <typename T>
__global__ void dropout_grad_kernel(int64_t n, T scale, const T* dy, const uint8_t* mask, T* dx) {
  const int64_t step = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step)
    dx[i] = mask[i] ? dy[i] * scale : T(0);
}

template <typename T>
__global__ void fill_kernel(int64_t n, T value, T* y) {
  const int64_t step = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step)
    y[i] = value;
}

}  // namespace

void cuda_dropout(OpContext& ctx) {
  const Tensor& x = ctx.in(0);
  const double ratio = dropout_ratio(ctx, 1);
  const bool active = dropout_training(ctx, 2) && ratio > 0.0;
  uint8_t* mask = ctx.has_output(1) ? ctx.out(1).data<uint8_t>() : nullptr;
  const uint64_t seed = dropout_stream_seed(ctx);
  const int64_t n = x.numel();
  ORTM_DISPATCH_FLOAT(x.dtype(), ctx, {
    if (n == 0) return;
    const scalar_t scale = static_cast<scalar_t>(active ? 1.0 / (1.0 - ratio) : 1.0);
    dropout_kernel<scalar_t><<<cuda::blocks_for(n), cuda::kThreads, 0, cuda::stream(x.device())>>>(
        n, seed, ratio, active, scale, x.data<scalar_t>(), ctx.out(0).data<scalar_t>(), mask);
    cuda::check_launch("Dropout");
  });
}

// Before opset 12 the engine runs Dropout as inference (ops/nn_ops.cpp): output = data, and
// an all-true mask (bool from opset 10, of the data's type before).
void cuda_dropout_legacy(OpContext& ctx) {
  const Tensor& x = ctx.in(0);
  Tensor& y = ctx.out(0);
  cudaStream_t stream = cuda::stream(x.device());
  if (x.nbytes() && y.raw() != x.raw())
    cuda::check(cudaMemcpyAsync(y.raw(), x.raw(), x.nbytes(), cudaMemcpyDeviceToDevice, stream),
                "Dropout (copy)");
  if (!ctx.has_output(1)) return;
  Tensor& mask = ctx.out(1);
  const int64_t n = mask.numel();
  if (n == 0) return;
  if (mask.dtype() == DType::Bool) {
    cuda::check(cudaMemsetAsync(mask.raw(), 1, mask.nbytes(), stream), "Dropout (mask)");
    return;
  }
  ORTM_DISPATCH_FLOAT(mask.dtype(), ctx, {
    fill_kernel<scalar_t>
        <<<cuda::blocks_for(n), cuda::kThreads, 0, stream>>>(n, scalar_t(1), mask.data<scalar_t>());
    cuda::check_launch("Dropout (mask)");
  });
}

void cuda_dropout_grad(OpContext& ctx) {
  const Tensor& dy = ctx.in(0);
  if (ctx.in(1).numel() != dy.numel() || dtype_size(ctx.in(1).dtype()) != 1)
    ctx.fail("mask (input 1) must be bool of dY's shape " + shape_str(dy.shape()) + ", got " +
             dtype_name(ctx.in(1).dtype()) + " " + shape_str(ctx.in(1).shape()));
  const double ratio = dropout_ratio(ctx, 2);
  const bool active = dropout_training(ctx, 3) && ratio > 0.0;
  const int64_t n = dy.numel();
  ORTM_DISPATCH_FLOAT(dy.dtype(), ctx, {
    if (n == 0) return;
    const scalar_t scale = static_cast<scalar_t>(active ? 1.0 / (1.0 - ratio) : 1.0);
    dropout_grad_kernel<scalar_t>
        <<<cuda::blocks_for(n), cuda::kThreads, 0, cuda::stream(dy.device())>>>(
            n, scale, dy.data<scalar_t>(), ctx.in(1).data<uint8_t>(), ctx.out(0).data<scalar_t>());
    cuda::check_launch("DropoutGrad");
  });
}

}  // namespace ortmodule
