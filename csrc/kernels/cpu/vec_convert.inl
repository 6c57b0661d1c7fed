// float32 <-> bfloat16 conversion of whole runs (VecKernels::float_to_bf16 / bf16_to_float) and
// the bfloat16 product epilogue (bias_round_gelu_bf16), AVX-512 only; included by
// vec_kernels.inl inside its anonymous namespace and its AVX-512 section, after lanes();
// std::memcpy comes from its <cstring>.
// float32 -> bfloat16 bits, rounded to nearest even, NaN kept a quiet NaN: math::float_to_bf16
// on 16 lanes (the same integer steps), each lane's bits in its low 16.
inline __m512i round_lanes_bf16(__m512i b) {
  const __m512i magnitude = _mm512_set1_epi32(0x7fffffff), inf = _mm512_set1_epi32(0x7f800000);
  const __m512i half = _mm512_set1_epi32(0x7fff), one = _mm512_set1_epi32(1);
  const __m512i quiet = _mm512_set1_epi32(0x0040);
  const __m512i high = _mm512_srli_epi32(b, 16);
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(b, magnitude), inf);
  const __m512i up = _mm512_add_epi32(half, _mm512_and_si512(high, one));
  const __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(b, up), 16);
  return _mm512_mask_blend_epi32(nan, rounded, _mm512_or_si512(high, quiet));
}

// round_lanes_bf16 over n elements, the last group masked.
void float_to_bf16(int64_t n, const float* x, uint16_t* y) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = lanes(n - i);
    _mm512_mask_cvtepi32_storeu_epi16(y + i, m,
                                      round_lanes_bf16(_mm512_maskz_loadu_epi32(m, x + i)));
  }
}

// round_bf16_float (vec_kernels.h): full groups unmasked, the last one masked.
void round_bf16_float(int64_t n, const float* x, float* y) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i r = round_lanes_bf16(_mm512_loadu_si512(x + i));
    _mm512_storeu_si512(y + i, _mm512_slli_epi32(r, 16));
  }
  if (i < n) {
    const __mmask16 m = lanes(n - i);
    const __m512i r = round_lanes_bf16(_mm512_maskz_loadu_epi32(m, x + i));
    _mm512_mask_storeu_epi32(y + i, m, _mm512_slli_epi32(r, 16));
  }
}

// bias_round_gelu_bf16 (vec_kernels.h) on one group of 16 lanes (m: the lanes read and
// written; unused lanes compute on zeros).
template <bool kFull>
inline void bias_round_gelu_16(const float* x, const float* bias, VecGelu gelu, uint16_t* pre,
                               uint16_t* y, __mmask16 m) {
  using V = simd::VecAvx512;
  __m512 v = kFull ? _mm512_loadu_ps(x) : _mm512_maskz_loadu_ps(m, x);
  if (bias) v = _mm512_add_ps(v, kFull ? _mm512_loadu_ps(bias) : _mm512_maskz_loadu_ps(m, bias));
  const __m512i p = round_lanes_bf16(_mm512_castps_si512(v));
  __m512i out = p;
  if (gelu != VecGelu::kNone) {
    const __m512 w = _mm512_castsi512_ps(_mm512_slli_epi32(p, 16));  // exact
    const __m512 g = gelu == VecGelu::kTanh ? math::vec_gelu_tanh<V>(w) : math::vec_gelu<V>(w);
    out = round_lanes_bf16(_mm512_castps_si512(g));
  }
  if (kFull) {
    if (pre) _mm256_storeu_si256(reinterpret_cast<__m256i*>(pre), _mm512_cvtepi32_epi16(p));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y), _mm512_cvtepi32_epi16(out));
  } else {
    if (pre) _mm512_mask_cvtepi32_storeu_epi16(pre, m, p);
    _mm512_mask_cvtepi32_storeu_epi16(y, m, out);
  }
}

// bias_round_gelu_bf16 (vec_kernels.h): 16 lanes at a time, the last group masked.
void bias_round_gelu_bf16(int64_t n, const float* x, const float* bias, VecGelu gelu, uint16_t* pre,
                          uint16_t* y) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    bias_round_gelu_16<true>(x + i, bias ? bias + i : nullptr, gelu, pre ? pre + i : nullptr, y + i,
                             0xFFFF);
  if (i < n)
    bias_round_gelu_16<false>(x + i, bias ? bias + i : nullptr, gelu, pre ? pre + i : nullptr,
                              y + i, lanes(n - i));
}

// bfloat16 bits -> float32 (exact: the bits are the upper half of the float).
void bf16_to_float(int64_t n, const uint16_t* x, float* y) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i));
    _mm512_storeu_si512(y + i, _mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
  for (; i < n; ++i) {  // (a masked 16-bit load needs AVX512-BW)
    const uint32_t bits = static_cast<uint32_t>(x[i]) << 16;
    std::memcpy(y + i, &bits, sizeof(bits));
  }
}
