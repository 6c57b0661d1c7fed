// Per-matrix dense linear algebra by LU, shared by the CPU loops (ops/linalg_lu_ops.cpp) and
// the CUDA kernels (backends/cuda/linalg_lu.cu, one thread per matrix): LU factorization with
// partial pivoting as LAPACK's getrf chooses pivots, triangular solves, and the determinant
// read off a factorization. Matrices are row-major and contiguous; the factorization works in
// double whatever the tensor's dtype.
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/math/host_device.h"

namespace ortmodule {
namespace math {

// a [m, n] (in place) = P L U: L unit lower triangular below the diagonal, U on and above it.
// piv[j] (j < min(m, n)) is the 1-based row swapped with row j at step j: the first row of
// largest |value| in the column at or below the diagonal (LAPACK's iamax). A zero pivot
// leaves its column unscaled and the factorization goes on, as getrf does. Returns getrf's
// info (the 1-based index of the first zero U[j, j], 0 if none); *odd_swaps is whether an odd
// number of row swaps happened (the permutation's sign is -1).
ORTM_HOST_DEVICE int64_t lu_factor_inplace(double* a, int64_t m, int64_t n, int32_t* piv,
                                           bool* odd_swaps) {
  const int64_t k = m < n ? m : n;
  int64_t info = 0;
  bool odd = false;
  for (int64_t j = 0; j < k; ++j) {
    int64_t p = j;
    double best = fabs(a[j * n + j]);
    for (int64_t i = j + 1; i < m; ++i) {
      const double v = fabs(a[i * n + j]);
      if (v > best) {
        best = v;
        p = i;
      }
    }
    piv[j] = static_cast<int32_t>(p + 1);
    if (a[p * n + j] != 0.0) {
      if (p != j) {
        odd = !odd;
        for (int64_t c = 0; c < n; ++c) {
          const double t = a[j * n + c];
          a[j * n + c] = a[p * n + c];
          a[p * n + c] = t;
        }
      }
      // getf2 scales by the reciprocal unless the pivot is below the safe minimum.
      const double pivot = a[j * n + j];
      if (fabs(pivot) >= 2.2250738585072014e-308) {
        const double r = 1.0 / pivot;
        for (int64_t i = j + 1; i < m; ++i) a[i * n + j] *= r;
      } else {
        for (int64_t i = j + 1; i < m; ++i) a[i * n + j] /= pivot;
      }
    } else if (info == 0) {
      info = j + 1;
    }
    for (int64_t i = j + 1; i < m; ++i) {
      const double l = a[i * n + j];
      if (l == 0.0) continue;
      for (int64_t c = j + 1; c < n; ++c) a[i * n + c] -= l * a[j * n + c];
    }
  }
  *odd_swaps = odd;
  return info;
}

// det = sign * prod(diag(U)) of a factorized n x n matrix lu.
template <typename T>
ORTM_HOST_DEVICE double lu_det(const T* lu, int64_t n, bool odd_swaps) {
  double d = odd_swaps ? -1.0 : 1.0;
  for (int64_t j = 0; j < n; ++j) d *= static_cast<double>(lu[j * n + j]);
  return d;
}

// (sign, log|det|) of a factorized n x n matrix lu: (0, -inf) when singular, as torch.
template <typename T>
ORTM_HOST_DEVICE void lu_slogdet(const T* lu, int64_t n, bool odd_swaps, double* sign,
                                 double* logabs) {
  double s = odd_swaps ? -1.0 : 1.0;
  double l = 0.0;
  for (int64_t j = 0; j < n; ++j) {
    const double v = static_cast<double>(lu[j * n + j]);
    if (v < 0) s = -s;
    if (v == 0) s = 0;
    l += log(fabs(v));
  }
  if (s == 0) l = -INFINITY;
  *sign = s;
  *logabs = l;
}

// The row order getrf's swaps make: perm[i] = the row of A that row i of L U is, from
// identity swapping rows j and piv[j] - 1 for j < k (A = P L U with P[perm[i], i] = 1).
// False where a pivot is outside [1, m].
template <typename I>
ORTM_HOST_DEVICE bool lu_permutation(const I* piv, int64_t m, int64_t k, int64_t* perm) {
  for (int64_t i = 0; i < m; ++i) perm[i] = i;
  for (int64_t j = 0; j < k; ++j) {
    const int64_t p = static_cast<int64_t>(piv[j]) - 1;
    if (p < 0 || p >= m) return false;
    const int64_t t = perm[j];
    perm[j] = perm[p];
    perm[p] = t;
  }
  return true;
}

// Element e of the gradient of LU [batch, m, n] from those of L [batch, m, k] (below the
// diagonal) and U [batch, k, n] (on and above it); an absent gradient counts as zeros.
template <typename T>
ORTM_HOST_DEVICE T lu_unpack_grad_at(const T* dl, const T* du, int64_t e, int64_t m, int64_t n,
                                     int64_t k) {
  const int64_t b = e / (m * n), i = (e / n) % m, j = e % n;
  if (i > j) return dl ? dl[b * m * k + i * k + j] : T(0);
  return du ? du[b * k * n + i * n + j] : T(0);
}

// A triangular system: op(A) X = B (left) or X op(A) = B (right), A [n, n] read only in its
// upper (or lower) triangle, its diagonal taken as ones when unit; op(A) = A^T when transpose.
// B and X are [n, r] (left) or [r, n] (right).
struct TriangularSystem {
  int64_t n = 0, r = 0;
  bool upper = true, left = true, unit = false, transpose = false;
};

// Solves one system, x = b on entry (they may alias), sums accumulated in double. Written as
// M Y = C with M = op(A) (left) or op(A)^T (right), Y = X or X^T.
template <typename T>
ORTM_HOST_DEVICE void triangular_solve_matrix(const TriangularSystem& s, const T* a, T* x) {
  const int64_t n = s.n, r = s.r;
  const bool t = s.transpose != !s.left;  // M(i, j) = A(j, i)
  const bool m_upper = s.upper != t;
  const int64_t ys_i = s.left ? r : 1, ys_c = s.left ? 1 : n;
  for (int64_t c = 0; c < r; ++c) {
    for (int64_t step = 0; step < n; ++step) {
      const int64_t i = m_upper ? n - 1 - step : step;
      double acc = static_cast<double>(x[i * ys_i + c * ys_c]);
      const int64_t j0 = m_upper ? i + 1 : 0, j1 = m_upper ? n : i;
      for (int64_t j = j0; j < j1; ++j) {
        const double mij = static_cast<double>(t ? a[j * n + i] : a[i * n + j]);
        acc -= mij * static_cast<double>(x[j * ys_i + c * ys_c]);
      }
      if (!s.unit) acc /= static_cast<double>(a[i * n + i]);
      x[i * ys_i + c * ys_c] = static_cast<T>(acc);
    }
  }
}

// Batch dims of two operands broadcast to an output's: the output matrix index -> each
// operand's matrix index (strides 0 along broadcast dims).
struct BatchBroadcast {
  static constexpr int kMaxRank = 8;
  int rank = 0;
  int64_t dims[kMaxRank] = {};
  int64_t a_strides[kMaxRank] = {};
  int64_t b_strides[kMaxRank] = {};
};

ORTM_HOST_DEVICE void batch_broadcast_index(const BatchBroadcast& bb, int64_t i, int64_t* ia,
                                            int64_t* ib) {
  int64_t a = 0, b = 0;
  for (int d = bb.rank - 1; d >= 0; --d) {
    const int64_t q = i % bb.dims[d];
    i /= bb.dims[d];
    a += q * bb.a_strides[d];
    b += q * bb.b_strides[d];
  }
  *ia = a;
  *ib = b;
}

}  // namespace math
}  // namespace ortmodule
