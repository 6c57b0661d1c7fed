// 3-D convolution: vol2col + one gemm per image and group (see conv.cpp for the 2-D path).
#include <algorithm>
#include <cstdint>
#include <vector>

#include "kernels/cpu/conv.h"
#include "kernels/cpu/conv_common.h"
#include "kernels/gemm.h"
#include "kernels/parallel.h"

namespace ortmodule {

using conv_detail::add_bias;
using conv_detail::sum_row;

// ---- 3-D: vol2col + one gemm per image and group ----

namespace {

struct Conv3dDims {
  int64_t Cg, Mg, K, P, X;  // X: elements of one input channel volume
};

Conv3dDims conv3d_dims(const Conv3dParams& p) {
  Conv3dDims d;
  d.Cg = p.C / p.group;
  d.Mg = p.M / p.group;
  d.K = d.Cg * p.kernel[0] * p.kernel[1] * p.kernel[2];
  d.P = p.out[0] * p.out[1] * p.out[2];
  d.X = p.in[0] * p.in[1] * p.in[2];
  return d;
}

// Calls fn(row, col_at, in_at) for every column-buffer element of channels [0, Cg): row is
// the column-buffer row ((c * kD + kd) * kH + kh) * kW + kw, col_at the output position, in_at
// the input element of channel volume c it reads, or -1 where the tap lies in the padding.
template <typename Fn>
void for_each_tap3d(const Conv3dParams& p, const Conv3dDims& d, const Fn& fn) {
  const int64_t D = p.in[0], H = p.in[1], W = p.in[2];
  for (int64_t c = 0; c < d.Cg; ++c) {
    for (int64_t kd = 0; kd < p.kernel[0]; ++kd) {
      for (int64_t kh = 0; kh < p.kernel[1]; ++kh) {
        for (int64_t kw = 0; kw < p.kernel[2]; ++kw) {
          const int64_t row = ((c * p.kernel[0] + kd) * p.kernel[1] + kh) * p.kernel[2] + kw;
          int64_t q = 0;
          for (int64_t od = 0; od < p.out[0]; ++od) {
            const int64_t id = od * p.stride[0] - p.pad_begin[0] + kd * p.dilation[0];
            for (int64_t oh = 0; oh < p.out[1]; ++oh) {
              const int64_t ih = oh * p.stride[1] - p.pad_begin[1] + kh * p.dilation[1];
              const bool plane_in = id >= 0 && id < D && ih >= 0 && ih < H;
              const int64_t base = (c * D + id) * H + ih;
              for (int64_t ow = 0; ow < p.out[2]; ++ow, ++q) {
                const int64_t iw = ow * p.stride[2] - p.pad_begin[2] + kw * p.dilation[2];
                fn(row, q, plane_in && iw >= 0 && iw < W ? base * W + iw : -1);
              }
            }
          }
        }
      }
    }
  }
}

// x: [Cg, D, H, W] -> col: [K, P]
template <typename T>
void vol2col(const Conv3dParams& p, const Conv3dDims& d, const T* x, T* col) {
  for_each_tap3d(p, d, [&](int64_t row, int64_t q, int64_t at) {
    col[row * d.P + q] = at >= 0 ? x[at] : T(0);
  });
}

// col: [K, P] -> dx: [Cg, D, H, W], overwritten.
template <typename T>
void col2vol(const Conv3dParams& p, const Conv3dDims& d, const T* col, T* dx) {
  std::fill(dx, dx + d.Cg * d.X, T(0));
  for_each_tap3d(p, d, [&](int64_t row, int64_t q, int64_t at) {
    if (at >= 0) dx[at] += col[row * d.P + q];
  });
}

}  // namespace

template <typename T>
void conv3d_forward(const Conv3dParams& p, const T* x, const T* w, const T* bias, T* y) {
  const Conv3dDims d = conv3d_dims(p);
  parallel_for(0, p.N, 1, [&](int64_t n_begin, int64_t n_end) {
    std::vector<T> col(d.K * d.P);
    for (int64_t n = n_begin; n < n_end; ++n) {
      for (int64_t g = 0; g < p.group; ++g) {
        vol2col(p, d, x + (n * p.C + g * d.Cg) * d.X, col.data());
        T* yg = y + (n * p.M + g * d.Mg) * d.P;
        gemm<T>(false, false, d.Mg, d.P, d.K, T(1), w + g * d.Mg * d.K, d.K, col.data(), d.P, T(0),
                yg, d.P);
        if (bias != nullptr) add_bias(bias + g * d.Mg, d.Mg, d.P, yg);
      }
    }
  });
}

// Images run in order (dw and dbias sum over them); each gemm uses the BLAS's own threads.
//   dw_g += dy_g [Mg, P] * col^T [P, K];  dcol = w_g^T [K, Mg] * dy_g [Mg, P] -> col2vol onto dx
template <typename T>
void conv3d_backward(const Conv3dParams& p, const T* x, const T* w, const T* dy, T* dx, T* dw,
                     T* dbias) {
  const Conv3dDims d = conv3d_dims(p);
  std::vector<T> col(dw != nullptr || dx != nullptr ? d.K * d.P : 0);
  std::vector<double> bias_sum(dbias != nullptr ? p.M : 0, 0.0);
  for (int64_t n = 0; n < p.N; ++n) {
    for (int64_t g = 0; g < p.group; ++g) {
      const T* dyg = dy + (n * p.M + g * d.Mg) * d.P;
      if (dbias != nullptr) {
        for (int64_t m = 0; m < d.Mg; ++m) bias_sum[g * d.Mg + m] += sum_row(dyg + m * d.P, d.P);
      }
      const int64_t xg = (n * p.C + g * d.Cg) * d.X;
      if (dw != nullptr) {
        vol2col(p, d, x + xg, col.data());
        gemm<T>(false, true, d.Mg, d.K, d.P, T(1), dyg, d.P, col.data(), d.P, n == 0 ? T(0) : T(1),
                dw + g * d.Mg * d.K, d.K);
      }
      if (dx != nullptr) {
        gemm<T>(true, false, d.K, d.P, d.Mg, T(1), w + g * d.Mg * d.K, d.K, dyg, d.P, T(0),
                col.data(), d.P);
        col2vol(p, d, col.data(), dx + xg);
      }
    }
  }
  if (dw != nullptr && p.N == 0) std::fill(dw, dw + p.M * d.K, T(0));
  for (int64_t m = 0; dbias != nullptr && m < p.M; ++m) dbias[m] = static_cast<T>(bias_sum[m]);
}

template void conv3d_forward<float>(const Conv3dParams&, const float*, const float*, const float*,
                                    float*);
template void conv3d_forward<double>(const Conv3dParams&, const double*, const double*,
                                     const double*, double*);
template void conv3d_backward<float>(const Conv3dParams&, const float*, const float*, const float*,
                                     float*, float*, float*);
template void conv3d_backward<double>(const Conv3dParams&, const double*, const double*,
                                      const double*, double*, double*, double*);

}  // namespace ortmodule
