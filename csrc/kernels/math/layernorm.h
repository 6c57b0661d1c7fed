// Per-row statistics and per-element formulas of layer normalisation, shared by the CPU
// kernels (kernels/cpu/layernorm.cpp and its float32 vector rows) and the CUDA kernels
// (backends/cuda/layernorm.cu). Sums are taken in double by every caller; S is the type the
// statistics are kept in: float in the CPU's float32 vector rows and the CUDA float32 kernel,
// double in the CPU's scalar rows and for float64.
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/math/host_device.h"

namespace ortmodule {
namespace math {

// mean = sum(x) / cols
template <typename S>
ORTM_HOST_DEVICE S layernorm_mean(double sum, int64_t cols) {
  return static_cast<S>(sum / static_cast<double>(cols));
}

// inv_std = 1 / sqrt(sum((x - mean)^2) / cols + eps), the biased variance.
template <typename S>
ORTM_HOST_DEVICE S layernorm_inv_std(double centred_sq, int64_t cols, double eps) {
  using std::sqrt;
  return static_cast<S>(1.0 / sqrt(centred_sq / static_cast<double>(cols) + eps));
}

// dx = inv_std * (g - mean(g) - xhat * mean(g * xhat)), g = dy * scale.
template <typename S>
ORTM_HOST_DEVICE S layernorm_dx(S g, S xhat, S inv_std, S mean_g, S mean_gx) {
  return inv_std * (g - mean_g - xhat * mean_gx);
}

}  // namespace math
}  // namespace ortmodule
