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

// y = (x - mean) * inv_std * scale + bias is applied as y = (x - mean) * alpha + bias, with
// alpha computed once per channel. Centring first (rather than x * alpha + (bias - mean * alpha))
// keeps data far from zero from cancelling in the last add.
ORTM_HOST_DEVICE double batchnorm_alpha(double scale, double inv_std) { return scale * inv_std; }

// One output element, in double: with few samples per channel alpha can be large, and a mean
// rounded to float would cost digits.
ORTM_HOST_DEVICE double batchnorm_affine(double x, double mean, double alpha, double bias) {
  return (x - mean) * alpha + bias;
}

// dy * xhat of one element for the inference-mode gradient's dscale, xhat = (x - mean) *
// inv_std (in this order of operations, which the CPU and CUDA kernels share).
ORTM_HOST_DEVICE double batchnorm_dy_xhat(double dy, double x, double mean, double inv_std) {
  return dy * (x - mean) * inv_std;
}

// Batch mean and biased variance from sums taken about a shift (any value near the data, e.g.
// its first element): sum = sum(x - shift), sq = sum((x - shift)^2). The shift keeps the
// one-pass formula var = E[d^2] - E[d]^2 free of the cancellation that E[x^2] - E[x]^2 suffers
// when |mean| >> std. Rounding can leave a tiny negative variance; it is clamped to zero.
ORTM_HOST_DEVICE void batchnorm_moments(double shift, double sum, double sq, int64_t count,
                                        double* mean, double* var) {
  if (count <= 0) {
    *mean = 0.0;
    *var = 0.0;
    return;
  }
  const double n = static_cast<double>(count);
  const double mean_d = sum / n;
  const double v = sq / n - mean_d * mean_d;
  *mean = shift + mean_d;
  *var = v > 0.0 ? v : 0.0;
}

// Gradient of the training-mode output with respect to x, given per-channel means over the
// batch of dy and of dy * xhat (xhat = (x - mean) * inv_std):
//   dx = scale * inv_std * (dy - mean(dy) - xhat * mean(dy * xhat))
// rearranged per channel into dx = dy_coef * dy + xc_coef * (x - mean) + constant, so the
// per-element work is three multiply-adds.
struct BatchNormDxCoefs {
  double dy_coef, xc_coef, constant;
};

ORTM_HOST_DEVICE BatchNormDxCoefs batchnorm_dx_coefs(double scale, double inv_std, double mean_dy,
                                                     double mean_dy_xhat) {
  const double a = scale * inv_std;
  return {a, -a * inv_std * mean_dy_xhat, -a * mean_dy};
}

template <typename T>
ORTM_HOST_DEVICE T batchnorm_dx(T dy, T x_centered, T dy_coef, T xc_coef, T constant) {
  return dy * dy_coef + x_centered * xc_coef + constant;
}

}  // namespace ortmodule
