// Per-matrix gradients of the symmetric eigendecomposition, the SVD and the pseudo-inverse
// (torch's formulas, in double), shared by the CPU loops (ops/linalg_spectral_ops.cpp) and
// the CUDA kernels (backends/cuda/linalg_spectral.cu). Row-major matrices; a null output
// gradient is zero.
#pragma once

#include <cstdint>

#include "kernels/math/host_device.h"
#include "kernels/math/linalg_spectral.h"

namespace ortmodule {
namespace math {

ORTM_HOST_DEVICE int64_t eigh_grad_work(int64_t n) { return 4 * n * n; }

// a = V diag(w) V^T:  ga = V (diag(gw) + skew(V^T gV) / E) V^T, skew(X) = (X - X^T) / 2,
// E_ij = w_j - w_i off the diagonal (ga is not symmetrized, as torch's is not).
template <typename T>
ORTM_HOST_DEVICE void eigh_grad_matrix(const T* w, const T* v, const T* gw, const T* gv, int64_t n,
                                       T* ga, double* work) {
  double* vd = work;
  double* x = vd + n * n;
  double* inner = x + n * n;
  double* tmp = inner + n * n;
  for (int64_t i = 0; i < n * n; ++i) vd[i] = static_cast<double>(v[i]);
  if (gv != nullptr) {
    for (int64_t i = 0; i < n * n; ++i) tmp[i] = static_cast<double>(gv[i]);
    spectral_matmul(vd, true, tmp, false, x, n, n, n);
  }
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) {
      if (i == j) {
        inner[i * n + j] = gw != nullptr ? static_cast<double>(gw[i]) : 0.0;
      } else if (gv != nullptr) {
        const double e = static_cast<double>(w[j]) - static_cast<double>(w[i]);
        inner[i * n + j] = 0.5 * (x[i * n + j] - x[j * n + i]) / e;
      } else {
        inner[i * n + j] = 0.0;
      }
    }
  spectral_matmul(vd, false, inner, false, tmp, n, n, n);
  spectral_matmul(tmp, false, vd, true, x, n, n, n);
  for (int64_t i = 0; i < n * n; ++i) ga[i] = static_cast<T>(x[i]);
}

ORTM_HOST_DEVICE int64_t svd_grad_work(int64_t m, int64_t n) {
  const int64_t k = m < n ? m : n;
  return 2 * m * k + k + 2 * k * n + 3 * k * k + 3 * m * n + (m > n ? m : n) * k;
}

// a = U diag(S) Vh (reduced), torch's svd_backward for real matrices: with
// skew(X) = X - X^T and E_jl = S_l^2 - S_j^2 (1 on the diagonal),
//   G = (skew(U^T gU) S + S skew(Vh gV)) / E + diag(gS),
// then ga = U G Vh, plus (I - U U^T) gU S^-1 Vh when m > k and gU is given, or
// U S^-1 gV^T (I - V Vh) when n > k and gVh is given. Only gS: ga = U diag(gS) Vh.
template <typename T>
ORTM_HOST_DEVICE void svd_grad_matrix(const T* u, const T* s, const T* vt, const T* gu, const T* gs,
                                      const T* gvt, int64_t m, int64_t n, T* ga, double* work) {
  const int64_t k = m < n ? m : n;
  double* ud = work;
  double* gud = ud + m * k;
  double* sd = gud + m * k;
  double* vtd = sd + k;
  double* gvtd = vtd + k * n;
  double* uhgu = gvtd + k * n;   // [k, k]
  double* vhgv = uhgu + k * k;   // [k, k]
  double* g = vhgv + k * k;      // [k, k]
  double* left = g + k * k;      // [m, n]
  double* out = left + m * n;    // [m, n]
  double* extra = out + m * n;   // [m, n]
  double* proj = extra + m * n;  // [max(m, n), k]
  for (int64_t i = 0; i < m * k; ++i) ud[i] = static_cast<double>(u[i]);
  for (int64_t i = 0; i < k; ++i) sd[i] = static_cast<double>(s[i]);
  for (int64_t i = 0; i < k * n; ++i) vtd[i] = static_cast<double>(vt[i]);
  for (int64_t i = 0; i < m * k; ++i) gud[i] = gu != nullptr ? static_cast<double>(gu[i]) : 0.0;
  for (int64_t i = 0; i < k * n; ++i) gvtd[i] = gvt != nullptr ? static_cast<double>(gvt[i]) : 0.0;
  if (gu != nullptr) spectral_matmul(ud, true, gud, false, uhgu, k, k, m);
  if (gvt != nullptr) spectral_matmul(vtd, false, gvtd, true, vhgv, k, k, n);  // Vh gV
  for (int64_t j = 0; j < k; ++j)
    for (int64_t l = 0; l < k; ++l) {
      double value = 0.0;
      if (j != l && (gu != nullptr || gvt != nullptr)) {
        const double e = sd[l] * sd[l] - sd[j] * sd[j];
        if (gu != nullptr && gvt != nullptr) {
          value = ((uhgu[j * k + l] - uhgu[l * k + j]) * sd[l] +
                   sd[j] * (vhgv[j * k + l] - vhgv[l * k + j])) /
                  e;
        } else if (gu != nullptr) {
          value = (uhgu[j * k + l] - uhgu[l * k + j]) / e * sd[l];
        } else {
          value = sd[j] * ((vhgv[j * k + l] - vhgv[l * k + j]) / e);
        }
      }
      if (j == l && gs != nullptr) value += static_cast<double>(gs[j]);
      g[j * k + l] = value;
    }
  // out = U G Vh
  spectral_matmul(ud, false, g, false, left, m, k, k);
  spectral_matmul(left, false, vtd, false, out, m, n, k);
  if (m > k && gu != nullptr) {
    // (gU S^-1 - U (U^T gU S^-1)) Vh
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < k; ++j) proj[i * k + j] = gud[i * k + j] / sd[j];
    spectral_matmul(ud, true, proj, false, g, k, k, m);
    spectral_matmul(ud, false, g, false, left, m, k, k);
    for (int64_t i = 0; i < m * k; ++i) proj[i] -= left[i];
    spectral_matmul(proj, false, vtd, false, extra, m, n, k);
    for (int64_t i = 0; i < m * n; ++i) out[i] += extra[i];
  } else if (n > k && gvt != nullptr) {
    // U (S^-1 gVh - (S^-1 gVh V) Vh): gV S^-1 transposed is S^-1 gVh.
    for (int64_t j = 0; j < k; ++j)
      for (int64_t i = 0; i < n; ++i) proj[j * n + i] = gvtd[j * n + i] / sd[j];
    spectral_matmul(proj, false, vtd, true, g, k, k, n);
    spectral_matmul(g, false, vtd, false, left, k, n, k);
    for (int64_t i = 0; i < k * n; ++i) proj[i] -= left[i];
    spectral_matmul(ud, false, proj, false, extra, m, n, k);
    for (int64_t i = 0; i < m * n; ++i) out[i] += extra[i];
  }
  for (int64_t i = 0; i < m * n; ++i) ga[i] = static_cast<T>(out[i]);
}

ORTM_HOST_DEVICE int64_t pinv_grad_work(int64_t m, int64_t n) { return 8 * m * n + 2 * m * m; }

// p = pinv(a), a [m, n], p [n, m], gp [n, m]: torch's pinv_backward,
//   ga = -(P K)^T + K P^T - (A P) K P^T + (P^T P)(gP^T - K A),  K = gP^T P.
template <typename T>
ORTM_HOST_DEVICE void pinv_grad_matrix(const T* a, const T* p, const T* gp, int64_t m, int64_t n,
                                       T* ga, double* work) {
  double* ad = work;
  double* pd = ad + m * n;
  double* gd = pd + n * m;
  double* kk = gd + n * m;    // [m, m]
  double* r = kk + m * m;     // [m, n]: K P^T
  double* pk = r + m * n;     // [n, m]: P K
  double* ap = pk + n * m;    // [m, m]: A P, then P^T P
  double* h = ap + m * m;     // [m, n]
  double* out = h + m * n;    // [m, n]
  double* tmp = out + m * n;  // [m, n]
  for (int64_t i = 0; i < m * n; ++i) {
    ad[i] = static_cast<double>(a[i]);
    pd[i] = static_cast<double>(p[i]);
    gd[i] = static_cast<double>(gp[i]);
  }
  spectral_matmul(gd, true, pd, false, kk, m, m, n);
  spectral_matmul(kk, false, pd, true, r, m, n, m);
  spectral_matmul(pd, false, kk, false, pk, n, m, m);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) out[i * n + j] = r[i * n + j] - pk[j * m + i];
  spectral_matmul(ad, false, pd, false, ap, m, m, n);
  spectral_matmul(ap, false, r, false, tmp, m, n, m);
  for (int64_t i = 0; i < m * n; ++i) out[i] -= tmp[i];
  spectral_matmul(kk, false, ad, false, tmp, m, n, m);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) h[i * n + j] = gd[j * m + i] - tmp[i * n + j];
  spectral_matmul(pd, true, pd, false, ap, m, m, n);
  spectral_matmul(ap, false, h, false, tmp, m, n, m);
  for (int64_t i = 0; i < m * n; ++i) ga[i] = static_cast<T>(out[i] + tmp[i]);
}

}  // namespace math
}  // namespace ortmodule
