// Batch normalization over x: [N, C, S], S = product of spatial dims (may be 1).
#pragma once

#include <cstdint>

namespace ortmodule {

// Training mode: x, scale, bias, running_*_in -> y: [N, C, S]; running_*_out, saved_mean,
// saved_inv_std: [C]. Normalises with the batch mean and biased variance;
// saved_inv_std = 1 / sqrt(var_biased + eps). Running statistics follow ONNX's momentum
// (PyTorch momentum 0.1 arrives as 0.9):
//   running_mean_out = momentum * running_mean_in + (1 - momentum) * batch_mean
//   running_var_out  = momentum * running_var_in  + (1 - momentum) * batch_var
// where batch_var is the biased variance (ONNX BatchNormalization) or, with
// unbiased_running_var (PyTorch's batch norm), var_biased * NS / (NS - 1).
// running_*_in may alias running_*_out.
template <typename T>
void batchnorm_train_forward(int64_t N, int64_t C, int64_t S, double eps, double momentum,
                             bool unbiased_running_var, const T* x, const T* scale, const T* bias,
                             const T* running_mean_in, const T* running_var_in, T* y,
                             T* running_mean_out, T* running_var_out, T* saved_mean,
                             T* saved_inv_std);

// Inference mode: x: [N, C, S], scale, bias, mean, var: [C] -> y: [N, C, S]
template <typename T>
void batchnorm_infer_forward(int64_t N, int64_t C, int64_t S, double eps, const T* x,
                             const T* scale, const T* bias, const T* mean, const T* var, T* y);

// Backward of batchnorm_infer_forward, where mean and var are constants (a module in
// eval() that still passes gradients): x, dy: [N, C, S], scale, mean, var: [C] ->
// dx = dy * scale * inv_std, dscale = sum(dy * (x - mean) * inv_std), dbias = sum(dy).
// dx, dscale, dbias nullable.
template <typename T>
void batchnorm_infer_backward(int64_t N, int64_t C, int64_t S, double eps, const T* x, const T* dy,
                              const T* scale, const T* mean, const T* var, T* dx, T* dscale,
                              T* dbias);

// Backward of batchnorm_train_forward: x, dy: [N, C, S], scale, saved_*: [C] ->
// dx: [N, C, S], dscale, dbias: [C]. Each output is nullable and is overwritten.
template <typename T>
void batchnorm_train_backward(int64_t N, int64_t C, int64_t S, const T* x, const T* dy,
                              const T* scale, const T* saved_mean, const T* saved_inv_std, T* dx,
                              T* dscale, T* dbias);

}  // namespace ortmodule
