// Group normalisation forward and backward: statistics and dX parallel over the N * G groups
// (each contiguous), dScale and dBias parallel over channels. Sums in double.
#include "kernels/cpu/groupnorm.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/math/groupnorm.h"
#include "kernels/parallel.h"

namespace ortmodule {
namespace {

constexpr int64_t kGrainElems = 1 << 14;

int64_t grain(int64_t per_item) {
  return std::max<int64_t>(1, kGrainElems / std::max<int64_t>(1, per_item));
}

}  // namespace

template <typename T>
void groupnorm_forward(const GroupNormDims& d, double eps, const T* x, const T* scale,
                       const T* bias, T* y, T* mean, T* rstd) {
  const int64_t Cg = d.C / d.G, M = Cg * d.S;
  parallel_for(0, d.N * d.G, grain(2 * M), [&](int64_t b0, int64_t b1) {
    for (int64_t group = b0; group < b1; ++group) {
      const T* xg = x + group * M;
      double sum = 0;
      for (int64_t i = 0; i < M; ++i) sum += static_cast<double>(xg[i]);
      const double mu = M > 0 ? sum / static_cast<double>(M) : 0.0;
      double sq = 0;
      for (int64_t i = 0; i < M; ++i) {
        const double c = static_cast<double>(xg[i]) - mu;
        sq += c * c;
      }
      const double r = 1.0 / std::sqrt((M > 0 ? sq / static_cast<double>(M) : 0.0) + eps);
      if (mean != nullptr) mean[group] = static_cast<T>(mu);
      if (rstd != nullptr) rstd[group] = static_cast<T>(r);
      const int64_t c0 = (group % d.G) * Cg;
      for (int64_t k = 0; k < Cg; ++k) {
        const double s = static_cast<double>(scale[c0 + k]), b = static_cast<double>(bias[c0 + k]);
        const T* xc = xg + k * d.S;
        T* yc = y + group * M + k * d.S;
        for (int64_t i = 0; i < d.S; ++i)
          yc[i] = static_cast<T>((static_cast<double>(xc[i]) - mu) * r * s + b);
      }
    }
  });
}

template <typename T>
void groupnorm_backward(const GroupNormDims& d, const T* dy, const T* x, const T* scale,
                        const T* mean, const T* rstd, T* dx, T* dscale, T* dbias) {
  const int64_t Cg = d.C / d.G, M = Cg * d.S;
  if (dx != nullptr) {
    parallel_for(0, d.N * d.G, grain(2 * M), [&](int64_t b0, int64_t b1) {
      for (int64_t group = b0; group < b1; ++group) {
        const double mu = static_cast<double>(mean[group]), r = static_cast<double>(rstd[group]);
        const int64_t c0 = (group % d.G) * Cg, base = group * M;
        double sum_dyw = 0, sum_dyw_xhat = 0;
        for (int64_t k = 0; k < Cg; ++k) {
          const double s = static_cast<double>(scale[c0 + k]);
          for (int64_t i = base + k * d.S; i < base + (k + 1) * d.S; ++i) {
            const double dyw = static_cast<double>(dy[i]) * s;
            sum_dyw += dyw;
            sum_dyw_xhat += dyw * (static_cast<double>(x[i]) - mu) * r;
          }
        }
        for (int64_t k = 0; k < Cg; ++k) {
          const double s = static_cast<double>(scale[c0 + k]);
          for (int64_t i = base + k * d.S; i < base + (k + 1) * d.S; ++i) {
            const double xhat = (static_cast<double>(x[i]) - mu) * r;
            dx[i] = static_cast<T>(groupnorm_dx(static_cast<double>(dy[i]) * s, xhat, r, sum_dyw,
                                                sum_dyw_xhat, static_cast<double>(M)));
          }
        }
      }
    });
  }
  if (dscale == nullptr && dbias == nullptr) return;
  parallel_for(0, d.C, grain(d.N * d.S), [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      double ds = 0, db = 0;
      for (int64_t n = 0; n < d.N; ++n) {
        const int64_t group = n * d.G + c / (d.C / d.G);
        const double mu = static_cast<double>(mean[group]), r = static_cast<double>(rstd[group]);
        const int64_t base = (n * d.C + c) * d.S;
        for (int64_t i = base; i < base + d.S; ++i) {
          const double g = static_cast<double>(dy[i]);
          ds += g * (static_cast<double>(x[i]) - mu) * r;
          db += g;
        }
      }
      if (dscale != nullptr) dscale[c] = static_cast<T>(ds);
      if (dbias != nullptr) dbias[c] = static_cast<T>(db);
    }
  });
}

#define ORTM_INSTANTIATE_GROUPNORM(T)                                                            \
  template void groupnorm_forward<T>(const GroupNormDims&, double, const T*, const T*, const T*, \
                                     T*, T*, T*);                                                \
  template void groupnorm_backward<T>(const GroupNormDims&, const T*, const T*, const T*,        \
                                      const T*, const T*, T*, T*, T*);
ORTM_INSTANTIATE_GROUPNORM(float)
ORTM_INSTANTIATE_GROUPNORM(double)
#undef ORTM_INSTANTIATE_GROUPNORM

}  // namespace ortmodule
