// Thin wrappers over AVX2 and AVX-512 float registers, so the vector kernels
// (vec_kernels.inl) and the vector math (kernels/math/vec_math.h) are written once
// over a type V. Only files compiled with the matching target flags see a wrapper
// (vec_avx2.cpp: -mavx2 -mfma; vec_avx512.cpp: -mavx512f); cpu_isa.cpp calls them only
// where the CPU supports them. Include nothing here that is shared with baseline code:
// an inline function compiled with wider instructions could otherwise be picked by the
// linker for a baseline caller.
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace ortmodule {
namespace simd {

// Each wrapper exists only in the file compiled for it: the AVX-512 file (which also has
// __AVX2__) must not hold a copy of VecAvx2's inline functions in wider encodings.
#if defined(__AVX2__) && defined(__FMA__) && !defined(__AVX512F__)
struct VecAvx2 {
  using F = __m256;
  using I = __m256i;
  using Mask = __m256;
  // Four doubles per register: two accumulate one float register.
  struct DoubleAcc {
    __m256d lo, hi;
  };
  static constexpr int kWidth = 8;

  static F load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, F v) { _mm256_storeu_ps(p, v); }
  static F set1(float v) { return _mm256_set1_ps(v); }
  static F zero() { return _mm256_setzero_ps(); }
  static F add(F a, F b) { return _mm256_add_ps(a, b); }
  static F sub(F a, F b) { return _mm256_sub_ps(a, b); }
  static F mul(F a, F b) { return _mm256_mul_ps(a, b); }
  static F div(F a, F b) { return _mm256_div_ps(a, b); }
  // a * b + c and c - a * b, one rounding.
  static F fmadd(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }
  static F fnmadd(F a, F b, F c) { return _mm256_fnmadd_ps(a, b, c); }
  // max(a, b) / min(a, b) return b when either is NaN (x86 semantics).
  static F max(F a, F b) { return _mm256_max_ps(a, b); }
  static F min(F a, F b) { return _mm256_min_ps(a, b); }
  static F abs(F a) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), a); }
  // Lanes whose byte at p (one per lane) is non-zero.
  static Mask bytes_nonzero(const uint8_t* p) {
    const __m256i v = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_cmpgt_epi32(v, _mm256_setzero_si256()));
  }
  static Mask lt(F a, F b) { return _mm256_cmp_ps(a, b, _CMP_LT_OQ); }
  static Mask gt(F a, F b) { return _mm256_cmp_ps(a, b, _CMP_GT_OQ); }
  // m ? a : b per lane.
  static F select(Mask m, F a, F b) { return _mm256_blendv_ps(b, a, m); }
  static I round_to_int(F a) { return _mm256_cvtps_epi32(a); }
  static F to_float(I a) { return _mm256_cvtepi32_ps(a); }
  static I add_int(I a, I b) { return _mm256_add_epi32(a, b); }
  static I sub_int(I a, I b) { return _mm256_sub_epi32(a, b); }
  static I half_int(I a) { return _mm256_srai_epi32(a, 1); }
  // 2^n for n in [-126, 127].
  static F pow2(I n) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n, _mm256_set1_epi32(127)), 23));
  }
  static float reduce_add(F a) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  static float reduce_max(F a) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  static DoubleAcc dacc_zero() { return {_mm256_setzero_pd(), _mm256_setzero_pd()}; }
  static void dacc_add(DoubleAcc& acc, F v) {
    acc.lo = _mm256_add_pd(acc.lo, _mm256_cvtps_pd(_mm256_castps256_ps128(v)));
    acc.hi = _mm256_add_pd(acc.hi, _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)));
  }
  // v's lanes as doubles (exact), d's lanes stored back.
  static DoubleAcc widen(F v) {
    return {_mm256_cvtps_pd(_mm256_castps256_ps128(v)),
            _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1))};
  }
  static DoubleAcc dload(const double* p) { return {_mm256_loadu_pd(p), _mm256_loadu_pd(p + 4)}; }
  static void dstore(double* p, const DoubleAcc& d) {
    _mm256_storeu_pd(p, d.lo);
    _mm256_storeu_pd(p + 4, d.hi);
  }
  // Lane-wise a + b, a - s, a * b, a * s: one rounding each (no fused multiply-add).
  static DoubleAcc dadd(const DoubleAcc& a, const DoubleAcc& b) {
    return {_mm256_add_pd(a.lo, b.lo), _mm256_add_pd(a.hi, b.hi)};
  }
  static DoubleAcc dsub(const DoubleAcc& a, double s) {
    const __m256d v = _mm256_set1_pd(s);
    return {_mm256_sub_pd(a.lo, v), _mm256_sub_pd(a.hi, v)};
  }
  static DoubleAcc dmul(const DoubleAcc& a, const DoubleAcc& b) {
    return {_mm256_mul_pd(a.lo, b.lo), _mm256_mul_pd(a.hi, b.hi)};
  }
  static DoubleAcc dmul(const DoubleAcc& a, double s) {
    const __m256d v = _mm256_set1_pd(s);
    return {_mm256_mul_pd(a.lo, v), _mm256_mul_pd(a.hi, v)};
  }
  static double dacc_sum(const DoubleAcc& acc) {
    const __m256d s = _mm256_add_pd(acc.lo, acc.hi);
    __m128d t = _mm_add_pd(_mm256_castpd256_pd128(s), _mm256_extractf128_pd(s, 1));
    t = _mm_add_sd(t, _mm_unpackhi_pd(t, t));
    return _mm_cvtsd_f64(t);
  }
};
#endif

#if defined(__AVX512F__)
struct VecAvx512 {
  using F = __m512;
  using I = __m512i;
  using Mask = __mmask16;
  struct DoubleAcc {
    __m512d lo, hi;
  };
  static constexpr int kWidth = 16;

  static F load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, F v) { _mm512_storeu_ps(p, v); }
  static F set1(float v) { return _mm512_set1_ps(v); }
  static F zero() { return _mm512_setzero_ps(); }
  static F add(F a, F b) { return _mm512_add_ps(a, b); }
  static F sub(F a, F b) { return _mm512_sub_ps(a, b); }
  static F mul(F a, F b) { return _mm512_mul_ps(a, b); }
  static F div(F a, F b) { return _mm512_div_ps(a, b); }
  static F fmadd(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
  static F fnmadd(F a, F b, F c) { return _mm512_fnmadd_ps(a, b, c); }
  static F max(F a, F b) { return _mm512_max_ps(a, b); }
  static F min(F a, F b) { return _mm512_min_ps(a, b); }
  static F abs(F a) { return _mm512_abs_ps(a); }
  static Mask bytes_nonzero(const uint8_t* p) {
    const __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm512_test_epi32_mask(v, v);
  }
  static Mask lt(F a, F b) { return _mm512_cmp_ps_mask(a, b, _CMP_LT_OQ); }
  static Mask gt(F a, F b) { return _mm512_cmp_ps_mask(a, b, _CMP_GT_OQ); }
  static F select(Mask m, F a, F b) { return _mm512_mask_blend_ps(m, b, a); }
  static I round_to_int(F a) { return _mm512_cvtps_epi32(a); }
  static F to_float(I a) { return _mm512_cvtepi32_ps(a); }
  static I add_int(I a, I b) { return _mm512_add_epi32(a, b); }
  static I sub_int(I a, I b) { return _mm512_sub_epi32(a, b); }
  static I half_int(I a) { return _mm512_srai_epi32(a, 1); }
  static F pow2(I n) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(n, _mm512_set1_epi32(127)), 23));
  }
  static float reduce_add(F a) { return _mm512_reduce_add_ps(a); }
  static float reduce_max(F a) { return _mm512_reduce_max_ps(a); }
  static DoubleAcc dacc_zero() { return {_mm512_setzero_pd(), _mm512_setzero_pd()}; }
  static void dacc_add(DoubleAcc& acc, F v) {
    const __m256 lo = _mm512_castps512_ps256(v);
    const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
    acc.lo = _mm512_add_pd(acc.lo, _mm512_cvtps_pd(lo));
    acc.hi = _mm512_add_pd(acc.hi, _mm512_cvtps_pd(hi));
  }
  static double dacc_sum(const DoubleAcc& acc) {
    return _mm512_reduce_add_pd(_mm512_add_pd(acc.lo, acc.hi));
  }
  static DoubleAcc widen(F v) {
    const __m256 lo = _mm512_castps512_ps256(v);
    const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
    return {_mm512_cvtps_pd(lo), _mm512_cvtps_pd(hi)};
  }
  static DoubleAcc dload(const double* p) { return {_mm512_loadu_pd(p), _mm512_loadu_pd(p + 8)}; }
  static void dstore(double* p, const DoubleAcc& d) {
    _mm512_storeu_pd(p, d.lo);
    _mm512_storeu_pd(p + 8, d.hi);
  }
  static DoubleAcc dadd(const DoubleAcc& a, const DoubleAcc& b) {
    return {_mm512_add_pd(a.lo, b.lo), _mm512_add_pd(a.hi, b.hi)};
  }
  static DoubleAcc dsub(const DoubleAcc& a, double s) {
    const __m512d v = _mm512_set1_pd(s);
    return {_mm512_sub_pd(a.lo, v), _mm512_sub_pd(a.hi, v)};
  }
  static DoubleAcc dmul(const DoubleAcc& a, const DoubleAcc& b) {
    return {_mm512_mul_pd(a.lo, b.lo), _mm512_mul_pd(a.hi, b.hi)};
  }
  static DoubleAcc dmul(const DoubleAcc& a, double s) {
    const __m512d v = _mm512_set1_pd(s);
    return {_mm512_mul_pd(a.lo, v), _mm512_mul_pd(a.hi, v)};
  }
};
#endif

}  // namespace simd
}  // namespace ortmodule
