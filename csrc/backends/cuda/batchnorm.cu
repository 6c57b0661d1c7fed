// CUDA twins of BatchNormalization (both version rows), ai.ortmodule BatchNormTorch,
// com.microsoft BatchNormInternal and BatchNormalizationGrad, and ai.ortmodule
// BatchNormInferenceGrad, over x: [N, C, S] (S = product of the spatial dims).
//
// Per-channel statistics and gradient sums take one block per channel: the block's threads
// stride over the channel's N * S elements (consecutive threads read consecutive addresses
// within each [S] slice), meet in a fixed shuffle tree (cuda::block_sum2, deterministic) in
// double, and then write the channel's outputs. The formulas are kernels/math/batchnorm.h,
// as on the CPU; the inference forward is element-wise.
#include <cstdint>
#include <vector>

#include "kernels/cuda/channel_reduce.cuh"
#include "kernels/cuda/cuda_common.h"
#include "kernels/math/batchnorm.h"
#include "ops/op_utils.h"

namespace ortmodule {

namespace {

// Offset of element j (of N * S) of channel c in [N, C, S].
__device__ __forceinline__ int64_t channel_at(int64_t j, int64_t c, int64_t C, int64_t S) {
  return ((j / S) * C + c) * S + j % S;
}

struct TrainArgs {
  int64_t N, C, S;
  double eps, momentum;
  bool unbiased_running_var;
};

// Training mode: batch statistics, running statistics, saved mean / inv_std and y, as
// batchnorm_train_forward (kernels/cpu/batchnorm.cpp). running_*_in may alias running_*_out:
// thread 0 of channel c's block reads both before it writes them.
template <typename T>
__global__ void __launch_bounds__(cuda::kReduceThreads)
    batchnorm_train_kernel(TrainArgs a, const T* x, const T* scale, const T* bias,
                           const T* running_mean_in, const T* running_var_in, T* y,
                           T* running_mean_out, T* running_var_out, T* saved_mean,
                           T* saved_inv_std) {
  __shared__ double shared[2 * cuda::kWarp];
  const int64_t count = a.N * a.S;
  for (int64_t c = blockIdx.x; c < a.C; c += gridDim.x) {
    // Summing about the channel's first element keeps E[d] near the spread of the data.
    const double shift = count > 0 ? static_cast<double>(x[c * a.S]) : 0.0;
    double sum = 0, sq = 0;
    for (int64_t j = threadIdx.x; j < count; j += blockDim.x) {
      const double d = static_cast<double>(x[channel_at(j, c, a.C, a.S)]) - shift;
      sum += d;
      sq += d * d;
    }
    cuda::block_sum2(&sum, &sq, shared);
    double mean, var;
    batchnorm_moments(shift, sum, sq, count, &mean, &var);
    const double inv_std = batchnorm_inv_std(var, a.eps);
    if (threadIdx.x == 0) {
      saved_mean[c] = static_cast<T>(mean);
      saved_inv_std[c] = static_cast<T>(inv_std);
      const double rm = running_mean_in[c], rv = running_var_in[c];
      running_mean_out[c] = static_cast<T>(batchnorm_running_update(rm, mean, a.momentum));
      running_var_out[c] = static_cast<T>(batchnorm_running_update(
          rv, a.unbiased_running_var ? batchnorm_unbiased_var(var, count) : var, a.momentum));
    }
    const double alpha = batchnorm_alpha(scale[c], inv_std), b = bias[c];
    for (int64_t j = threadIdx.x; j < count; j += blockDim.x) {
      const int64_t at = channel_at(j, c, a.C, a.S);
      y[at] = static_cast<T>(batchnorm_affine(x[at], mean, alpha, b));
    }
  }
}

// Inference mode, one thread per element: y = (x - mean) * scale * inv_std + bias.
template <typename T>
__global__ void batchnorm_infer_kernel(int64_t n, int64_t C, int64_t S, double eps, const T* x,
                                       const T* scale, const T* bias, const T* mean, const T* var,
                                       T* y) {
  const int64_t step = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    const int64_t c = (i / S) % C;
    const double alpha = batchnorm_alpha(scale[c], batchnorm_inv_std(var[c], eps));
    y[i] = static_cast<T>(batchnorm_affine(x[i], mean[c], alpha, bias[c]));
  }
}

// Backward of the training form (BatchNormalizationGrad), as batchnorm_train_backward: sums
// of dy and dy * (x - mean) per channel, then dx = dy_coef * dy + xc_coef * (x - mean) +
// constant. dx, dscale, dbias nullable.
template <typename T>
__global__ void __launch_bounds__(cuda::kReduceThreads)
    batchnorm_train_grad_kernel(int64_t N, int64_t C, int64_t S, const T* x, const T* dy,
                                const T* scale, const T* saved_mean, const T* saved_inv_std, T* dx,
                                T* dscale, T* dbias) {
  __shared__ double shared[2 * cuda::kWarp];
  const int64_t count = N * S;
  for (int64_t c = blockIdx.x; c < C; c += gridDim.x) {
    // The mean is saved in T, so centring x in T adds no rounding beyond the subtraction.
    const T mean = saved_mean[c];
    const double inv_std = saved_inv_std[c];
    double sum_dy = 0, sum_dy_xc = 0;
    for (int64_t j = threadIdx.x; j < count; j += blockDim.x) {
      const int64_t at = channel_at(j, c, C, S);
      const T g = dy[at];
      sum_dy += g;
      sum_dy_xc += g * (x[at] - mean);
    }
    cuda::block_sum2(&sum_dy, &sum_dy_xc, shared);
    const double sum_dy_xhat = sum_dy_xc * inv_std;
    if (threadIdx.x == 0) {
      if (dbias != nullptr) dbias[c] = static_cast<T>(sum_dy);
      if (dscale != nullptr) dscale[c] = static_cast<T>(sum_dy_xhat);
    }
    if (dx == nullptr || count == 0) continue;
    const double n_d = static_cast<double>(count);
    const BatchNormDxCoefs k =
        batchnorm_dx_coefs(scale[c], inv_std, sum_dy / n_d, sum_dy_xhat / n_d);
    const T dy_coef = static_cast<T>(k.dy_coef), xc_coef = static_cast<T>(k.xc_coef);
    const T constant = static_cast<T>(k.constant);
    for (int64_t j = threadIdx.x; j < count; j += blockDim.x) {
      const int64_t at = channel_at(j, c, C, S);
      dx[at] = batchnorm_dx<T>(dy[at], x[at] - mean, dy_coef, xc_coef, constant);
    }
  }
}

// Backward of the inference form (BatchNormInferenceGrad), as batchnorm_infer_backward:
// dx = dy * scale * inv_std, dscale = sum(dy * xhat), dbias = sum(dy). Each nullable.
template <typename T>
__global__ void __launch_bounds__(cuda::kReduceThreads)
    batchnorm_infer_grad_kernel(int64_t N, int64_t C, int64_t S, double eps, const T* x,
                                const T* dy, const T* scale, const T* mean, const T* var, T* dx,
                                T* dscale, T* dbias) {
  __shared__ double shared[2 * cuda::kWarp];
  const int64_t count = N * S;
  for (int64_t c = blockIdx.x; c < C; c += gridDim.x) {
    const double inv_std = batchnorm_inv_std(var[c], eps);
    const double k = static_cast<double>(scale[c]) * inv_std;
    const double m = mean[c];
    double sum_dy = 0, sum_dy_xhat = 0;
    for (int64_t j = threadIdx.x; j < count; j += blockDim.x) {
      const int64_t at = channel_at(j, c, C, S);
      const double g = dy[at];
      sum_dy += g;
      sum_dy_xhat += batchnorm_dy_xhat(g, x[at], m, inv_std);
      if (dx != nullptr) dx[at] = static_cast<T>(g * k);
    }
    cuda::block_sum2(&sum_dy, &sum_dy_xhat, shared);
    if (threadIdx.x == 0) {
      if (dscale != nullptr) dscale[c] = static_cast<T>(sum_dy_xhat);
      if (dbias != nullptr) dbias[c] = static_cast<T>(sum_dy);
    }
  }
}

// x: [N, C, ...] -> N, C, S (the shape rule has checked the ranks and parameter shapes).
void dims_of(const Shape& x, int64_t* N, int64_t* C, int64_t* S) {
  *N = x[0];
  *C = x[1];
  *S = dims_product(x, 2, x.size());
}

template <typename T>
void launch_batchnorm(OpContext& ctx) {
  int64_t N, C, S;
  dims_of(ctx.in(0).shape(), &N, &C, &S);
  if (C == 0) return;
  // Defaults are float32 values, as ONNX attributes are (and as cpu_batchnorm reads them).
  const double eps = ctx.node.attr_float("epsilon", 1e-5f);
  const double momentum = ctx.node.attr_float("momentum", 0.9f);
  const bool training = ctx.node.attr_int("training_mode", 0) != 0;
  const bool unbiased =
      ctx.node.op_type == "BatchNormTorch" || ctx.node.attr_int("unbiased_running_var", 0) != 0;
  const Device device = ctx.out(0).device();
  cudaStream_t stream = cuda::stream(device);
  auto in = [&](size_t i) { return ctx.in(i).data<T>(); };
  T* y = ctx.out(0).data<T>();
  if (!training) {
    const int64_t n = N * C * S;
    if (n == 0) return;
    batchnorm_infer_kernel<T><<<cuda::blocks_for(n), cuda::kThreads, 0, stream>>>(
        n, C, S, eps, in(0), in(1), in(2), in(3), in(4), y);
    cuda::check_launch("BatchNormalization (inference)");
    return;
  }
  // Outputs the graph does not consume still need somewhere to go.
  std::vector<Tensor> scratch;
  auto out = [&](size_t i) {
    if (ctx.has_output(i)) return ctx.out(i).data<T>();
    scratch.push_back(Tensor::empty(ctx.in(0).dtype(), {C}, device));
    return scratch.back().data<T>();
  };
  T *rm = out(1), *rv = out(2), *sm = out(3), *sis = out(4);
  const TrainArgs args{N, C, S, eps, momentum, unbiased};
  batchnorm_train_kernel<T><<<cuda::item_blocks(C), cuda::kReduceThreads, 0, stream>>>(
      args, in(0), in(1), in(2), in(3), in(4), y, rm, rv, sm, sis);
  cuda::check_launch("BatchNormalization (training)");
}

// Output i of a gradient op, or null where the graph does not read it.
template <typename T>
T* grad_out(OpContext& ctx, size_t i) {
  return ctx.has_output(i) ? ctx.out(i).data<T>() : nullptr;
}

// BatchNormalizationGrad(dY, X, scale, saved_mean, saved_inv_std) -> dX, dScale, dBias
template <typename T>
void launch_batchnorm_grad(OpContext& ctx) {
  int64_t N, C, S;
  dims_of(ctx.in(1).shape(), &N, &C, &S);
  if (C == 0) return;
  auto in = [&](size_t i) { return ctx.in(i).data<T>(); };
  batchnorm_train_grad_kernel<T>
      <<<cuda::item_blocks(C), cuda::kReduceThreads, 0, cuda::stream(ctx.in(0).device())>>>(
          N, C, S, in(1), in(0), in(2), in(3), in(4), grad_out<T>(ctx, 0), grad_out<T>(ctx, 1),
          grad_out<T>(ctx, 2));
  cuda::check_launch("BatchNormalizationGrad");
}

// BatchNormInferenceGrad(dY, X, scale, mean, var; epsilon) -> dX, dScale, dBias
template <typename T>
void launch_batchnorm_inference_grad(OpContext& ctx) {
  int64_t N, C, S;
  dims_of(ctx.in(1).shape(), &N, &C, &S);
  if (C == 0) return;
  const double eps = ctx.node.attr_float("epsilon", 1e-5f);
  auto in = [&](size_t i) { return ctx.in(i).data<T>(); };
  batchnorm_infer_grad_kernel<T>
      <<<cuda::item_blocks(C), cuda::kReduceThreads, 0, cuda::stream(ctx.in(0).device())>>>(
          N, C, S, eps, in(1), in(0), in(2), in(3), in(4), grad_out<T>(ctx, 0), grad_out<T>(ctx, 1),
          grad_out<T>(ctx, 2));
  cuda::check_launch("BatchNormInferenceGrad");
}

}  // namespace

void cuda_batchnorm(OpContext& ctx) {
  ORTM_DISPATCH_FLOAT(ctx.in(0).dtype(), ctx, launch_batchnorm<scalar_t>(ctx));
}

void cuda_batchnorm_grad(OpContext& ctx) {
  ORTM_DISPATCH_FLOAT(ctx.in(0).dtype(), ctx, launch_batchnorm_grad<scalar_t>(ctx));
}

void cuda_batchnorm_inference_grad(OpContext& ctx) {
  ORTM_DISPATCH_FLOAT(ctx.in(0).dtype(), ctx, launch_batchnorm_inference_grad<scalar_t>(ctx));
}

}  // namespace ortmodule
