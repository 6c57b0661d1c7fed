// Per-matrix symmetric eigendecomposition and SVD (Jacobi rotations, in double), the
// pseudo-inverse and rank built on them, and the gradients of all three; shared by the CPU
// loops (ops/linalg_spectral_ops.cpp) and the CUDA kernels (backends/cuda/linalg_spectral.cu,
// one thread per matrix). Matrices are row-major; every routine takes a double workspace of
// the size its *_work function names.
//
// Conventions (torch.linalg's): eigenvalues ascending, singular values descending, reduced
// factors A = U diag(S) Vh (U [m, k], Vh [k, n], k = min(m, n)). Eigen- and singular vectors
// are unique only up to sign (and within repeated values); these routines make each
// eigenvector's, and each left singular vector's, largest-magnitude component (the first such
// on ties) positive, a deterministic choice that need not be LAPACK's. A matrix with a
// non-finite entry has NaN factors (eager raises on most of them).
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/math/host_device.h"

namespace ortmodule {
namespace math {

constexpr int kJacobiMaxSweeps = 80;

// c[M, N] = op(a) op(b): op(a) [M, K] is a (stored [K, M]) transposed when ta, op(b) [K, N]
// likewise.
ORTM_HOST_DEVICE void spectral_matmul(const double* a, bool ta, const double* b, bool tb, double* c,
                                      int64_t M, int64_t N, int64_t K) {
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double acc = 0.0;
      for (int64_t k = 0; k < K; ++k)
        acc += (ta ? a[k * M + i] : a[i * K + k]) * (tb ? b[j * K + k] : b[k * N + j]);
      c[i * N + j] = acc;
    }
}

ORTM_HOST_DEVICE bool spectral_all_finite(const double* x, int64_t count) {
  for (int64_t i = 0; i < count; ++i)
    if (!std::isfinite(x[i])) return false;
  return true;
}

ORTM_HOST_DEVICE int64_t eigh_work(int64_t n) { return 2 * n * n + n; }

// a [n, n] (only the lower triangle when `lower`, else the upper one, is read) -> w [n]
// ascending, v [n, n] with the eigenvector of w[j] in column j. Cyclic Jacobi: rotations
// zero each off-diagonal pair in turn until the off-diagonal part is negligible. The matrix
// is kept symmetric (rows read, rows and columns written) and the rotations accumulate in
// the rows of qt (the vectors as rows), so the inner loops run along rows.
template <typename T>
ORTM_HOST_DEVICE void eigh_matrix(const T* a, int64_t n, bool lower, T* w, T* v, double* work) {
  double* s = work;           // the symmetric matrix, rotated towards diagonal
  double* qt = work + n * n;  // accumulated rotations, transposed
  double* d = qt + n * n;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) {
      const bool own = lower ? j <= i : j >= i;
      s[i * n + j] = static_cast<double>(own ? a[i * n + j] : a[j * n + i]);
      qt[i * n + j] = i == j ? 1.0 : 0.0;
    }
  if (!spectral_all_finite(s, n * n)) {
    for (int64_t i = 0; i < n; ++i) w[i] = static_cast<T>(NAN);
    for (int64_t i = 0; i < n * n; ++i) v[i] = static_cast<T>(NAN);
    return;
  }
  // A pair is rotated unless its off-diagonal entry is negligible next to its diagonal ones
  // (a relative test: the scale of the matrix does not matter); the rotated entry is then
  // zero. Sweeps end when none is rotated.
  for (int sweep = 0; sweep < kJacobiMaxSweeps; ++sweep) {
    bool rotated = false;
    for (int64_t p = 0; p < n; ++p)
      for (int64_t r = p + 1; r < n; ++r) {
        const double apr = s[p * n + r];
        const double app = s[p * n + p], arr = s[r * n + r];
        if (apr == 0.0 || std::fabs(apr) <= 1e-18 * (std::fabs(app) + std::fabs(arr))) continue;
        rotated = true;
        const double theta = (arr - app) / (2.0 * apr);
        const double t =
            (theta >= 0.0 ? 1.0 : -1.0) / (std::fabs(theta) + std::sqrt(theta * theta + 1.0));
        const double c = 1.0 / std::sqrt(t * t + 1.0), sn = t * c;
        s[p * n + p] = app - t * apr;
        s[r * n + r] = arr + t * apr;
        s[p * n + r] = s[r * n + p] = 0.0;
        for (int64_t k = 0; k < n; ++k) {
          if (k == p || k == r) continue;
          const double kp = s[p * n + k], kr = s[r * n + k];
          const double np = c * kp - sn * kr, nr = sn * kp + c * kr;
          s[p * n + k] = s[k * n + p] = np;
          s[r * n + k] = s[k * n + r] = nr;
        }
        for (int64_t k = 0; k < n; ++k) {
          const double kp = qt[p * n + k], kr = qt[r * n + k];
          qt[p * n + k] = c * kp - sn * kr;
          qt[r * n + k] = sn * kp + c * kr;
        }
      }
    if (!rotated) break;
  }
  for (int64_t i = 0; i < n; ++i) d[i] = s[i * n + i];
  for (int64_t j = 0; j < n; ++j) {  // selection sort, ascending, moving the vectors along
    int64_t best = j;
    for (int64_t i = j + 1; i < n; ++i)
      if (d[i] < d[best]) best = i;
    if (best != j) {
      const double t = d[j];
      d[j] = d[best];
      d[best] = t;
      for (int64_t k = 0; k < n; ++k) {
        const double u = qt[j * n + k];
        qt[j * n + k] = qt[best * n + k];
        qt[best * n + k] = u;
      }
    }
    int64_t big = 0;  // the sign: the largest-magnitude component positive
    for (int64_t k = 1; k < n; ++k)
      if (std::fabs(qt[j * n + k]) > std::fabs(qt[j * n + big])) big = k;
    if (qt[j * n + big] < 0.0)
      for (int64_t k = 0; k < n; ++k) qt[j * n + k] = -qt[j * n + k];
  }
  for (int64_t i = 0; i < n; ++i) w[i] = static_cast<T>(d[i]);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) v[i * n + j] = static_cast<T>(qt[j * n + i]);
}

ORTM_HOST_DEVICE int64_t svd_work(int64_t m, int64_t n) {
  const int64_t r = m >= n ? m : n, c = m >= n ? n : m;
  return r * c + c * c + c;
}

// Fills row j of b [*, r] with a unit vector orthogonal to rows 0..j-1 (assumed
// orthonormal): the unit vector e_i with the largest residual, orthogonalized twice.
ORTM_HOST_DEVICE void spectral_complete_row(double* b, int64_t r, int64_t j) {
  int64_t best = 0;
  double best_norm = -1.0;
  for (int64_t i = 0; i < r; ++i) {
    double norm = 1.0;  // |e_i - sum_k b_ki b_k|^2 = 1 - sum_k b_ki^2
    for (int64_t k = 0; k < j; ++k) norm -= b[k * r + i] * b[k * r + i];
    if (norm > best_norm + 1e-12) best = i, best_norm = norm;
  }
  double* row = b + j * r;
  for (int64_t i = 0; i < r; ++i) row[i] = i == best ? 1.0 : 0.0;
  for (int pass = 0; pass < 2; ++pass) {
    for (int64_t k = 0; k < j; ++k) {
      double dot = 0.0;
      for (int64_t i = 0; i < r; ++i) dot += b[k * r + i] * row[i];
      for (int64_t i = 0; i < r; ++i) row[i] -= dot * b[k * r + i];
    }
    double norm = 0.0;
    for (int64_t i = 0; i < r; ++i) norm += row[i] * row[i];
    norm = std::sqrt(norm);
    for (int64_t i = 0; i < r; ++i) row[i] /= norm;
  }
}

// Negates row j of x [*, len] (and of y [*, len_y]) unless x's largest-magnitude entry in
// it (the first such) is positive.
ORTM_HOST_DEVICE void spectral_fix_row_sign(double* x, int64_t len, double* y, int64_t len_y,
                                            int64_t j) {
  int64_t big = 0;
  for (int64_t k = 1; k < len; ++k)
    if (std::fabs(x[j * len + k]) > std::fabs(x[j * len + big])) big = k;
  if (len == 0 || !(x[j * len + big] < 0.0)) return;
  for (int64_t k = 0; k < len; ++k) x[j * len + k] = -x[j * len + k];
  for (int64_t k = 0; k < len_y; ++k) y[j * len_y + k] = -y[j * len_y + k];
}

// a [m, n] -> u [m, k], s [k] descending, vt [k, n] (k = min(m, n)), in double. One-sided
// (Hestenes) Jacobi on the columns of a (of a^T when m < n): rotations orthogonalize each
// pair of columns in turn; the column norms are then the singular values. The columns are
// kept as rows (bt, qt), so the inner loops run along rows.
ORTM_HOST_DEVICE void svd_matrix_double(const double* a, int64_t m, int64_t n, double* u, double* s,
                                        double* vt, double* work) {
  const bool tall = m >= n;
  const int64_t r = tall ? m : n, c = tall ? n : m;
  double* bt = work;          // [c, r]: the columns of a or a^T, rotated until orthogonal
  double* qt = work + r * c;  // [c, c]: the rotations, column j in row j
  double* norm = qt + c * c;  // [c]
  for (int64_t j = 0; j < c; ++j)
    for (int64_t i = 0; i < r; ++i) bt[j * r + i] = tall ? a[i * n + j] : a[j * n + i];
  for (int64_t i = 0; i < c; ++i)
    for (int64_t j = 0; j < c; ++j) qt[i * c + j] = i == j ? 1.0 : 0.0;
  if (!spectral_all_finite(bt, r * c)) {
    for (int64_t i = 0; i < m * c; ++i) u[i] = NAN;
    for (int64_t i = 0; i < c; ++i) s[i] = NAN;
    for (int64_t i = 0; i < c * n; ++i) vt[i] = NAN;
    return;
  }
  // Scaled to a largest magnitude of 1, so that the sums of squares below neither underflow
  // nor overflow; the singular values are scaled back.
  double scale = 0.0;
  for (int64_t i = 0; i < r * c; ++i) scale = std::fmax(scale, std::fabs(bt[i]));
  if (scale > 0.0)
    for (int64_t i = 0; i < r * c; ++i) bt[i] /= scale;
  for (int sweep = 0; sweep < kJacobiMaxSweeps; ++sweep) {
    bool rotated = false;
    for (int64_t p = 0; p < c; ++p)
      for (int64_t t = p + 1; t < c; ++t) {
        double* x = bt + p * r;
        double* y = bt + t * r;
        double alpha = 0.0, beta = 0.0, gamma = 0.0;
        for (int64_t i = 0; i < r; ++i) {
          alpha += x[i] * x[i];
          beta += y[i] * y[i];
          gamma += x[i] * y[i];
        }
        if (!(std::fabs(gamma) > 1e-15 * std::sqrt(alpha * beta))) continue;
        rotated = true;
        const double zeta = (beta - alpha) / (2.0 * gamma);
        const double tan =
            (zeta >= 0.0 ? 1.0 : -1.0) / (std::fabs(zeta) + std::sqrt(1.0 + zeta * zeta));
        const double cs = 1.0 / std::sqrt(1.0 + tan * tan), sn = cs * tan;
        for (int64_t i = 0; i < r; ++i) {
          const double xi = x[i], yi = y[i];
          x[i] = cs * xi - sn * yi;
          y[i] = sn * xi + cs * yi;
        }
        double* qx = qt + p * c;
        double* qy = qt + t * c;
        for (int64_t i = 0; i < c; ++i) {
          const double xi = qx[i], yi = qy[i];
          qx[i] = cs * xi - sn * yi;
          qy[i] = sn * xi + cs * yi;
        }
      }
    if (!rotated) break;
  }
  for (int64_t j = 0; j < c; ++j) {
    double sum = 0.0;
    for (int64_t i = 0; i < r; ++i) sum += bt[j * r + i] * bt[j * r + i];
    norm[j] = std::sqrt(sum);
  }
  for (int64_t j = 0; j < c; ++j) {  // selection sort, descending
    int64_t best = j;
    for (int64_t i = j + 1; i < c; ++i)
      if (norm[i] > norm[best]) best = i;
    if (best == j) continue;
    const double t = norm[j];
    norm[j] = norm[best];
    norm[best] = t;
    for (int64_t i = 0; i < r; ++i) {
      const double x = bt[j * r + i];
      bt[j * r + i] = bt[best * r + i];
      bt[best * r + i] = x;
    }
    for (int64_t i = 0; i < c; ++i) {
      const double x = qt[j * c + i];
      qt[j * c + i] = qt[best * c + i];
      qt[best * c + i] = x;
    }
  }
  // Left vectors: the normalized columns; those of (numerically) zero singular values are
  // completed to an orthonormal set.
  const double floor = (c > 0 ? norm[0] : 0.0) * 1e-15 * static_cast<double>(r);
  for (int64_t j = 0; j < c; ++j) {
    if (norm[j] > floor && norm[j] > 0.0) {
      for (int64_t i = 0; i < r; ++i) bt[j * r + i] /= norm[j];
    } else {
      spectral_complete_row(bt, r, j);
    }
    // The sign is fixed on U's columns: bt's rows when tall, qt's (a^T's right vectors)
    // otherwise.
    if (tall)
      spectral_fix_row_sign(bt, r, qt, c, j);
    else
      spectral_fix_row_sign(qt, c, bt, r, j);
  }
  for (int64_t j = 0; j < c; ++j) s[j] = norm[j] * scale;
  // tall: a = b diag(s) q^T, u = b [m, n], vt = q^T [n, n]; wide: a^T = b diag(s) q^T,
  // u = q [m, m], vt = b^T [m, n].
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < c; ++j) u[i * c + j] = tall ? bt[j * r + i] : qt[j * c + i];
  for (int64_t j = 0; j < c; ++j)
    for (int64_t i = 0; i < n; ++i) vt[j * n + i] = tall ? qt[j * c + i] : bt[j * r + i];
}

ORTM_HOST_DEVICE int64_t svd_matrix_work(int64_t m, int64_t n) {
  const int64_t k = m < n ? m : n;
  return m * n + m * k + k + k * n + svd_work(m, n);
}

template <typename T>
ORTM_HOST_DEVICE void svd_matrix(const T* a, int64_t m, int64_t n, T* u, T* s, T* vt,
                                 double* work) {
  const int64_t k = m < n ? m : n;
  double* ad = work;
  double* ud = ad + m * n;
  double* sd = ud + m * k;
  double* vd = sd + k;
  for (int64_t i = 0; i < m * n; ++i) ad[i] = static_cast<double>(a[i]);
  svd_matrix_double(ad, m, n, ud, sd, vd, vd + k * n);
  for (int64_t i = 0; i < m * k; ++i) u[i] = static_cast<T>(ud[i]);
  for (int64_t i = 0; i < k; ++i) s[i] = static_cast<T>(sd[i]);
  for (int64_t i = 0; i < k * n; ++i) vt[i] = static_cast<T>(vd[i]);
}

// torch's tolerance of pinv and matrix_rank: values above max(atol, rtol * largest) count
// (rtol < 0, unset: 0 where atol > 0, else eps * max(m, n), eps of the input's dtype).
ORTM_HOST_DEVICE double spectral_tolerance(double largest, double atol, double rtol, double eps,
                                           int64_t m, int64_t n) {
  const double r = rtol >= 0.0 ? rtol : atol > 0.0 ? 0.0 : eps * static_cast<double>(m > n ? m : n);
  const double rel = r * largest;
  return atol > rel ? atol : rel;
}

ORTM_HOST_DEVICE int64_t pinv_work(int64_t m, int64_t n) {
  const int64_t k = m < n ? m : n;
  const int64_t sym = eigh_work(n) + 2 * n * n + n + n * n;
  const int64_t gen = svd_matrix_work(m, n) + m * n + m * k + k + k * n;
  return sym > gen ? sym : gen;
}

// The spectrum of a (singular values, descending; or, when `hermitian`, eigenvalues with
// their vectors) into the workspace: returns pointers through the out-arguments. vals [k];
// left [m, k] and right_t [k, n] with a = left diag(vals) right_t.
template <typename T>
ORTM_HOST_DEVICE void spectral_factors(const T* a, int64_t m, int64_t n, bool hermitian,
                                       double*& left, double*& vals, double*& right_t,
                                       double* work) {
  const int64_t k = m < n ? m : n;
  if (hermitian) {  // a = V diag(w) V^T (m == n), the lower triangle read
    double* ad = work;
    double* wd = ad + n * n;
    double* vd = wd + n;
    double* vtd = vd + n * n;
    for (int64_t i = 0; i < n * n; ++i) ad[i] = static_cast<double>(a[i]);
    eigh_matrix(ad, n, true, wd, vd, vtd + n * n);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j) vtd[j * n + i] = vd[i * n + j];
    left = vd, vals = wd, right_t = vtd;
    return;
  }
  double* ad = work;
  double* ud = ad + m * n;
  double* sd = ud + m * k;
  double* vd = sd + k;
  for (int64_t i = 0; i < m * n; ++i) ad[i] = static_cast<double>(a[i]);
  svd_matrix_double(ad, m, n, ud, sd, vd, vd + k * n);
  left = ud, vals = sd, right_t = vd;
}

// p [n, m] = pinv(a [m, n]) = right diag(1 / vals) left^T over the values whose magnitude is
// above the tolerance.
template <typename T>
ORTM_HOST_DEVICE void pinv_matrix(const T* a, int64_t m, int64_t n, bool hermitian, double atol,
                                  double rtol, double eps, T* p, double* work) {
  const int64_t k = m < n ? m : n;
  double *left = nullptr, *vals = nullptr, *right_t = nullptr;
  spectral_factors(a, m, n, hermitian, left, vals, right_t, work);
  double largest = 0.0;
  for (int64_t j = 0; j < k; ++j) largest = std::fmax(largest, std::fabs(vals[j]));
  const double tol = spectral_tolerance(largest, atol, rtol, eps, m, n);
  if (k > 0 && std::isnan(vals[0])) {  // a non-finite input
    for (int64_t i = 0; i < n * m; ++i) p[i] = static_cast<T>(NAN);
    return;
  }
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < m; ++j) {
      double acc = 0.0;
      for (int64_t l = 0; l < k; ++l)
        if (std::fabs(vals[l]) > tol) acc += right_t[l * n + i] * left[j * k + l] / vals[l];
      p[i * m + j] = static_cast<T>(acc);
    }
}

template <typename T>
ORTM_HOST_DEVICE int64_t matrix_rank_matrix(const T* a, int64_t m, int64_t n, bool hermitian,
                                            double atol, double rtol, double eps, double* work) {
  const int64_t k = m < n ? m : n;
  double *left = nullptr, *vals = nullptr, *right_t = nullptr;
  spectral_factors(a, m, n, hermitian, left, vals, right_t, work);
  double largest = 0.0;
  for (int64_t j = 0; j < k; ++j) largest = std::fmax(largest, std::fabs(vals[j]));
  const double tol = spectral_tolerance(largest, atol, rtol, eps, m, n);
  int64_t rank = 0;
  for (int64_t j = 0; j < k; ++j) rank += std::fabs(vals[j]) > tol;
  return rank;
}

}  // namespace math
}  // namespace ortmodule
