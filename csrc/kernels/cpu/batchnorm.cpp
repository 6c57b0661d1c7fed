// Batch normalization, parallel over channels: each channel's statistics and outputs are
// independent, and a chunk of channels writes only its own strided slices of y / dx.
//
// The forward statistics take one pass over x (sums about a shift, see batchnorm_moments)
// rather than two; see ChannelSums for how sums stay accurate at vector speed.
#include "kernels/cpu/batchnorm.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kernels/math/batchnorm.h"
#include "kernels/parallel.h"

namespace ortmodule {
namespace {

// Elements touched per parallel chunk; below this threads cost more than they save.
constexpr int64_t kGrainElems = 1 << 14;

int64_t channel_grain(int64_t elems_per_channel) {
  return std::max<int64_t>(1, kGrainElems / std::max<int64_t>(1, elems_per_channel));
}

// Per-channel sums run on vector accumulators: GCC/Clang vector extensions (16 bytes: SSE2
// on x86-64, NEON on arm64), because the compiler will not vectorise a floating-point sum
// by itself (that reorders the adds). Two accumulators of each kind hide the add latency.
//
// Acc is the accumulation type. The forward statistics accumulate in double: a one-pass
// variance E[d^2] - E[d]^2 cancels, and double keeps that harmless for float inputs. The
// backward sums have no such cancellation and accumulate in T within blocks of about kBlock
// elements, then in double across blocks: a float partial sum covers a few dozen elements, as
// in PyTorch's float reductions, while the total over millions stays exact to double precision.
// Blocks span the [S] slices of a channel, so small images (S = 16) pay no per-slice
// horizontal sums.
constexpr int64_t kBlock = 512;

template <typename T, typename Acc>
class ChannelSums {
 public:
  // Elements per accumulator: 16 bytes of Acc (wider vectors would need AVX to pass by value).
  static constexpr int64_t kWidth = 16 / sizeof(Acc);
  typedef Acc Vec __attribute__((vector_size(16)));

  // kWidth elements from p, converted to Acc.
  static Vec load(const T* p) {
    typedef T In __attribute__((vector_size(kWidth * sizeof(T))));
    In v;
    std::memcpy(&v, p, sizeof v);
    return __builtin_convertvector(v, Vec);
  }

  // Adds the terms of 2 * kWidth elements: a0, b0 for the first kWidth, a1, b1 the rest.
  void add(Vec a0, Vec b0, Vec a1, Vec b1) {
    a0_ += a0;
    b0_ += b0;
    a1_ += a1;
    b1_ += b1;
  }
  // Adds the terms of one element.
  void add(Acc a, Acc b) {
    a0_[0] += a;
    b0_[0] += b;
  }
  // Call after each slice of n elements, to close blocks.
  void added(int64_t n) {
    pending_ += n;
    if (pending_ >= kBlock) flush();
  }

  // Totals so far, in double.
  double a() {
    flush();
    return a_;
  }
  double b() {
    flush();
    return b_;
  }

 private:
  void flush() {
    for (int64_t k = 0; k < kWidth; ++k) {
      a_ += static_cast<double>(a0_[k]) + a1_[k];
      b_ += static_cast<double>(b0_[k]) + b1_[k];
    }
    a0_ = a1_ = b0_ = b1_ = Vec{};
    pending_ = 0;
  }

  Vec a0_ = {}, a1_ = {}, b0_ = {}, b1_ = {};
  int64_t pending_ = 0;
  double a_ = 0, b_ = 0;
};

// Adds sum(x - shift) and sum((x - shift)^2) over x[0, n) to sums, in double.
template <typename T>
void add_shifted_sums(const T* x, int64_t n, double shift, ChannelSums<T, double>* sums) {
  using Sums = ChannelSums<T, double>;
  constexpr int64_t W = Sums::kWidth;
  int64_t i = 0;
  for (; i + 2 * W <= n; i += 2 * W) {
    const auto d0 = Sums::load(x + i) - shift, d1 = Sums::load(x + i + W) - shift;
    sums->add(d0, d0 * d0, d1, d1 * d1);
  }
  for (; i < n; ++i) {
    const double d = x[i] - shift;
    sums->add(d, d * d);
  }
  sums->added(n);
}

// Adds sum(dy) and sum(dy * (x - mean)) over [0, n) to sums, in T within blocks.
template <typename T>
void add_grad_sums(const T* dy, const T* x, int64_t n, T mean, ChannelSums<T, T>* sums) {
  using Sums = ChannelSums<T, T>;
  constexpr int64_t W = Sums::kWidth;
  int64_t i = 0;
  for (; i + 2 * W <= n; i += 2 * W) {
    const auto g0 = Sums::load(dy + i), g1 = Sums::load(dy + i + W);
    const auto xc0 = Sums::load(x + i) - mean, xc1 = Sums::load(x + i + W) - mean;
    sums->add(g0, g0 * xc0, g1, g1 * xc1);
  }
  for (; i < n; ++i) sums->add(dy[i], dy[i] * (x[i] - mean));
  sums->added(n);
}

// y = (x - mean) * alpha + bias over channel c. In double: with few samples per channel
// alpha = scale * inv_std can be large, and mean rounded to float would cost digits.
template <typename T>
void affine_channel(int64_t N, int64_t C, int64_t S, int64_t c, const T* x, double mean,
                    double alpha, double bias, T* y) {
  for (int64_t n = 0; n < N; ++n) {
    const int64_t base = (n * C + c) * S;
    const T* xs = x + base;
    T* ys = y + base;
    for (int64_t s = 0; s < S; ++s)
      ys[s] = static_cast<T>(batchnorm_affine(xs[s], mean, alpha, bias));
  }
}

}  // namespace

// x: [N, C, S], scale, bias, running_*_in: [C] -> y: [N, C, S], running_*_out, saved_*: [C]
template <typename T>
void batchnorm_train_forward(int64_t N, int64_t C, int64_t S, double eps, double momentum,
                             bool unbiased_running_var, const T* x, const T* scale, const T* bias,
                             const T* running_mean_in, const T* running_var_in, T* y,
                             T* running_mean_out, T* running_var_out, T* saved_mean,
                             T* saved_inv_std) {
  const int64_t count = N * S;
  parallel_for(0, C, channel_grain(2 * count), [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      // Summing about the channel's first element keeps E[d] near the spread of the data.
      const double shift = count > 0 ? static_cast<double>(x[c * S]) : 0.0;
      ChannelSums<T, double> sums;
      for (int64_t n = 0; n < N; ++n) add_shifted_sums(x + (n * C + c) * S, S, shift, &sums);
      const double sum = sums.a(), sq = sums.b();
      double mean, var;
      batchnorm_moments(shift, sum, sq, count, &mean, &var);
      const double inv_std = batchnorm_inv_std(var, eps);
      saved_mean[c] = static_cast<T>(mean);
      saved_inv_std[c] = static_cast<T>(inv_std);
      // Read both inputs before writing: running_*_in may alias running_*_out.
      const double rm = running_mean_in[c], rv = running_var_in[c];
      running_mean_out[c] = static_cast<T>(batchnorm_running_update(rm, mean, momentum));
      running_var_out[c] = static_cast<T>(batchnorm_running_update(
          rv, unbiased_running_var ? batchnorm_unbiased_var(var, count) : var, momentum));
      const double alpha = batchnorm_alpha(scale[c], inv_std);
      affine_channel(N, C, S, c, x, mean, alpha, bias[c], y);
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
      affine_channel(N, C, S, c, x, mean[c], alpha, bias[c], y);
    }
  });
}

// x, dy: [N, C, S], scale, mean, var: [C] -> dx: [N, C, S], dscale, dbias: [C]
template <typename T>
void batchnorm_infer_backward(int64_t N, int64_t C, int64_t S, double eps, const T* x, const T* dy,
                              const T* scale, const T* mean, const T* var, T* dx, T* dscale,
                              T* dbias) {
  parallel_for(0, C, channel_grain(3 * N * S), [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      const double inv_std = batchnorm_inv_std(var[c], eps);
      const double k = static_cast<double>(scale[c]) * inv_std;
      double sum_dy = 0, sum_dy_xhat = 0;
      for (int64_t n = 0; n < N; ++n) {
        const int64_t base = (n * C + c) * S;
        for (int64_t s = 0; s < S; ++s) {
          const double g = dy[base + s];
          sum_dy += g;
          sum_dy_xhat += batchnorm_dy_xhat(g, x[base + s], mean[c], inv_std);
          if (dx) dx[base + s] = static_cast<T>(g * k);
        }
      }
      if (dscale) dscale[c] = static_cast<T>(sum_dy_xhat);
      if (dbias) dbias[c] = static_cast<T>(sum_dy);
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
      // The mean is saved in T, so centring x in T adds no rounding beyond the subtraction.
      const T mean = saved_mean[c];
      const double inv_std = saved_inv_std[c];
      ChannelSums<T, T> sums;
      for (int64_t n = 0; n < N; ++n) {
        const int64_t base = (n * C + c) * S;
        add_grad_sums(dy + base, x + base, S, mean, &sums);
      }
      const double sum_dy = sums.a(), sum_dy_xc = sums.b();
      const double sum_dy_xhat = sum_dy_xc * inv_std;
      if (dbias != nullptr) dbias[c] = static_cast<T>(sum_dy);
      if (dscale != nullptr) dscale[c] = static_cast<T>(sum_dy_xhat);
      if (dx == nullptr || count == 0) continue;
      const double n_d = static_cast<double>(count);
      const BatchNormDxCoefs k =
          batchnorm_dx_coefs(scale[c], inv_std, sum_dy / n_d, sum_dy_xhat / n_d);
      const T dy_coef = static_cast<T>(k.dy_coef), xc_coef = static_cast<T>(k.xc_coef);
      const T constant = static_cast<T>(k.constant);
      for (int64_t n = 0; n < N; ++n) {
        const int64_t base = (n * C + c) * S;
        const T *dys = dy + base, *xs = x + base;
        T* dxs = dx + base;
        for (int64_t s = 0; s < S; ++s) {
          dxs[s] = batchnorm_dx<T>(dys[s], xs[s] - mean, dy_coef, xc_coef, constant);
        }
      }
    }
  });
}

#define ORTM_INSTANTIATE_BATCHNORM(T)                                                              \
  template void batchnorm_train_forward<T>(int64_t, int64_t, int64_t, double, double, bool,        \
                                           const T*, const T*, const T*, const T*, const T*, T*,   \
                                           T*, T*, T*, T*);                                        \
  template void batchnorm_infer_forward<T>(int64_t, int64_t, int64_t, double, const T*, const T*,  \
                                           const T*, const T*, const T*, T*);                      \
  template void batchnorm_train_backward<T>(int64_t, int64_t, int64_t, const T*, const T*,         \
                                            const T*, const T*, const T*, T*, T*, T*);             \
  template void batchnorm_infer_backward<T>(int64_t, int64_t, int64_t, double, const T*, const T*, \
                                            const T*, const T*, const T*, T*, T*, T*);

ORTM_INSTANTIATE_BATCHNORM(float)
ORTM_INSTANTIATE_BATCHNORM(double)
#undef ORTM_INSTANTIATE_BATCHNORM

}  // namespace ortmodule
