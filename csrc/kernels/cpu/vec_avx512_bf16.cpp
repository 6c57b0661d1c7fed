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
  // op(X)[r, k] = x[r * ld + k]: a pair is one (2-byte aligned) word of row r, gathered for
  // 16 rows at a time; a last, odd column of K pairs with zero.
  const int64_t whole = kc / 2;
  const bool gather = ld <= (int64_t{1} << 24);  // 32-bit byte offsets for 16 rows
  alignas(64) int32_t offsets[16];
  for (int i = 0; i < 16; ++i) offsets[i] = gather ? static_cast<int32_t>(i * ld) : 0;
  const __m512i index = _mm512_load_si512(offsets);
  for (int r = 0; r < width; r += 16) {
    const __mmask16 in = lanes(rows - r), out_lanes = lanes(width - r);
    const uint16_t* base = x + (r0 + r) * ld + k0;
    for (int64_t p = 0; p < kp; ++p) {
      __m512i v = _mm512_setzero_si512();
      if (p < whole && gather) {
        if (in) v = _mm512_mask_i32gather_epi32(v, in, index, base + 2 * p, 2);
      } else {
        alignas(64) uint32_t w[16] = {};
        for (int64_t i = 0; i < 16 && i < rows - r; ++i) {
          const uint16_t* e = base + i * ld + 2 * p;
          w[i] = e[0] | (2 * p + 1 < kc ? static_cast<uint32_t>(e[1]) << 16 : 0u);
        }
        v = _mm512_load_si512(w);
      }
      _mm512_mask_storeu_epi32(dst + p * width + r, out_lanes, v);
    }
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
