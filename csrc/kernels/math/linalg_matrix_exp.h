// The exponential of one n x n matrix, in double, shared by the CPU loop
// (ops/linalg_matrix_exp_ops.cpp) and the CUDA kernel (backends/cuda/linalg_matrix_exp.cu, one
// thread per matrix): scaling and squaring with the diagonal Pade approximant of degree 3, 5,
// 7, 9 or 13 that Higham's algorithm picks from the matrix's 1-norm (N. J. Higham, "The
// scaling and squaring method for the matrix exponential revisited", SIAM J. Matrix Anal.
// Appl. 26(4), 2005: backward error below double's unit roundoff). The Pade quotient
// q(A)^-1 p(A) is solved through an LU factorization with partial pivoting (linalg_lu.h).
// Matrices are row-major and contiguous.
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/math/host_device.h"
#include "kernels/math/linalg_lu.h"

namespace ortmodule {
namespace math {

// matrix_exp_inplace's scratch: this many n x n double matrices, and n int32 pivots.
constexpr int64_t kMatrixExpWorkMatrices = 7;

// c = a b for n x n matrices (c distinct from a and b).
ORTM_HOST_DEVICE void square_matmul(const double* a, const double* b, double* c, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    double* ci = c + i * n;
    for (int64_t j = 0; j < n; ++j) ci[j] = 0.0;
    for (int64_t k = 0; k < n; ++k) {
      const double aik = a[i * n + k];
      if (aik == 0.0) continue;
      const double* bk = b + k * n;
      for (int64_t j = 0; j < n; ++j) ci[j] += aik * bk[j];
    }
  }
}

// max_j sum_i |a[i, j]|; NaN when an entry is NaN.
ORTM_HOST_DEVICE double matrix_norm1(const double* a, int64_t n) {
  double best = 0.0;
  for (int64_t j = 0; j < n; ++j) {
    double s = 0.0;
    for (int64_t i = 0; i < n; ++i) s += fabs(a[i * n + j]);
    if (!(s <= best)) best = s;  // also takes a NaN column sum
  }
  return best;
}

// b [n, n] = A^-1 b in place, A = P L U factorized by lu_factor_inplace into (lu, piv).
ORTM_HOST_DEVICE void lu_solve_square(const double* lu, const int32_t* piv, double* b, int64_t n) {
  for (int64_t j = 0; j < n; ++j) {
    const int64_t p = piv[j] - 1;
    if (p == j) continue;
    for (int64_t c = 0; c < n; ++c) {
      const double t = b[j * n + c];
      b[j * n + c] = b[p * n + c];
      b[p * n + c] = t;
    }
  }
  for (int64_t i = 1; i < n; ++i)  // L unit lower
    for (int64_t k = 0; k < i; ++k) {
      const double l = lu[i * n + k];
      if (l == 0.0) continue;
      for (int64_t c = 0; c < n; ++c) b[i * n + c] -= l * b[k * n + c];
    }
  for (int64_t i = n - 1; i >= 0; --i) {  // U upper
    for (int64_t k = i + 1; k < n; ++k) {
      const double u = lu[i * n + k];
      if (u == 0.0) continue;
      for (int64_t c = 0; c < n; ++c) b[i * n + c] -= u * b[k * n + c];
    }
    const double d = lu[i * n + i];
    for (int64_t c = 0; c < n; ++c) b[i * n + c] /= d;
  }
}

// The coefficients b_0 .. b_m of the degree-m Pade numerator p(x) = sum b_k x^k (the
// denominator is p(-x)), scaled to integers as in Higham's Table 2.2; m in {3, 5, 7, 9, 13}.
ORTM_HOST_DEVICE void pade_coefficients(int m, double* b) {
  const double b3[] = {120.0, 60.0, 12.0, 1.0};
  const double b5[] = {30240.0, 15120.0, 3360.0, 420.0, 30.0, 1.0};
  const double b7[] = {17297280.0, 8648640.0, 1995840.0, 277200.0, 25200.0, 1512.0, 56.0, 1.0};
  const double b9[] = {17643225600.0, 8821612800.0, 2075673600.0, 302702400.0, 30270240.0,
                       2162160.0,     110880.0,     3960.0,       90.0,        1.0};
  const double b13[] = {64764752532480000.0,
                        32382376266240000.0,
                        7771770303897600.0,
                        1187353796428800.0,
                        129060195264000.0,
                        10559470521600.0,
                        670442572800.0,
                        33522128640.0,
                        1323241920.0,
                        40840800.0,
                        960960.0,
                        16380.0,
                        182.0,
                        1.0};
  const double* src = m == 3 ? b3 : m == 5 ? b5 : m == 7 ? b7 : m == 9 ? b9 : b13;
  for (int k = 0; k <= m; ++k) b[k] = src[k];
}

// y = sum_t c[t] x_t (+ c_identity I) over `count` n x n matrices x_t.
ORTM_HOST_DEVICE void matrix_combination(double* y, int64_t n, int count, const double* const* x,
                                         const double* c, double c_identity) {
  for (int64_t e = 0; e < n * n; ++e) {
    double s = 0.0;
    for (int t = 0; t < count; ++t) s += c[t] * x[t][e];
    y[e] = s;
  }
  for (int64_t i = 0; i < n; ++i) y[i * n + i] += c_identity;
}

// a [n, n] = exp(a) in place. work holds kMatrixExpWorkMatrices * n * n doubles, piv n int32.
// As torch: a 1 x 1 matrix is the scalar exponential (exp(inf) = inf, exp(-inf) = 0), and a
// larger matrix with a non-finite entry gives NaNs.
ORTM_HOST_DEVICE void matrix_exp_inplace(double* a, int64_t n, double* work, int32_t* piv) {
  if (n == 1) {
    a[0] = exp(a[0]);
    return;
  }
  const int64_t nn = n * n;
  const double norm = matrix_norm1(a, n);
  if (!(norm < INFINITY)) {
    for (int64_t e = 0; e < nn; ++e) a[e] = NAN;
    return;
  }
  // Higham's theta_m: the largest 1-norm for which degree m is accurate to double precision.
  const double theta[] = {1.495585217958292e-2, 2.539398330063230e-1, 9.504178996162932e-1,
                          2.097847961257068e0, 5.371920351148152e0};
  const int degrees[] = {3, 5, 7, 9, 13};
  int m = 13;
  int squarings = 0;
  for (int d = 0; d < 4; ++d)
    if (norm <= theta[d]) {
      m = degrees[d];
      break;
    }
  if (m == 13 && norm > theta[4]) {
    squarings = static_cast<int>(ceil(log2(norm / theta[4])));
    const double scale = ldexp(1.0, -squarings);
    for (int64_t e = 0; e < nn; ++e) a[e] *= scale;
  }
  double* a2 = work;
  double* a4 = work + nn;
  double* a6 = work + 2 * nn;
  double* a8 = work + 3 * nn;  // A^8 for m = 9, scratch for m = 13
  double* u = work + 4 * nn;
  double* v = work + 5 * nn;
  double* t = work + 6 * nn;
  double b[14];
  pade_coefficients(m, b);
  square_matmul(a, a, a2, n);
  if (m >= 5) square_matmul(a2, a2, a4, n);
  if (m >= 7) square_matmul(a4, a2, a6, n);
  if (m == 9) square_matmul(a6, a2, a8, n);
  if (m == 13) {
    // U = A [A6 (b13 A6 + b11 A4 + b9 A2) + b7 A6 + b5 A4 + b3 A2 + b1 I]
    // V = A6 (b12 A6 + b10 A4 + b8 A2) + b6 A6 + b4 A4 + b2 A2 + b0 I
    const double* powers[] = {a6, a4, a2};
    const double odd_high[] = {b[13], b[11], b[9]};
    const double even_high[] = {b[12], b[10], b[8]};
    const double odd_low[] = {b[7], b[5], b[3]};
    const double even_low[] = {b[6], b[4], b[2]};
    matrix_combination(a8, n, 3, powers, odd_high, 0.0);
    square_matmul(a6, a8, t, n);
    matrix_combination(a8, n, 3, powers, odd_low, b[1]);
    for (int64_t e = 0; e < nn; ++e) t[e] += a8[e];
    square_matmul(a, t, u, n);
    matrix_combination(a8, n, 3, powers, even_high, 0.0);
    square_matmul(a6, a8, v, n);
    matrix_combination(a8, n, 3, powers, even_low, b[0]);
    for (int64_t e = 0; e < nn; ++e) v[e] += a8[e];
  } else {
    // U = A sum_k b_{2k+1} A^{2k}, V = sum_k b_{2k} A^{2k}
    const double* powers[] = {a2, a4, a6, a8};
    const int count = (m - 1) / 2;
    double odd[4], even[4];
    for (int k = 0; k < count; ++k) {
      odd[k] = b[2 * k + 3];
      even[k] = b[2 * k + 2];
    }
    matrix_combination(t, n, count, powers, odd, b[1]);
    square_matmul(a, t, u, n);
    matrix_combination(v, n, count, powers, even, b[0]);
  }
  // exp(A) ~ (V - U)^-1 (V + U): the numerator into u, the denominator into v.
  for (int64_t e = 0; e < nn; ++e) {
    const double p = v[e] + u[e];
    v[e] -= u[e];
    u[e] = p;
  }
  bool odd_swaps = false;
  lu_factor_inplace(v, n, n, piv, &odd_swaps);
  lu_solve_square(v, piv, u, n);
  double* x = u;
  double* y = t;
  for (int s = 0; s < squarings; ++s) {
    square_matmul(x, x, y, n);
    double* z = x;
    x = y;
    y = z;
  }
  for (int64_t e = 0; e < nn; ++e) a[e] = x[e];
}

}  // namespace math
}  // namespace ortmodule
