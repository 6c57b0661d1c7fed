// Batch normalization, parallel over channels: each channel's statistics and outputs are
// independent, and a chunk of channels writes only its own strided slices of y / dx.
// Sums run in double (two passes for the variance) so float inputs match PyTorch at rtol 1e-4.
#include "kernels/cpu/batchnorm.h"

#include <algorithm>

#include "kernels/math/batchnorm.h"
#include "kernels/parallel.h"

namespace ortmodule {
namespace {

// Elements touched per parallel chunk; below this threads cost more than they save.
constexpr int64_t kGrainElems = 1 << 14;

int64_t channel_grain(int64_t elems_per_channel) {
  return std::max<int64_t>(1, kGrainElems / std::max<int64_t>(1, elems_per_channel));
}

// Calls fn(v) for every element of channel c of a [N, C, S] tensor.
template <typename T, typename Fn>
void for_channel(int64_t N, int64_t C, int64_t S, int64_t c, T* data, Fn fn) {
  for (int64_t n = 0; n < N; ++n) {
    T* slice = data + (n * C + c) * S;
    for (int64_t s = 0; s < S; ++s) fn(slice[s]);
  }
}

// y = x * alpha + beta over channel c.
template <typename T>
void affine_channel(int64_t N, int64_t C, int64_t S, int64_t c, const T* x, double alpha,
                    double beta, T* y) {
  for (int64_t n = 0; n < N; ++n) {
    const int64_t base = (n * C + c) * S;
    for (int64_t s = 0; s < S; ++s) y[base + s] = static_cast<T>(x[base + s] * alpha + beta);
  }
}

}  // namespace

// x: [N, C, S], scale, bias, running_*_in: [C] -> y: [N, C, S], running_*_out, saved_*: [C]
template <typename T>
void batchnorm_train_forward(int64_t N, int64_t C, int64_t S, double eps, double momentum,
                             const T* x, const T* scale, const T* bias, const T* running_mean_in,
                             const T* running_var_in, T* y, T* running_mean_out, T* running_var_out,
                             T* saved_mean, T* saved_inv_std) {
  const int64_t count = N * S;
  parallel_for(0, C, channel_grain(3 * count), [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      double sum = 0;
      for_channel(N, C, S, c, x, [&](T v) { sum += v; });
      const double mean = count > 0 ? sum / static_cast<double>(count) : 0.0;
      double sq = 0;
      for_channel(N, C, S, c, x, [&](T v) { sq += (v - mean) * (v - mean); });
      const double var = count > 0 ? sq / static_cast<double>(count) : 0.0;
      const double inv_std = batchnorm_inv_std(var, eps);
      saved_mean[c] = static_cast<T>(mean);
      saved_inv_std[c] = static_cast<T>(inv_std);
      // Read both inputs before writing: running_*_in may alias running_*_out.
      const double rm = running_mean_in[c], rv = running_var_in[c];
      running_mean_out[c] = static_cast<T>(batchnorm_running_update(rm, mean, momentum));
      running_var_out[c] = static_cast<T>(
          batchnorm_running_update(rv, batchnorm_unbiased_var(var, count), momentum));
      const double alpha = batchnorm_alpha(scale[c], inv_std);
      affine_channel(N, C, S, c, x, alpha, batchnorm_beta(bias[c], mean, alpha), y);
    }
  });
}

// x: [N, C, S], scale, bias, mean, var: [C] -> y: [N, C, S]
template <typename T>
void batchnorm_infer_forward(int64_t N, int64_t C, int64_t S, double eps, const T* x,
                             const T* scale, const T* bias, const T* mean, const T* var, T* y) {
  parallel_for(0, C, channel_grain(N * S), [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      const double alpha = batchnorm_alpha(scale[c], batchnorm_inv_std(var[c], eps));
      affine_channel(N, C, S, c, x, alpha, batchnorm_beta(bias[c], mean[c], alpha), y);
    }
  });
}

// x, dy: [N, C, S], scale, saved_mean, saved_inv_std: [C] -> dx: [N, C, S], dscale, dbias: [C]
template <typename T>
void batchnorm_train_backward(int64_t N, int64_t C, int64_t S, const T* x, const T* dy,
                              const T* scale, const T* saved_mean, const T* saved_inv_std, T* dx,
                              T* dscale, T* dbias) {
  const int64_t count = N * S;
  parallel_for(0, C, channel_grain(3 * count), [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      const double mean = saved_mean[c], inv_std = saved_inv_std[c];
      double sum_dy = 0, sum_dy_xhat = 0;
      for (int64_t n = 0; n < N; ++n) {
        const int64_t base = (n * C + c) * S;
        for (int64_t s = 0; s < S; ++s) {
          const double g = dy[base + s];
          sum_dy += g;
          sum_dy_xhat += g * (x[base + s] - mean) * inv_std;
        }
      }
      if (dbias != nullptr) dbias[c] = static_cast<T>(sum_dy);
      if (dscale != nullptr) dscale[c] = static_cast<T>(sum_dy_xhat);
      if (dx == nullptr || count == 0) continue;
      const double mean_dy = sum_dy / static_cast<double>(count);
      const double mean_dy_xhat = sum_dy_xhat / static_cast<double>(count);
      const double gamma = scale[c];
      for (int64_t n = 0; n < N; ++n) {
        const int64_t base = (n * C + c) * S;
        for (int64_t s = 0; s < S; ++s) {
          dx[base + s] = static_cast<T>(
              batchnorm_dx(dy[base + s], x[base + s], mean, inv_std, gamma, mean_dy, mean_dy_xhat));
        }
      }
    }
  });
}

#define ORTM_INSTANTIATE_BATCHNORM(T)                                                              \
  template void batchnorm_train_forward<T>(int64_t, int64_t, int64_t, double, double, const T*,    \
                                           const T*, const T*, const T*, const T*, T*, T*, T*, T*, \
                                           T*);                                                    \
  template void batchnorm_infer_forward<T>(int64_t, int64_t, int64_t, double, const T*, const T*,  \
                                           const T*, const T*, const T*, T*);                      \
  template void batchnorm_train_backward<T>(int64_t, int64_t, int64_t, const T*, const T*,         \
                                            const T*, const T*, const T*, T*, T*, T*);

ORTM_INSTANTIATE_BATCHNORM(float)
ORTM_INSTANTIATE_BATCHNORM(double)
#undef ORTM_INSTANTIATE_BATCHNORM

}  // namespace ortmodule
