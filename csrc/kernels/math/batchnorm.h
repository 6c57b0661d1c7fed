// Per-element batch-normalization formulas shared by the CPU loops and the CUDA kernels.
// Statistics are carried in double so float inputs keep parity with PyTorch's accumulation.
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/math/host_device.h"

namespace ortmodule {

ORTM_HOST_DEVICE double batchnorm_inv_std(double var, double eps) { return 1.0 / sqrt(var + eps); }

// PyTorch tracks the unbiased variance. A single sample per channel has none; the biased value
// (zero) is kept rather than dividing by zero.
ORTM_HOST_DEVICE double batchnorm_unbiased_var(double var_biased, int64_t count) {
  return count > 1 ? var_biased * static_cast<double>(count) / static_cast<double>(count - 1)
                   : var_biased;
}

// ONNX momentum weights the old value: PyTorch's momentum m arrives as 1 - m.
ORTM_HOST_DEVICE double batchnorm_running_update(double running, double batch, double momentum) {
  return momentum * running + (1.0 - momentum) * batch;
}

// y = (x - mean) * inv_std * scale + bias is applied as y = x * alpha + beta so the per-element
// work is one fused multiply-add, with alpha and beta computed once per channel.
ORTM_HOST_DEVICE double batchnorm_alpha(double scale, double inv_std) { return scale * inv_std; }
ORTM_HOST_DEVICE double batchnorm_beta(double bias, double mean, double alpha) {
  return bias - mean * alpha;
}

// Gradient of the training-mode output with respect to x, given per-channel means over the
// batch of dy and of dy * xhat (xhat = (x - mean) * inv_std):
//   dx = scale * inv_std * (dy - mean(dy) - xhat * mean(dy * xhat))
ORTM_HOST_DEVICE double batchnorm_dx(double dy, double x, double mean, double inv_std, double scale,
                                     double mean_dy, double mean_dy_xhat) {
  const double xhat = (x - mean) * inv_std;
  return scale * inv_std * (dy - mean_dy - xhat * mean_dy_xhat);
}

}  // namespace ortmodule
