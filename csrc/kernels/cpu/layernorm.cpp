// Rows are independent for y and dx (parallel over rows; float32 rows go through the
// active ISA's vector kernels); dscale and dbias sum over rows, in fixed row blocks.
// LayerNormalization and RMS normalisation share one body: kCentred = false takes the
// mean as 0 (no centring pass, no mean(g) term in dx, no bias).
#include "kernels/cpu/layernorm.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "kernels/cpu/cpu_isa.h"
#include "kernels/math/layernorm.h"
#include "kernels/parallel.h"

namespace ortmodule {

namespace {
int64_t row_grain(int64_t cols) { return std::max<int64_t>(1, 16384 / std::max<int64_t>(cols, 1)); }

// mean is written only when kCentred (RMS normalisation has none).
template <typename T, bool kCentred>
void norm_forward(int64_t rows, int64_t cols, double eps, const T* x, const T* scale, const T* bias,
                  T* y, T* mean, T* inv_std) {
  if constexpr (std::is_same_v<T, float>) {
    const VecKernels& vec = vec_kernels();
    if (kCentred ? vec.layernorm_forward_row != nullptr : vec.rmsnorm_forward_row != nullptr) {
      parallel_for(0, rows, row_grain(cols), [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
          float m = 0, is;
          if constexpr (kCentred)
            vec.layernorm_forward_row(cols, eps, x + r * cols, scale, bias, y + r * cols, &m, &is);
          else
            vec.rmsnorm_forward_row(cols, eps, x + r * cols, scale, y + r * cols, &is);
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
      double m = 0;
      if constexpr (kCentred) {
        double sum = 0;
        for (int64_t c = 0; c < cols; ++c) sum += xr[c];
        m = math::layernorm_mean<double>(sum, cols);
      }
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

// mean is read only when kCentred; dbias is null when not.
template <typename T, bool kCentred>
void norm_backward(int64_t rows, int64_t cols, const T* dy, const T* x, const T* scale,
                   const T* mean, const T* inv_std, T* dx, T* dscale, T* dbias) {
  auto row_mean = [&](int64_t r) { return kCentred ? static_cast<double>(mean[r]) : 0.0; };
  const VecKernels& vec = vec_kernels();
  const bool vec_dx = std::is_same_v<T, float> && (kCentred ? vec.layernorm_backward_row != nullptr
                                                            : vec.rmsnorm_backward_row != nullptr);
  // dscale and dbias sum over rows. Fixed blocks of rows (not one per thread) sum into
  // their own partial rows in parallel, added in block order afterwards: the result does
  // not depend on the thread count, and a narrow row ([B*S, 256]) still uses every thread.
  constexpr int64_t kRowBlock = 64;
  const int64_t blocks = std::max<int64_t>(1, (rows + kRowBlock - 1) / kRowBlock);
  // The vector rows of dx; with the vector parameter sums and blocks enough to share out,
  // inside those blocks (one pass over dy and x while a block is in cache, instead of two).
  const bool vec_params = std::is_same_v<T, float> && vec.norm_param_grad_rows != nullptr;
  const bool dx_in_blocks = dx && vec_dx && vec_params && (dscale || dbias) &&
                            blocks >= 2 * static_cast<int64_t>(parallel_threads());
  const auto vec_dx_rows = [&](int64_t r0, int64_t r1) {
    if constexpr (std::is_same_v<T, float>) {
      for (int64_t r = r0; r < r1; ++r) {
        if constexpr (kCentred)
          vec.layernorm_backward_row(cols, dy + r * cols, x + r * cols, scale, mean[r], inv_std[r],
                                     dx + r * cols);
        else
          vec.rmsnorm_backward_row(cols, dy + r * cols, x + r * cols, scale, inv_std[r],
                                   dx + r * cols);
      }
    }
  };
  if (dx && vec_dx) {
    if (!dx_in_blocks) parallel_for(0, rows, row_grain(cols), vec_dx_rows);
  } else if (dx) {
    // dx = inv_std * (g - mean(g) - xhat * mean(g * xhat)), g = dy * scale (mean(g) taken
    // as 0 uncentred)
    parallel_for(0, rows, row_grain(cols), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const T* xr = x + r * cols;
        const T* gr = dy + r * cols;
        const double m = row_mean(r), is = inv_std[r];
        double sum_g = 0, sum_gx = 0;
        for (int64_t c = 0; c < cols; ++c) {
          const double g = static_cast<double>(gr[c]) * scale[c];
          sum_g += g;
          sum_gx += g * (xr[c] - m) * is;
        }
        const double mg = kCentred ? math::layernorm_mean<double>(sum_g, cols) : 0.0;
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
  std::vector<double> partial(static_cast<size_t>(2 * blocks * cols), 0.0);
  parallel_for(0, blocks, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t blk = b0; blk < b1; ++blk) {
      double* s_scale = partial.data() + 2 * blk * cols;
      double* s_bias = s_scale + cols;
      const int64_t first = blk * kRowBlock, end = std::min(rows, (blk + 1) * kRowBlock);
      if constexpr (std::is_same_v<T, float>) {
        if (vec_params) {
          if (dx_in_blocks) vec_dx_rows(first, end);
          vec.norm_param_grad_rows(end - first, cols, dy + first * cols, x + first * cols,
                                   kCentred ? mean + first : nullptr, inv_std + first, s_scale,
                                   dbias ? s_bias : nullptr);
          continue;
        }
      }
      for (int64_t r = first; r < end; ++r) {
        const T* xr = x + r * cols;
        const T* gr = dy + r * cols;
        const double m = row_mean(r), is = inv_std[r];
        for (int64_t c = 0; c < cols; ++c)
          s_scale[c] += static_cast<double>(gr[c]) * (xr[c] - m) * is;
        if (dbias)
          for (int64_t c = 0; c < cols; ++c) s_bias[c] += gr[c];
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
}  // namespace

template <typename T>
void layernorm_forward(int64_t rows, int64_t cols, double eps, const T* x, const T* scale,
                       const T* bias, T* y, T* mean, T* inv_std) {
  norm_forward<T, true>(rows, cols, eps, x, scale, bias, y, mean, inv_std);
}

template <typename T>
void layernorm_backward(int64_t rows, int64_t cols, const T* dy, const T* x, const T* scale,
                        const T* mean, const T* inv_std, T* dx, T* dscale, T* dbias) {
  norm_backward<T, true>(rows, cols, dy, x, scale, mean, inv_std, dx, dscale, dbias);
}

template <typename T>
void rmsnorm_forward(int64_t rows, int64_t cols, double eps, const T* x, const T* scale, T* y,
                     T* inv_rms) {
  norm_forward<T, false>(rows, cols, eps, x, scale, nullptr, y, nullptr, inv_rms);
}

template <typename T>
void rmsnorm_backward(int64_t rows, int64_t cols, const T* dy, const T* x, const T* scale,
                      const T* inv_rms, T* dx, T* dscale) {
  norm_backward<T, false>(rows, cols, dy, x, scale, nullptr, inv_rms, dx, dscale, nullptr);
}

#define ORTM_INSTANTIATE_NORM(T)                                                                  \
  template void layernorm_forward<T>(int64_t, int64_t, double, const T*, const T*, const T*, T*,  \
                                     T*, T*);                                                     \
  template void layernorm_backward<T>(int64_t, int64_t, const T*, const T*, const T*, const T*,   \
                                      const T*, T*, T*, T*);                                      \
  template void rmsnorm_forward<T>(int64_t, int64_t, double, const T*, const T*, T*, T*);         \
  template void rmsnorm_backward<T>(int64_t, int64_t, const T*, const T*, const T*, const T*, T*, \
                                    T*);
ORTM_INSTANTIATE_NORM(float)
ORTM_INSTANTIATE_NORM(double)
#undef ORTM_INSTANTIATE_NORM

}  // namespace ortmodule
