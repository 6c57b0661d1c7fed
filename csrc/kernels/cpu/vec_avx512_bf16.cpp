// The bfloat16 GEMM kernels of CPUs with AVX512-BF16 (compiled with -mavx512f -mavx512bw
// -mavx512vl -mavx512bf16 -mavx2 -mfma; called only where the CPU has them): the packed
// bfloat16 GEMM's 14x32 micro-kernel, one vdpbf16ps per 16 sums and two columns of K, and its
// panel packing (vec_kernels.h: bf16_gemm_tile, bf16_pack_pairs). The rest of the table is the
// AVX-512 one.
#include "kernels/cpu/vec_kernels.h"

#if defined(__AVX512BF16__) && defined(__AVX512BW__) && defined(__AVX512F__)
// GCC 12's AVX-512 intrinsics fill unused lanes from undefined vectors, which its own
// uninitialized-value analysis then flags once inlined (as in vec_avx512.cpp).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <algorithm>
#include <cstring>

namespace ortmodule {
namespace {

// The float32 micro-kernel's tile (vec_kernels.inl gemm_mr): 28 accumulators, 2 B registers
// and a broadcast pair.
constexpr int kMr = 14;
constexpr int kNr = 32;

// The first `count` of 16 lanes (count clipped to 0..16).
inline __mmask16 lanes(int64_t count) {
  return static_cast<__mmask16>(count >= 16 ? 0xFFFFu : count <= 0 ? 0u : (1u << count) - 1u);
}

inline __m512bh as_pairs(__m512i v) { return reinterpret_cast<__m512bh&>(v); }

void bf16_gemm_tile(int64_t kp, const uint32_t* a, const uint32_t* b, float* c, int64_t ldc, int m,
                    int n, float alpha, float beta, bool first) {
  __m512 acc[kMr][2];
#pragma GCC unroll 14
  for (int i = 0; i < kMr; ++i) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
  for (int64_t p = 0; p < kp; ++p) {
    const __m512bh b0 = as_pairs(_mm512_loadu_si512(b)), b1 = as_pairs(_mm512_loadu_si512(b + 16));
#pragma GCC unroll 14
    for (int i = 0; i < kMr; ++i) {
      const __m512bh ai = as_pairs(_mm512_set1_epi32(static_cast<int>(a[i])));
      acc[i][0] = _mm512_dpbf16_ps(acc[i][0], ai, b0);
      acc[i][1] = _mm512_dpbf16_ps(acc[i][1], ai, b1);
    }
    a += kMr;
    b += kNr;
  }
  const __m512 va = _mm512_set1_ps(alpha);
  const bool read_c = !first || beta != 0.0f;
  const __m512 keep = _mm512_set1_ps(first ? beta : 1.0f);  // what the old C is multiplied by
  const __mmask16 m0 = lanes(n), m1 = lanes(n - 16);
#pragma GCC unroll 14
  for (int i = 0; i < kMr; ++i) {
    if (i >= m) break;
    float* row = c + i * ldc;
    __m512 x0 = _mm512_mul_ps(acc[i][0], va), x1 = _mm512_mul_ps(acc[i][1], va);
    if (read_c) {
      x0 = _mm512_fmadd_ps(keep, _mm512_maskz_loadu_ps(m0, row), x0);
      x1 = _mm512_fmadd_ps(keep, _mm512_maskz_loadu_ps(m1, row + 16), x1);
    }
    _mm512_mask_storeu_ps(row, m0, x0);
    _mm512_mask_storeu_ps(row + 16, m1, x1);
  }
}

// 16 bfloat16 values (the first `count`) widened to the low halves of 16 words.
inline __m512i words(const uint16_t* p, __mmask16 count) {
  return count ? _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(count, p)) : _mm512_setzero_si512();
}

// Words (pairs of bfloat16 values) of 8 rows x 8 columns, row stride `ld` in bfloat16
// elements (even), transposed: dst[j * dst_ld + i] = word j of row i. Only permutes, so the
// bits are the loads' own.
inline void transpose_8x8_words(const uint16_t* src, int64_t ld, uint32_t* dst, int64_t dst_ld) {
  __m256i r[8], t[8], u[8];
  for (int i = 0; i < 8; ++i)
    r[i] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i * ld));
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_epi32(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_epi32(r[i], r[i + 1]);
  }
  for (int i = 0; i < 8; i += 4) {
    u[i] = _mm256_unpacklo_epi64(t[i], t[i + 2]);
    u[i + 1] = _mm256_unpackhi_epi64(t[i], t[i + 2]);
    u[i + 2] = _mm256_unpacklo_epi64(t[i + 1], t[i + 3]);
    u[i + 3] = _mm256_unpackhi_epi64(t[i + 1], t[i + 3]);
  }
  for (int j = 0; j < 4; ++j) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + j * dst_ld),
                        _mm256_permute2x128_si256(u[j], u[j + 4], 0x20));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + (j + 4) * dst_ld),
                        _mm256_permute2x128_si256(u[j], u[j + 4], 0x31));
  }
}

void bf16_pack_pairs(const uint16_t* x, int64_t ld, bool trans, int64_t r0, int64_t rows,
                     int64_t k0, int64_t kc, int width, uint32_t* dst) {
  const int64_t kp = (kc + 1) / 2;
  if (trans) {
    // op(X)[r, k] = x[k * ld + r]: columns k and k + 1 of op(X) are two contiguous runs,
    // interleaved 16 rows at a time.
    for (int64_t p = 0; p < kp; ++p) {
      const int64_t k = k0 + 2 * p;
      const bool has_hi = 2 * p + 1 < kc;
      uint32_t* out = dst + p * width;
      for (int r = 0; r < width; r += 16) {
        const __mmask16 in = lanes(rows - r);
        const __m512i lo = words(x + k * ld + r0 + r, in);
        const __m512i hi = has_hi ? words(x + (k + 1) * ld + r0 + r, in) : _mm512_setzero_si512();
        _mm512_mask_storeu_epi32(out + r, lanes(width - r),
                                 _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16)));
      }
    }
    return;
  }
  // op(X)[r, k] = x[r * ld + k]: a pair is one word of row r. With an even row stride and at
  // least 8 rows and 8 whole pairs, blocks of 8 x 8 words are transposed in registers, the
  // last block of each direction overlapping the one before it (14 rows: rows 0-7 and 6-13);
  // otherwise, and for a last odd column of K (paired with zero), words are read one by one.
  const int64_t whole = kc / 2;
  const bool blocks = ld % 2 == 0 && rows >= 8 && whole >= 8;
  if (blocks) {
    for (int64_t p = 0; p < whole; p += 8) {
      const int64_t pp = std::min<int64_t>(p, whole - 8);
      for (int64_t r = 0; r < rows; r += 8) {
        const int64_t rr = std::min<int64_t>(r, rows - 8);
        transpose_8x8_words(x + (r0 + rr) * ld + k0 + 2 * pp, ld, dst + pp * width + rr, width);
      }
    }
  }
  for (int64_t p = 0; p < kp; ++p) {
    uint32_t* out = dst + p * width;
    if (!blocks || p >= whole) {
      for (int64_t r = 0; r < rows; ++r) {
        const uint16_t* e = x + (r0 + r) * ld + k0 + 2 * p;
        out[r] = e[0] | (2 * p + 1 < kc ? static_cast<uint32_t>(e[1]) << 16 : 0u);
      }
    }
    for (int64_t r = rows; r < width; ++r) out[r] = 0;
  }
}

}  // namespace

const VecKernels* vec_kernels_avx512_bf16() {
  static const VecKernels* kernels = []() -> const VecKernels* {
    const VecKernels* base = vec_kernels_avx512();
    if (!base || base->gemm_mr != kMr || base->gemm_nr != kNr) return nullptr;
    static VecKernels k = *base;
    k.bf16_gemm_tile = bf16_gemm_tile;
    k.bf16_pack_pairs = bf16_pack_pairs;
    return &k;
  }();
  return kernels;
}

}  // namespace ortmodule
#else
namespace ortmodule {
const VecKernels* vec_kernels_avx512_bf16() { return nullptr; }
}  // namespace ortmodule
#endif
