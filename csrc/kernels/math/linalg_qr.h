// Per-matrix Householder QR routines (ai.ortmodule Geqrf, HouseholderProduct, Ormqr, LinalgQr
// and the gradients), shared by the CPU loops (ops/linalg_qr_ops.cpp) and the CUDA kernels
// (backends/cuda/linalg_qr.cu, one thread per matrix). LAPACK's convention: reflector i is
// H_i = I - tau_i v v^T with v_j = 0 (j < i), v_i = 1 and v_j = V[j][i] below the diagonal,
// and geqrf's beta = -sign(alpha) ||x|| (dlarfg), so R's diagonal signs are LAPACK's.
// Matrices are row-major and contiguous; the arithmetic is in double, in a caller-provided
// workspace of `work` doubles per matrix.
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/math/host_device.h"

namespace ortmodule {
namespace math {

// Entry r of reflector i of V (ld columns).
template <typename T>
ORTM_HOST_DEVICE double reflector_entry(const T* v, int64_t ld, int64_t i, int64_t r) {
  return r < i ? 0.0 : r == i ? 1.0 : static_cast<double>(v[r * ld + i]);
}

// x (m x c) <- H_i x.
template <typename T>
ORTM_HOST_DEVICE void reflect_left(const T* v, int64_t ld, int64_t i, double tau, double* x,
                                   int64_t m, int64_t c) {
  if (tau == 0.0) return;
  for (int64_t col = 0; col < c; ++col) {
    double s = 0.0;
    for (int64_t r = i; r < m; ++r) s += reflector_entry(v, ld, i, r) * x[r * c + col];
    s *= tau;
    for (int64_t r = i; r < m; ++r) x[r * c + col] -= s * reflector_entry(v, ld, i, r);
  }
}
// x (rows x m) <- x H_i.
template <typename T>
ORTM_HOST_DEVICE void reflect_right(const T* v, int64_t ld, int64_t i, double tau, double* x,
                                    int64_t rows, int64_t m) {
  if (tau == 0.0) return;
  for (int64_t row = 0; row < rows; ++row) {
    double s = 0.0;
    for (int64_t r = i; r < m; ++r) s += x[row * m + r] * reflector_entry(v, ld, i, r);
    s *= tau;
    for (int64_t r = i; r < m; ++r) x[row * m + r] -= s * reflector_entry(v, ld, i, r);
  }
}

// In place Householder QR of a (m x n) as LAPACK's geqr2: R on and above the diagonal, the
// reflectors below it, tau[min(m, n)].
ORTM_HOST_DEVICE void geqrf_inplace(double* a, int64_t m, int64_t n, double* tau) {
  const int64_t k = m < n ? m : n;
  for (int64_t j = 0; j < k; ++j) {
    const double alpha = a[j * n + j];
    double xnorm = 0.0;
    for (int64_t r = j + 1; r < m; ++r) xnorm = std::hypot(xnorm, a[r * n + j]);
    if (xnorm == 0.0) {
      tau[j] = 0.0;
      continue;
    }
    const double beta = -std::copysign(std::hypot(alpha, xnorm), alpha);
    tau[j] = (beta - alpha) / beta;
    const double scale = 1.0 / (alpha - beta);
    for (int64_t r = j + 1; r < m; ++r) a[r * n + j] *= scale;
    a[j * n + j] = beta;
    // The trailing columns: a[j:, j+1:] <- H_j a[j:, j+1:].
    for (int64_t col = j + 1; col < n; ++col) {
      double s = a[j * n + col];
      for (int64_t r = j + 1; r < m; ++r) s += a[r * n + j] * a[r * n + col];
      s *= tau[j];
      a[j * n + col] -= s;
      for (int64_t r = j + 1; r < m; ++r) a[r * n + col] -= s * a[r * n + j];
    }
  }
}

// q (m x c) <- H_0 ... H_{k-1} I[:, :c] for the reflectors of v (ld columns).
template <typename T, typename U>
ORTM_HOST_DEVICE void householder_product_into(const T* v, int64_t ld, const U* tau, int64_t k,
                                               int64_t m, int64_t c, double* q) {
  for (int64_t r = 0; r < m; ++r)
    for (int64_t col = 0; col < c; ++col) q[r * c + col] = r == col ? 1.0 : 0.0;
  for (int64_t i = k - 1; i >= 0; --i) reflect_left(v, ld, i, static_cast<double>(tau[i]), q, m, c);
}

// Geqrf(A) -> (a, tau). Workspace: m n + k.
template <typename T>
struct GeqrfFn {
  const T* a;
  T* out;
  T* tau;
  int64_t m, n, k;
  int64_t work;
  ORTM_HOST_DEVICE void operator()(int64_t b, double* w) const {
    double* t = w + m * n;
    for (int64_t i = 0; i < m * n; ++i) w[i] = static_cast<double>(a[b * m * n + i]);
    geqrf_inplace(w, m, n, t);
    for (int64_t i = 0; i < m * n; ++i) out[b * m * n + i] = static_cast<T>(w[i]);
    for (int64_t i = 0; i < k; ++i) tau[b * k + i] = static_cast<T>(t[i]);
  }
};

// LinalgQr(A; mode) -> (Q, R): Q [m, qc] (qc = k reduced, m complete; no Q for mode "r"),
// R [rr, n] (rr = k, or m complete), from geqrf and orgqr. Workspace: m n + k + m qc.
template <typename T>
struct QrFn {
  const T* a;
  T* q;  // null for mode "r"
  T* r;
  int64_t m, n, k, qc, rr;
  int64_t work;
  ORTM_HOST_DEVICE void operator()(int64_t b, double* w) const {
    double* t = w + m * n;
    double* qw = t + k;
    for (int64_t i = 0; i < m * n; ++i) w[i] = static_cast<double>(a[b * m * n + i]);
    geqrf_inplace(w, m, n, t);
    for (int64_t i = 0; i < rr; ++i)
      for (int64_t j = 0; j < n; ++j)
        r[b * rr * n + i * n + j] = static_cast<T>(j < i || i >= m ? 0.0 : w[i * n + j]);
    if (!q) return;
    householder_product_into(w, n, t, k, m, qc, qw);
    for (int64_t i = 0; i < m * qc; ++i) q[b * m * qc + i] = static_cast<T>(qw[i]);
  }
};

// HouseholderProduct(V [m, n], tau [k]) -> Q [m, n] (torch.linalg.householder_product).
// Workspace: m n.
template <typename T>
struct HouseholderProductFn {
  const T* v;
  const T* tau;
  T* q;
  int64_t m, n, k;
  int64_t work;
  ORTM_HOST_DEVICE void operator()(int64_t b, double* w) const {
    householder_product_into(v + b * m * n, n, tau + b * k, k, m, n, w);
    for (int64_t i = 0; i < m * n; ++i) q[b * m * n + i] = static_cast<T>(w[i]);
  }
};

// Ormqr(A [mq, ka], tau [k], C [m, c]; left, transpose) -> op(Q) C (left) or C op(Q), Q =
// H_0 ... H_{k-1} of order mq (m when left, c when right).
template <typename T>
ORTM_HOST_DEVICE void ormqr_apply(const T* a, int64_t ka, const T* tau, int64_t k, bool left,
                                  bool transpose, double* x, int64_t m, int64_t c) {
  // Q C = H_0 (... (H_{k-1} C)); Q^T C = H_{k-1} (... (H_0 C)); C Q = ((C H_0) ...) H_{k-1};
  // C Q^T = ((C H_{k-1}) ...) H_0.
  const bool forward = left == transpose;
  for (int64_t s = 0; s < k; ++s) {
    const int64_t i = forward ? s : k - 1 - s;
    const double t = static_cast<double>(tau[i]);
    if (left)
      reflect_left(a, ka, i, t, x, m, c);
    else
      reflect_right(a, ka, i, t, x, m, c);
  }
}

// Workspace: m c.
template <typename T>
struct OrmqrFn {
  const T* a;
  const T* tau;
  const T* c_in;
  T* y;
  int64_t mq, ka, k, m, c;
  bool left, transpose;
  int64_t work;
  ORTM_HOST_DEVICE void operator()(int64_t b, double* w) const {
    for (int64_t i = 0; i < m * c; ++i) w[i] = static_cast<double>(c_in[b * m * c + i]);
    ormqr_apply(a + b * mq * ka, ka, tau + b * k, k, left, transpose, w, m, c);
    for (int64_t i = 0; i < m * c; ++i) y[b * m * c + i] = static_cast<T>(w[i]);
  }
};

// The gradients of Q = H_0 ... H_{k-1} I[:, :c] (V [m, ld], reflectors in its first k columns)
// from gQ (m x c, in `ga`, overwritten): with S_i = H_{i+1} ... H_{k-1} I[:, :c] and
// A_i = H_{i-1} ... H_0 gQ, dL/dH_i = A_i S_i^T =: M, so dtau_i = -v^T M v and
// dv = -tau_i (M + M^T) v (its entries below the diagonal: gV's column i). `s` holds k m c
// doubles, `vec` m + 2 c.
template <typename T, typename G>
ORTM_HOST_DEVICE void householder_product_backward(const T* v, int64_t ld, const T* tau, int64_t k,
                                                   int64_t m, int64_t c, double* ga, double* s,
                                                   double* vec, G* gv, G* gtau) {
  const int64_t mc = m * c;
  if (k > 0) {
    double* last = s + (k - 1) * mc;
    for (int64_t r = 0; r < m; ++r)
      for (int64_t col = 0; col < c; ++col) last[r * c + col] = r == col ? 1.0 : 0.0;
  }
  for (int64_t i = k - 1; i > 0; --i) {
    for (int64_t e = 0; e < mc; ++e) s[(i - 1) * mc + e] = s[i * mc + e];
    reflect_left(v, ld, i, static_cast<double>(tau[i]), s + (i - 1) * mc, m, c);
  }
  if (gv)
    for (int64_t e = 0; e < m * ld; ++e) gv[e] = G(0);
  double* p = vec;      // M v = A_i (S_i^T v)
  double* u = vec + m;  // S_i^T v, then A_i^T v
  double* z = u + c;
  for (int64_t i = 0; i < k; ++i) {
    const double* si = s + i * mc;
    for (int64_t col = 0; col < c; ++col) {
      double su = 0.0, sz = 0.0;
      for (int64_t r = i; r < m; ++r) {
        const double vr = reflector_entry(v, ld, i, r);
        su += si[r * c + col] * vr;
        sz += ga[r * c + col] * vr;
      }
      u[col] = su;
      z[col] = sz;
    }
    double vmv = 0.0;
    for (int64_t r = 0; r < m; ++r) {
      double mv = 0.0, mtv = 0.0;
      for (int64_t col = 0; col < c; ++col) {
        mv += ga[r * c + col] * u[col];
        mtv += si[r * c + col] * z[col];
      }
      p[r] = mv;
      vmv += reflector_entry(v, ld, i, r) * mv;
      if (gv && r > i) gv[r * ld + i] = static_cast<G>(-static_cast<double>(tau[i]) * (mv + mtv));
    }
    if (gtau) gtau[i] = static_cast<G>(-vmv);
    reflect_left(v, ld, i, static_cast<double>(tau[i]), ga, m, c);
  }
}

// HouseholderProductGrad(V, tau, gQ) -> gV, gtau. Workspace: (k + 1) m n + m + 2 n.
template <typename T>
struct HouseholderProductGradFn {
  const T* v;
  const T* tau;
  const T* gq;
  T* gv;    // may be null
  T* gtau;  // may be null
  int64_t m, n, k;
  int64_t work;
  ORTM_HOST_DEVICE void operator()(int64_t b, double* w) const {
    const int64_t mn = m * n;
    for (int64_t e = 0; e < mn; ++e) w[e] = static_cast<double>(gq[b * mn + e]);
    householder_product_backward(v + b * mn, n, tau + b * k, k, m, n, w, w + mn, w + (k + 1) * mn,
                                 gv ? gv + b * mn : nullptr, gtau ? gtau + b * k : nullptr);
  }
};

// OrmqrGrad(A, tau, C, gY; left, transpose) -> gA, gtau, gC: gC = op(Q)^T gY (left) or
// gY op(Q)^T (right), and the gradients of the full Q (order mq) from gQ = gY C^T, C gY^T,
// C^T gY or gY^T C (left, left transposed, right, right transposed). Workspace:
// m c + (k + 1) mq^2 + mq + 2 mq.
template <typename T>
struct OrmqrGradFn {
  const T* a;
  const T* tau;
  const T* c_in;
  const T* gy;
  T* ga;    // may be null
  T* gtau;  // may be null
  T* gc;    // may be null
  int64_t mq, ka, k, m, c;
  bool left, transpose;
  int64_t work;
  ORTM_HOST_DEVICE void operator()(int64_t b, double* w) const {
    const T* A = a + b * mq * ka;
    const T* t = tau + b * k;
    const T* C = c_in + b * m * c;
    const T* G = gy + b * m * c;
    if (gc) {
      for (int64_t e = 0; e < m * c; ++e) w[e] = static_cast<double>(G[e]);
      ormqr_apply(A, ka, t, k, left, !transpose, w, m, c);
      for (int64_t e = 0; e < m * c; ++e) gc[b * m * c + e] = static_cast<T>(w[e]);
    }
    if (!ga && !gtau) return;
    double* gq = w;  // mq x mq
    for (int64_t i = 0; i < mq; ++i)
      for (int64_t j = 0; j < mq; ++j) {
        double s = 0.0;
        if (left)  // rows i, j of the m x c operands
          for (int64_t l = 0; l < c; ++l)
            s += transpose ? static_cast<double>(C[i * c + l]) * static_cast<double>(G[j * c + l])
                           : static_cast<double>(G[i * c + l]) * static_cast<double>(C[j * c + l]);
        else  // columns i, j
          for (int64_t l = 0; l < m; ++l)
            s += transpose ? static_cast<double>(G[l * c + i]) * static_cast<double>(C[l * c + j])
                           : static_cast<double>(C[l * c + i]) * static_cast<double>(G[l * c + j]);
        gq[i * mq + j] = s;
      }
    householder_product_backward(A, ka, t, k, mq, mq, gq, gq + mq * mq, gq + (k + 1) * mq * mq,
                                 ga ? ga + b * mq * ka : nullptr, gtau ? gtau + b * k : nullptr);
  }
};

// x (rows x k) <- x U^-T, U upper (k x k, row-major with ld columns): row i of x solves
// U y = x_i.
ORTM_HOST_DEVICE void solve_upper_transpose_right(const double* u, int64_t ld, int64_t k, double* x,
                                                  int64_t rows) {
  for (int64_t row = 0; row < rows; ++row)
    for (int64_t i = k - 1; i >= 0; --i) {
      double s = x[row * k + i];
      for (int64_t j = i + 1; j < k; ++j) s -= u[i * ld + j] * x[row * k + j];
      x[row * k + i] = s / u[i * ld + i];
    }
}

// QrGrad(Q [m, k], R [k, n], gQ, gR) -> gA [m, n], k = min(m, n). For m >= n:
// gA = (gQ + Q copyltu(M)) R^-T, M = R gR^T - gQ^T Q, copyltu(M) the symmetric matrix with M's
// lower triangle. For m < n, R = [U | V], A = [X | Y], Y = Q V: gY = Q gV and gX is the square
// case's with gQ + Y gV^T and gU. Workspace: 2 m k + 2 k k + m (n - k).
template <typename T>
struct QrGradFn {
  const T* q;
  const T* r;
  const T* gq;  // may be null
  const T* gr;  // may be null
  T* ga;
  int64_t m, n, k;
  int64_t work;
  ORTM_HOST_DEVICE void operator()(int64_t b, double* w) const {
    const T* Q = q + b * m * k;
    const T* R = r + b * k * n;
    const T* gQ = gq ? gq + b * m * k : nullptr;
    const T* gR = gr ? gr + b * k * n : nullptr;
    T* out = ga + b * m * n;
    double* gqe = w;          // m x k
    double* bm = w + m * k;   // m x k
    double* mm = bm + m * k;  // k x k
    double* uw = mm + k * k;  // k x k: U
    double* y = uw + k * k;   // m x (n - k)
    const int64_t extra = n - k;
    for (int64_t i = 0; i < k; ++i)
      for (int64_t j = 0; j < k; ++j) uw[i * k + j] = static_cast<double>(R[i * n + j]);
    for (int64_t e = 0; e < m * k; ++e) gqe[e] = gQ ? static_cast<double>(gQ[e]) : 0.0;
    if (extra > 0) {
      for (int64_t i = 0; i < m; ++i)
        for (int64_t c = 0; c < extra; ++c) {
          double s = 0.0, g = 0.0;
          for (int64_t l = 0; l < k; ++l) {
            s += static_cast<double>(Q[i * k + l]) * static_cast<double>(R[l * n + k + c]);
            if (gR) g += static_cast<double>(Q[i * k + l]) * static_cast<double>(gR[l * n + k + c]);
          }
          y[i * extra + c] = s;
          out[i * n + k + c] = static_cast<T>(g);
        }
      if (gR)
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < k; ++j) {
            double s = 0.0;
            for (int64_t c = 0; c < extra; ++c)
              s += y[i * extra + c] * static_cast<double>(gR[j * n + k + c]);
            gqe[i * k + j] += s;
          }
    }
    // M = U gU^T - gQ'^T Q.
    for (int64_t i = 0; i < k; ++i)
      for (int64_t j = 0; j < k; ++j) {
        double s = 0.0;
        if (gR)
          for (int64_t l = 0; l < k; ++l) s += uw[i * k + l] * static_cast<double>(gR[j * n + l]);
        for (int64_t l = 0; l < m; ++l) s -= gqe[l * k + i] * static_cast<double>(Q[l * k + j]);
        mm[i * k + j] = s;
      }
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < k; ++j) {
        double s = gqe[i * k + j];
        for (int64_t l = 0; l < k; ++l)
          s += static_cast<double>(Q[i * k + l]) * (l >= j ? mm[l * k + j] : mm[j * k + l]);
        bm[i * k + j] = s;
      }
    solve_upper_transpose_right(uw, k, k, bm, m);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < k; ++j) out[i * n + j] = static_cast<T>(bm[i * k + j]);
  }
};

}  // namespace math
}  // namespace ortmodule
