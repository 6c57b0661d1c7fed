// The AVX2 entries of VecKernels that the AVX-512 table vectorises with masked loads and
// permutes (vec_kernels.inl): the stride-2 max pool row, im2col's stride-2 rows and the
// float32 <-> bfloat16 runs. Included by vec_kernels.inl inside its anonymous namespace when
// compiling for AVX2 without AVX-512. Loads never reach past what the scalar loops read (the
// last group's are masked); results are the baseline's bits.

// The even and odd elements of 16 consecutive floats (lo: [0, 8), hi: [8, 16)), in order.
inline __m256 even_of(__m256 lo, __m256 hi) {
  const __m256 e = _mm256_shuffle_ps(lo, hi, _MM_SHUFFLE(2, 0, 2, 0));
  return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(e), _MM_SHUFFLE(3, 1, 2, 0)));
}
inline __m256 odd_of(__m256 lo, __m256 hi) {
  const __m256 o = _mm256_shuffle_ps(lo, hi, _MM_SHUFFLE(3, 1, 3, 1));
  return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(o), _MM_SHUFFLE(3, 1, 2, 0)));
}

// The first `count` of 8 lanes (count clipped to 0..8) as a maskload/maskstore mask; masked
// lanes are neither read nor written (no fault past the end of a row).
inline __m256i lanes(int64_t count) {
  const int c = static_cast<int>(std::min<int64_t>(8, std::max<int64_t>(0, count)));
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(c), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
// The same for 4 int64 lanes.
inline __m256i lanes64(int64_t count) {
  const int64_t c = std::min<int64_t>(4, std::max<int64_t>(0, count));
  return _mm256_cmpgt_epi64(_mm256_set1_epi64x(c), _mm256_setr_epi64x(0, 1, 2, 3));
}

// `count` floats from p (count >= 16: two plain loads; else masked ones).
inline void load16(const float* p, int64_t count, __m256* lo, __m256* hi) {
  if (count >= 16) {
    *lo = _mm256_loadu_ps(p);
    *hi = _mm256_loadu_ps(p + 8);
  } else {
    *lo = _mm256_maskload_ps(p, lanes(count));
    *hi = _mm256_maskload_ps(p + 8, lanes(count - 8));
  }
}

// maxpool_s2_row's contract (vec_kernels.h): 8 outputs at a time, each row's 16 inputs split
// into even and odd columns (a 3-wide window's third column is the even split of the row two
// columns on); loads and stores past the last window's columns are masked.
template <int k>
void maxpool_s2_row_k(const float* r, int64_t W, int64_t n, int64_t first_at, float* y,
                      int64_t* idx) {
  const __m256i steps = _mm256_setr_epi64x(0, 2, 4, 6);
  for (int64_t ow = 0; ow < n; ow += 8) {
    const int64_t left = std::min<int64_t>(8, n - ow);
    __m256 taps[9] = {};
    int32_t tap_off[9] = {};
    int t = 0;
    for (int row = 0; row < k; ++row) {
      const float* src = r + row * W + 2 * ow;
      const int64_t in = 2 * left;  // columns 2 ow .. 2 ow + 2 left - 1 of this group
      __m256 lo, hi;
      load16(src, in, &lo, &hi);
      taps[t] = even_of(lo, hi);
      tap_off[t++] = static_cast<int32_t>(row * W);
      taps[t] = odd_of(lo, hi);
      tap_off[t++] = static_cast<int32_t>(row * W + 1);
      if constexpr (k == 3) {  // columns 2 ow + 2 + 2 j: the last window ends at column 2 left
        load16(src + 2, left == 8 && ow + 8 < n ? 16 : in - 1, &lo, &hi);
        taps[t] = even_of(lo, hi);
        tap_off[t++] = static_cast<int32_t>(row * W + 2);
      }
    }
    __m256 best = taps[0];
    __m256 off = _mm256_setzero_ps();  // int32 offsets carried in float lanes (blends only)
    for (int i = 1; i < t; ++i) {
      const __m256 replaces = _mm256_or_ps(_mm256_cmp_ps(taps[i], best, _CMP_GT_OQ),
                                           _mm256_cmp_ps(taps[i], taps[i], _CMP_UNORD_Q));
      best = _mm256_blendv_ps(best, taps[i], replaces);
      off = _mm256_blendv_ps(off, _mm256_castsi256_ps(_mm256_set1_epi32(tap_off[i])), replaces);
    }
    if (left == 8) {
      _mm256_storeu_ps(y + ow, best);
    } else {
      _mm256_maskstore_ps(y + ow, lanes(left), best);
    }
    if (idx == nullptr) continue;
    const __m256i off32 = _mm256_castps_si256(off);
    for (int half = 0; half < 2; ++half) {
      const __m128i off4 =
          half == 0 ? _mm256_castsi256_si128(off32) : _mm256_extracti128_si256(off32, 1);
      const __m256i at = _mm256_add_epi64(
          _mm256_add_epi64(_mm256_set1_epi64x(first_at + 2 * (ow + 4 * half)), steps),
          _mm256_cvtepi32_epi64(off4));
      long long* dst = reinterpret_cast<long long*>(idx + ow + 4 * half);
      if (left == 8) {
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), at);
      } else {
        _mm256_maskstore_epi64(dst, lanes64(left - 4 * half), at);
      }
    }
  }
}

void maxpool_s2_row(const float* r, int64_t W, int k, int64_t n, int64_t first_at, float* y,
                    int64_t* idx) {
  // The window size at compile time: the taps unroll into registers.
  if (k == 2) {
    maxpool_s2_row_k<2>(r, W, n, first_at, y, idx);
  } else {
    maxpool_s2_row_k<3>(r, W, n, first_at, y, idx);
  }
}

// y[i] = x[2 i] for i < n: 8 outputs per two loads and a shuffle, the last group masked (it
// reads up to x[2 (n - 1)]).
void copy_stride2(const float* x, int64_t n, float* y) {
  for (int64_t i = 0; i < n; i += 8) {
    const int64_t left = std::min<int64_t>(8, n - i);
    __m256 lo, hi;
    load16(x + 2 * i, 2 * left - 1 + (left == 8 && i + 8 < n ? 1 : 0), &lo, &hi);
    const __m256 e = even_of(lo, hi);
    if (left == 8) {
      _mm256_storeu_ps(y + i, e);
    } else {
      _mm256_maskstore_ps(y + i, lanes(left), e);
    }
  }
}

// float32 -> bfloat16 bits, math::float_to_bf16's integer steps on 8 lanes.
void float_to_bf16(int64_t n, const float* x, uint16_t* y) {
  const __m256i magnitude = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000);
  const __m256i half = _mm256_set1_epi32(0x7fff), one = _mm256_set1_epi32(1);
  const __m256i quiet = _mm256_set1_epi32(0x0040);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i));
    const __m256i high = _mm256_srli_epi32(b, 16);
    // |b| as a signed integer is non-negative, so the signed compare orders it as unsigned.
    const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(b, magnitude), inf);
    const __m256i up = _mm256_add_epi32(half, _mm256_and_si256(high, one));
    const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(b, up), 16);
    const __m256i r = _mm256_blendv_epi8(rounded, _mm256_or_si256(high, quiet), nan);
    // Each lane holds 0..0xFFFF: packing with unsigned saturation keeps it; the permute puts
    // the two 128-bit halves' packed words next to each other.
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i), _mm256_castsi256_si128(packed));
  }
  for (; i < n; ++i) y[i] = math::float_to_bf16(x[i]);
}

// bfloat16 bits -> float32 (exact: the bits are the upper half of the float).
void bf16_to_float(int64_t n, const uint16_t* x, float* y) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + i),
                        _mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
  for (; i < n; ++i) {
    const uint32_t bits = static_cast<uint32_t>(x[i]) << 16;
    std::memcpy(y + i, &bits, sizeof(bits));
  }
}
