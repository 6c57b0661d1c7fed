// float32 <-> bfloat16 conversion of whole runs (VecKernels::float_to_bf16 / bf16_to_float,
// AVX-512 only; included by vec_kernels.inl inside its anonymous namespace and its AVX-512
// section, after lanes(); std::memcpy comes from its <cstring>).
// float32 -> bfloat16 bits, rounded to nearest even, NaN kept a quiet NaN: math::float_to_bf16
// on 16 lanes (the same integer steps), the last group masked.
void float_to_bf16(int64_t n, const float* x, uint16_t* y) {
  const __m512i magnitude = _mm512_set1_epi32(0x7fffffff), inf = _mm512_set1_epi32(0x7f800000);
  const __m512i half = _mm512_set1_epi32(0x7fff), one = _mm512_set1_epi32(1);
  const __m512i quiet = _mm512_set1_epi32(0x0040);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = lanes(n - i);
    const __m512i b = _mm512_maskz_loadu_epi32(m, x + i);
    const __m512i high = _mm512_srli_epi32(b, 16);
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(b, magnitude), inf);
    const __m512i up = _mm512_add_epi32(half, _mm512_and_si512(high, one));
    const __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(b, up), 16);
    const __m512i r = _mm512_mask_blend_epi32(nan, rounded, _mm512_or_si512(high, quiet));
    _mm512_mask_cvtepi32_storeu_epi16(y + i, m, r);
  }
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
