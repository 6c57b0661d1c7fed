// Rows are independent for y and dx (parallel over rows; float32 rows go through the
// active ISA's vector kernels); dscale and dbias sum over rows, in fixed row blocks.
#include "kernels/cpu/layernorm.h"

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "kernels/cpu/cpu_isa.h"
#include "kernels/math/layernorm.h"
#include "kernels/parallel.h"

namespace ortmodule {

namespace {
int64_t row_grain(int64_t cols) { return std::max<int64_t>(1, 16384 / std::max<int64_t>(cols, 1)); }
}  // namespace

template <typename T>
void layernorm_forward(int64_t rows, int64_t cols, double eps, const T* x, const T* scale,
                       const T* bias, T* y, T* mean, T* inv_std) {
  if constexpr (std::is_same_v<T, float>) {
    if (const auto vec = vec_kernels().layernorm_forward_row) {
      parallel_for(0, rows, row_grain(cols), [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
          float m, is;
          vec(cols, eps, x + r * cols, scale, bias, y + r * cols, &m, &is);
          if (mean) mean[r] = m;
          if (inv_std) inv_std[r] = is;
        }
      });
      return;
    }
  }
  parallel_for(0, rows, row_grain(cols), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const T* xr = x + r * cols;
      // Two passes in double: the centred sum of squares keeps the variance accurate
      // for rows far from zero.
      double sum = 0;
      for (int64_t c = 0; c < cols; ++c) sum += xr[c];
      const double m = math::layernorm_mean<double>(sum, cols);
      double sq = 0;
      for (int64_t c = 0; c < cols; ++c) {
        const double d = xr[c] - m;
        sq += d * d;
      }
      const double is = math::layernorm_inv_std<double>(sq, cols, eps);
      T* yr = y + r * cols;
      for (int64_t c = 0; c < cols; ++c) {
        const double v = (xr[c] - m) * is * scale[c] + (bias ? static_cast<double>(bias[c]) : 0.0);
        yr[c] = static_cast<T>(v);
      }
      if (mean) mean[r] = static_cast<T>(m);
      if (inv_std) inv_std[r] = static_cast<T>(is);
    }
  });
}

template <typename T>
void layernorm_backward(int64_t rows, int64_t cols, const T* dy, const T* x, const T* scale,
                        const T* mean, const T* inv_std, T* dx, T* dscale, T* dbias) {
  const auto vec_dx = std::is_same_v<T, float> ? vec_kernels().layernorm_backward_row : nullptr;
  if (dx && vec_dx) {
    if constexpr (std::is_same_v<T, float>) {
      parallel_for(0, rows, row_grain(cols), [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r)
          vec_dx(cols, dy + r * cols, x + r * cols, scale, mean[r], inv_std[r], dx + r * cols);
      });
    }
  } else if (dx) {
    // dx = inv_std * (g - mean(g) - xhat * mean(g * xhat)), g = dy * scale
    parallel_for(0, rows, row_grain(cols), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const T* xr = x + r * cols;
        const T* gr = dy + r * cols;
        const double m = mean[r], is = inv_std[r];
        double sum_g = 0, sum_gx = 0;
        for (int64_t c = 0; c < cols; ++c) {
          const double g = static_cast<double>(gr[c]) * scale[c];
          sum_g += g;
          sum_gx += g * (xr[c] - m) * is;
        }
        const double mg = math::layernorm_mean<double>(sum_g, cols);
        const double mgx = math::layernorm_mean<double>(sum_gx, cols);
        T* dr = dx + r * cols;
        for (int64_t c = 0; c < cols; ++c) {
          const double g = static_cast<double>(gr[c]) * scale[c];
          const double xhat = (xr[c] - m) * is;
          dr[c] = static_cast<T>(math::layernorm_dx(g, xhat, is, mg, mgx));
        }
      }
    });
  }
  if (!dscale && !dbias) return;
  // dscale and dbias sum over rows. Fixed blocks of rows (not one per thread) sum into
  // their own partial rows in parallel, added in block order afterwards: the result does
  // not depend on the thread count, and a narrow row ([B*S, 256]) still uses every thread.
  constexpr int64_t kRowBlock = 64;
  const int64_t blocks = std::max<int64_t>(1, (rows + kRowBlock - 1) / kRowBlock);
  std::vector<double> partial(static_cast<size_t>(2 * blocks * cols), 0.0);
  parallel_for(0, blocks, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t blk = b0; blk < b1; ++blk) {
      double* s_scale = partial.data() + 2 * blk * cols;
      double* s_bias = s_scale + cols;
      for (int64_t r = blk * kRowBlock; r < std::min(rows, (blk + 1) * kRowBlock); ++r) {
        const T* xr = x + r * cols;
        const T* gr = dy + r * cols;
        const double m = mean[r], is = inv_std[r];
        for (int64_t c = 0; c < cols; ++c) {
          s_scale[c] += static_cast<double>(gr[c]) * (xr[c] - m) * is;
          s_bias[c] += gr[c];
        }
      }
    }
  });
  parallel_for(0, cols, 1024, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      double sum_scale = 0, sum_bias = 0;
      for (int64_t blk = 0; blk < blocks; ++blk) {
        sum_scale += partial[2 * blk * cols + c];
        sum_bias += partial[(2 * blk + 1) * cols + c];
      }
      if (dscale) dscale[c] = static_cast<T>(sum_scale);
      if (dbias) dbias[c] = static_cast<T>(sum_bias);
    }
  });
}

template void layernorm_forward<float>(int64_t, int64_t, double, const float*, const float*,
                                       const float*, float*, float*, float*);
template void layernorm_forward<double>(int64_t, int64_t, double, const double*, const double*,
                                        const double*, double*, double*, double*);
template void layernorm_backward<float>(int64_t, int64_t, const float*, const float*, const float*,
                                        const float*, const float*, float*, float*, float*);
template void layernorm_backward<double>(int64_t, int64_t, const double*, const double*,
                                         const double*, const double*, const double*, double*,
                                         double*, double*);

}  // namespace ortmodule
