// Per-matrix Cholesky routines (ai.ortmodule Cholesky, CholeskySolve, CholeskyInverse and
// their gradients), shared by the CPU loops (ops/linalg_cholesky_ops.cpp) and the CUDA
// kernels (backends/cuda/linalg_qr.cu, one thread per matrix). Matrices are row-major and
// contiguous; every routine computes in double in a caller-provided workspace of `work`
// doubles per matrix, whatever the element type.
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/math/host_device.h"

namespace ortmodule {
namespace math {

// Output batch index -> matrix index of each of two inputs whose batch dims broadcast.
struct BatchBroadcast {
  static constexpr int kMaxRank = 8;
  int rank = 0;
  int64_t dims[kMaxRank] = {};
  int64_t stride[2][kMaxRank] = {};  // per input, 0 along broadcast dims
  ORTM_HOST_DEVICE int64_t index(int which, int64_t b) const {
    int64_t at = 0;
    for (int d = rank - 1; d >= 0; --d) {
      at += (b % dims[d]) * stride[which][d];
      b /= dims[d];
    }
    return at;
  }
};

// Loads an n x n triangular factor into w as the lower factor L (the transpose of an upper
// one), zeros above the diagonal.
template <typename T>
ORTM_HOST_DEVICE void load_lower_factor(const T* f, int64_t n, bool upper, double* w) {
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j)
      w[i * n + j] = j > i ? 0.0 : static_cast<double>(upper ? f[j * n + i] : f[i * n + j]);
}

// x (n x r) <- L^-1 x, L lower (n x n).
ORTM_HOST_DEVICE void lower_solve(const double* l, int64_t n, double* x, int64_t r) {
  for (int64_t i = 0; i < n; ++i)
    for (int64_t c = 0; c < r; ++c) {
      double s = x[i * r + c];
      for (int64_t k = 0; k < i; ++k) s -= l[i * n + k] * x[k * r + c];
      x[i * r + c] = s / l[i * n + i];
    }
}
// x (n x r) <- L^-T x, L lower (n x n).
ORTM_HOST_DEVICE void lower_transpose_solve(const double* l, int64_t n, double* x, int64_t r) {
  for (int64_t i = n - 1; i >= 0; --i)
    for (int64_t c = 0; c < r; ++c) {
      double s = x[i * r + c];
      for (int64_t k = i + 1; k < n; ++k) s -= l[k * n + i] * x[k * r + c];
      x[i * r + c] = s / l[i * n + i];
    }
}

// In place: the lower triangle of a (n x n) becomes L with L L^T = A, A's lower triangle
// read, column by column as LAPACK's potf2. Returns 0, or the order j + 1 of the first
// leading minor that is not positive definite; its diagonal entry then holds
// a_jj - sum_k L_jk^2 and the later columns keep A's values (as LAPACK leaves them).
ORTM_HOST_DEVICE int64_t cholesky_lower_inplace(double* a, int64_t n) {
  for (int64_t j = 0; j < n; ++j) {
    double d = a[j * n + j];
    for (int64_t k = 0; k < j; ++k) d -= a[j * n + k] * a[j * n + k];
    if (!(d > 0.0)) {
      a[j * n + j] = d;
      return j + 1;
    }
    d = std::sqrt(d);
    a[j * n + j] = d;
    for (int64_t i = j + 1; i < n; ++i) {
      double s = a[i * n + j];
      for (int64_t k = 0; k < j; ++k) s -= a[i * n + k] * a[j * n + k];
      a[i * n + j] = s / d;
    }
  }
  return 0;
}

// Cholesky(A; upper): L (lower, or U = L^T from A's upper triangle), info per matrix.
template <typename T>
struct CholeskyFn {
  const T* a;
  T* l;
  int32_t* info;
  int64_t n;
  bool upper;
  int64_t work;  // n * n
  ORTM_HOST_DEVICE void operator()(int64_t b, double* w) const {
    const T* A = a + b * n * n;
    T* L = l + b * n * n;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j)
        w[i * n + j] = static_cast<double>(upper ? A[j * n + i] : A[i * n + j]);
    info[b] = static_cast<int32_t>(cholesky_lower_inplace(w, n));
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j) {
        const double v = j > i ? 0.0 : w[i * n + j];
        (upper ? L[j * n + i] : L[i * n + j]) = static_cast<T>(v);
      }
  }
};

// gA = L^-T Phi(L^T gL) L^-1 (torch's cholesky_backward), Phi(P) = (tril(P) + tril(P, -1)^T) / 2,
// for L = U^T and gL = gU^T when upper. Workspace: 3 n^2.
template <typename T>
struct CholeskyGradFn {
  const T* l;
  const T* gl;
  T* ga;
  int64_t n;
  bool upper;
  int64_t work;  // 3 n^2
  ORTM_HOST_DEVICE void operator()(int64_t b, double* w) const {
    const int64_t nn = n * n;
    double* L = w;
    double* G = w + nn;
    double* P = w + 2 * nn;
    load_lower_factor(l + b * nn, n, upper, L);
    const T* g = gl + b * nn;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j)
        G[i * n + j] = static_cast<double>(upper ? g[j * n + i] : g[i * n + j]);
    // P = tril(L^T tril(gL)), then symmetrised with the diagonal halved.
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j <= i; ++j) {
        double s = 0.0;
        for (int64_t k = i; k < n; ++k) s += L[k * n + i] * (j <= k ? G[k * n + j] : 0.0);
        P[i * n + j] = s;
      }
    for (int64_t i = 0; i < n; ++i) {
      P[i * n + i] *= 0.5;
      for (int64_t j = 0; j < i; ++j) {
        P[i * n + j] *= 0.5;
        P[j * n + i] = P[i * n + j];
      }
    }
    // X = L^-T P, then gA = X L^-1 = (L^-T X^T)^T.
    lower_transpose_solve(L, n, P, n);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j) G[i * n + j] = P[j * n + i];
    lower_transpose_solve(L, n, G, n);
    T* out = ga + b * nn;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j) out[i * n + j] = static_cast<T>(G[j * n + i]);
  }
};

// x (n x r) <- (L L^T)^-1 x.
ORTM_HOST_DEVICE void cholesky_solve_inplace(const double* l, int64_t n, double* x, int64_t r) {
  lower_solve(l, n, x, r);
  lower_transpose_solve(l, n, x, r);
}

// CholeskySolve(B, F; upper): X = (L L^T)^-1 B, L = F or F^T; batch dims broadcast
// (input 0 of `bc` is B, input 1 is F). Workspace: n^2 + n r.
template <typename T>
struct CholeskySolveFn {
  const T* rhs;
  const T* f;
  T* x;
  int64_t n, r;
  bool upper;
  BatchBroadcast bc;
  int64_t work;
  ORTM_HOST_DEVICE void operator()(int64_t b, double* w) const {
    double* L = w;
    double* X = w + n * n;
    load_lower_factor(f + bc.index(1, b) * n * n, n, upper, L);
    const T* B = rhs + bc.index(0, b) * n * r;
    for (int64_t i = 0; i < n * r; ++i) X[i] = static_cast<double>(B[i]);
    cholesky_solve_inplace(L, n, X, r);
    for (int64_t i = 0; i < n * r; ++i) x[b * n * r + i] = static_cast<T>(X[i]);
  }
};

// CholeskySolveGrad(gX, F, X; upper) -> gB = (L L^T)^-1 gX and, with C = gB X^T + X gB^T,
// gF = -F C (upper) or -C F (lower), torch's cholesky_solve_backward (F as given, not masked).
// Outputs in the broadcast batch shape (the gradient rule sums them down). Workspace:
// 2 n^2 + n r.
template <typename T>
struct CholeskySolveGradFn {
  const T* gx;
  const T* f;
  const T* x;
  T* gb;  // may be null
  T* gf;  // may be null
  int64_t n, r;
  bool upper;
  BatchBroadcast bc;  // input 0: gX and X (the output batch), input 1: F
  int64_t work;
  ORTM_HOST_DEVICE void operator()(int64_t b, double* w) const {
    double* L = w;
    double* G = w + n * n;
    double* C = w + n * n + n * r;
    const T* F = f + bc.index(1, b) * n * n;
    load_lower_factor(F, n, upper, L);
    for (int64_t i = 0; i < n * r; ++i) G[i] = static_cast<double>(gx[b * n * r + i]);
    cholesky_solve_inplace(L, n, G, r);
    if (gb)
      for (int64_t i = 0; i < n * r; ++i) gb[b * n * r + i] = static_cast<T>(G[i]);
    if (!gf) return;
    const T* X = x + b * n * r;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = 0.0;
        for (int64_t c = 0; c < r; ++c)
          s += G[i * r + c] * static_cast<double>(X[j * r + c]) +
               static_cast<double>(X[i * r + c]) * G[j * r + c];
        C[i * n + j] = s;
      }
    T* out = gf + b * n * n;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = 0.0;
        for (int64_t k = 0; k < n; ++k)
          s += upper ? static_cast<double>(F[i * n + k]) * C[k * n + j]
                     : C[i * n + k] * static_cast<double>(F[k * n + j]);
        out[i * n + j] = static_cast<T>(-s);
      }
  }
};

// CholeskyInverse(F; upper): (L L^T)^-1. Workspace: 2 n^2.
template <typename T>
struct CholeskyInverseFn {
  const T* f;
  T* y;
  int64_t n;
  bool upper;
  int64_t work;
  ORTM_HOST_DEVICE void operator()(int64_t b, double* w) const {
    double* L = w;
    double* X = w + n * n;
    load_lower_factor(f + b * n * n, n, upper, L);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j) X[i * n + j] = i == j ? 1.0 : 0.0;
    cholesky_solve_inplace(L, n, X, n);
    // Symmetric in exact arithmetic: keep the lower triangle's values on both sides.
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j <= i; ++j) {
        const double v = 0.5 * (X[i * n + j] + X[j * n + i]);
        y[b * n * n + i * n + j] = static_cast<T>(v);
        y[b * n * n + j * n + i] = static_cast<T>(v);
      }
  }
};

// CholeskyInverseGrad(gY, F, Y; upper): with C = Y (gY + gY^T) Y, gF = -F C (upper) or
// -C F (lower), torch's cholesky_inverse_backward. Workspace: 2 n^2.
template <typename T>
struct CholeskyInverseGradFn {
  const T* gy;
  const T* f;
  const T* y;
  T* gf;
  int64_t n;
  bool upper;
  int64_t work;
  ORTM_HOST_DEVICE void operator()(int64_t b, double* w) const {
    const int64_t nn = n * n;
    const T* G = gy + b * nn;
    const T* Y = y + b * nn;
    const T* F = f + b * nn;
    double* S = w;       // (gY + gY^T) Y
    double* C = w + nn;  // Y S
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = 0.0;
        for (int64_t k = 0; k < n; ++k)
          s += (static_cast<double>(G[i * n + k]) + static_cast<double>(G[k * n + i])) *
               static_cast<double>(Y[k * n + j]);
        S[i * n + j] = s;
      }
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = 0.0;
        for (int64_t k = 0; k < n; ++k) s += static_cast<double>(Y[i * n + k]) * S[k * n + j];
        C[i * n + j] = s;
      }
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = 0.0;
        for (int64_t k = 0; k < n; ++k)
          s += upper ? static_cast<double>(F[i * n + k]) * C[k * n + j]
                     : C[i * n + k] * static_cast<double>(F[k * n + j]);
        gf[b * nn + i * n + j] = static_cast<T>(-s);
      }
  }
};

}  // namespace math
}  // namespace ortmodule
