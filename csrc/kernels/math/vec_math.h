// Vector versions of the per-element math in elementwise.h, written once over a register
// wrapper V (kernels/cpu/simd.h: VecAvx2, VecAvx512) and instantiated per instruction set.
// Each matches its scalar counterpart to a few float32 ulp (tests/cpp/test_kernels_simd.cpp
// checks against float64 references); where the scalar form cancels (1 + erf(x) for
// x << 0), the vector form uses a cancellation-free identity instead.
#pragma once

namespace ortmodule {
namespace math {

// exp(x) in float32: x = n ln2 + r with |r| <= ln2/2, exp(r) by a degree-6 polynomial
// (Cephes expf, ~1 ulp), and 2^n applied in two halves so subnormal results and
// n = 128 need no special case. NaN propagates; below -103.97 gives 0, above 88.72 inf.
template <typename V>
typename V::F vec_exp(typename V::F x) {
  using F = typename V::F;
  const F lo = V::set1(-103.972076f), hi = V::set1(88.7228394f);
  // max/min return their second operand for NaN, so NaN survives the clamp.
  const F xc = V::min(hi, V::max(lo, x));
  const auto n = V::round_to_int(V::mul(xc, V::set1(1.44269504088896341f)));
  const F nf = V::to_float(n);
  F r = V::fnmadd(nf, V::set1(0.693359375f), xc);
  r = V::fnmadd(nf, V::set1(-2.12194440e-4f), r);
  F p = V::set1(1.9875691500e-4f);
  p = V::fmadd(p, r, V::set1(1.3981999507e-3f));
  p = V::fmadd(p, r, V::set1(8.3334519073e-3f));
  p = V::fmadd(p, r, V::set1(4.1665795894e-2f));
  p = V::fmadd(p, r, V::set1(1.6666665459e-1f));
  p = V::fmadd(p, r, V::set1(5.0000001201e-1f));
  p = V::add(V::fmadd(p, V::mul(r, r), r), V::set1(1.0f));
  const auto n1 = V::half_int(n);
  const auto n2 = V::sub_int(n, n1);
  F y = V::mul(V::mul(p, V::pow2(n1)), V::pow2(n2));
  y = V::select(V::lt(x, lo), V::zero(), y);
  return V::select(V::gt(x, hi), V::set1(__builtin_inff()), y);
}

// sigmoid(x) = 1 / (1 + exp(-x)): exp(-x) overflows to inf for x < -88.7, giving 0
// (the exact value is below 1e-38 there).
template <typename V>
typename V::F vec_sigmoid(typename V::F x) {
  const typename V::F one = V::set1(1.0f);
  return V::div(one, V::add(one, vec_exp<V>(V::sub(V::zero(), x))));
}

// tanh(x): x + x^3 P(x^2) for |x| < 0.625 (Cephes tanhf, where 1 - 2 / (e + 1) would
// cancel), else 1 - 2 / (exp(2|x|) + 1) with x's sign. About 1 ulp.
template <typename V>
typename V::F vec_tanh(typename V::F x) {
  using F = typename V::F;
  const F ax = V::abs(x);
  const F z = V::mul(x, x);
  F p = V::set1(-5.70498872745e-3f);
  p = V::fmadd(p, z, V::set1(2.06390887954e-2f));
  p = V::fmadd(p, z, V::set1(-5.37397155531e-2f));
  p = V::fmadd(p, z, V::set1(1.33314422036e-1f));
  p = V::fmadd(p, z, V::set1(-3.33332819422e-1f));
  const F small = V::fmadd(V::mul(p, z), x, x);
  const F one = V::set1(1.0f);
  const F e = vec_exp<V>(V::add(ax, ax));
  const F big = V::sub(one, V::div(V::set1(2.0f), V::add(e, one)));
  const F signed_big = V::select(V::lt(x, V::zero()), V::sub(V::zero(), big), big);
  return V::select(V::lt(ax, V::set1(0.625f)), small, signed_big);
}

// exp(-x^2 / 2) with the rounding error of x*x folded in (x^2 = q + q_lo exactly, and
// exp(-q_lo/2) ~ 1 - q_lo/2), so the Gaussian tail keeps float32 relative accuracy.
template <typename V>
typename V::F vec_exp_neg_half_square(typename V::F x) {
  using F = typename V::F;
  // Beyond 20 the result is 0 already; the clamp keeps inf * inf - inf out of q_lo.
  const F ax = V::min(V::set1(20.0f), V::abs(x));
  const F q = V::mul(ax, ax);
  const F q_lo = V::fmadd(ax, ax, V::sub(V::zero(), q));
  const F e = vec_exp<V>(V::mul(V::set1(-0.5f), q));
  return V::fnmadd(e, V::mul(V::set1(0.5f), q_lo), e);
}

// Phi(x), the normal CDF, as 0.5 erfc(-x / sqrt 2), which has no cancellation in the
// lower tail. erfc(a), a = |x| / sqrt 2 >= 0, as t e Q(t) with t = 1 / (1 + a / 2),
// e = exp(-a^2) = exp(-x^2 / 2) taken from x itself, and Q a degree-9 polynomial fitted to
// erfc(a) exp(a^2) / t over a in [0, 10] (tools/fit_erfc.py: relative error 2e-8, 1.7e-7
// with float32 Horner; a is capped at 10, where e has underflowed already). One form for
// every a: no branches, one division. Max error about 3 ulp of erfc.
// `gauss` is vec_exp_neg_half_square(x).
template <typename V>
typename V::F vec_normal_cdf(typename V::F x, typename V::F gauss) {
  using F = typename V::F;
  const F a = V::min(V::set1(10.0f), V::mul(V::abs(x), V::set1(0.70710678118654752f)));
  const F t = V::div(V::set1(1.0f), V::fmadd(a, V::set1(0.5f), V::set1(1.0f)));
  F q = V::set1(1.353464928e-02f);
  q = V::fmadd(q, t, V::set1(-1.296140403e-01f));
  q = V::fmadd(q, t, V::set1(4.428111315e-01f));
  q = V::fmadd(q, t, V::set1(-6.870458126e-01f));
  q = V::fmadd(q, t, V::set1(4.341518879e-01f));
  q = V::fmadd(q, t, V::set1(-1.045284793e-01f));
  q = V::fmadd(q, t, V::set1(2.274455130e-01f));
  q = V::fmadd(q, t, V::set1(2.382882237e-01f));
  q = V::fmadd(q, t, V::set1(2.828940153e-01f));
  q = V::fmadd(q, t, V::set1(2.820628881e-01f));
  const F half = V::mul(V::mul(V::set1(0.5f), gauss), V::mul(t, q));  // Phi(-|x|)
  return V::select(V::lt(x, V::zero()), half, V::sub(V::set1(1.0f), half));
}

// gelu(x) = x Phi(x) (elementwise.h: gelu).
template <typename V>
typename V::F vec_gelu(typename V::F x) {
  return V::mul(x, vec_normal_cdf<V>(x, vec_exp_neg_half_square<V>(x)));
}
// dy (Phi(x) + x phi(x)) (elementwise.h: gelu_grad), and into *y gelu(x) from the same Phi(x),
// bit for bit vec_gelu's.
template <typename V>
typename V::F vec_gelu_grad_and_value(typename V::F dy, typename V::F x, typename V::F* y) {
  using F = typename V::F;
  const F gauss = vec_exp_neg_half_square<V>(x);
  const F pdf = V::mul(V::set1(0.3989422804014327f), gauss);
  const F cdf = vec_normal_cdf<V>(x, gauss);
  *y = V::mul(x, cdf);
  return V::mul(dy, V::fmadd(x, pdf, cdf));
}
template <typename V>
typename V::F vec_gelu_grad(typename V::F dy, typename V::F x) {
  typename V::F y;
  return vec_gelu_grad_and_value<V>(dy, x, &y);
}

// The tanh form through 0.5 (1 + tanh(u)) = sigmoid(2u) = 1 / (1 + exp(-2u)), which keeps
// relative accuracy for x << 0 where 1 + tanh(u) cancels. exp's argument is capped at 88
// so 1 + e stays finite (sigmoid is then ~6e-39, not 0).
template <typename V>
typename V::F vec_gelu_tanh_sigmoid(typename V::F x, typename V::F* e_out) {
  using F = typename V::F;
  const F k0 = V::set1(0.7978845608028654f), k1 = V::set1(0.044715f);
  const F u = V::mul(V::mul(k0, x), V::fmadd(k1, V::mul(x, x), V::set1(1.0f)));
  const F e = vec_exp<V>(V::min(V::set1(88.0f), V::mul(V::set1(-2.0f), u)));
  *e_out = e;
  return V::div(V::set1(1.0f), V::add(V::set1(1.0f), e));
}
template <typename V>
typename V::F vec_gelu_tanh(typename V::F x) {
  typename V::F e;
  return V::mul(x, vec_gelu_tanh_sigmoid<V>(x, &e));
}
// dy (s + 2 x s (1 - s) du), s = sigmoid(2u), 1 - s = e s (elementwise.h: gelu_tanh_grad,
// with 0.5 (1 + t) = s and 1 - t^2 = 4 s (1 - s)), and into *y x s, bit for bit
// vec_gelu_tanh's.
template <typename V>
typename V::F vec_gelu_tanh_grad_and_value(typename V::F dy, typename V::F x, typename V::F* y) {
  using F = typename V::F;
  F e;
  const F s = vec_gelu_tanh_sigmoid<V>(x, &e);
  *y = V::mul(x, s);
  const F du = V::mul(V::set1(0.7978845608028654f),
                      V::fmadd(V::set1(3.0f * 0.044715f), V::mul(x, x), V::set1(1.0f)));
  const F two_x_s = V::mul(V::add(x, x), s);
  return V::mul(dy, V::fmadd(V::mul(two_x_s, V::mul(e, s)), du, s));
}
template <typename V>
typename V::F vec_gelu_tanh_grad(typename V::F dy, typename V::F x) {
  typename V::F y;
  return vec_gelu_tanh_grad_and_value<V>(dy, x, &y);
}

}  // namespace math
}  // namespace ortmodule
