// The bfloat16 GEMM on AMX tiles (compiled with the AVX512-BF16 flags plus -mamx-tile
// -mamx-bf16; called only where the CPU has AMX and the OS let this process use its tile
// data, cpu_isa.cpp): a 32 x 32 tile of C in four 16 x 16 float32 tiles, each step one
// tdpbf16ps per C tile over 32 columns of K, and the panel packing the tiles load, or A's
// rows read in place (vec_kernels.h: amx_bf16_*). The rest of the table is the avx512bf16 one.
#include "kernels/cpu/vec_kernels.h"

// GCC names the AMX macros __AMX_TILE__ / __AMX_BF16__, clang __AMXTILE__ / __AMXBF16__.
#if (defined(__AMX_TILE__) || defined(__AMXTILE__)) && \
    (defined(__AMX_BF16__) || defined(__AMXBF16__))
#define ORTM_HAVE_AMX_BF16 1
#endif
#if defined(ORTM_HAVE_AMX_BF16) && defined(__AVX512BF16__) && defined(__AVX512BW__) && \
    defined(__AVX512F__)
// GCC 12's AVX-512 intrinsics fill unused lanes from undefined vectors, which its own
// uninitialized-value analysis then flags once inlined (as in vec_avx512.cpp).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <atomic>
#include <cstdint>

namespace ortmodule {
namespace {

constexpr int kTile = 32;   // rows and columns of C per micro-kernel call
constexpr int kStepK = 32;  // columns of K per step (16 pairs: one tile row of 64 bytes)
constexpr int kRun = 16;    // words per run (a tile row)
// The packing prefetches what it reads this many steps later: the operands are often cold
// (written by the ops before), and the rows of a panel are too many streams for the hardware
// prefetch (a Xeon VM's TN 256x1024x256 ran at 766 GFLOP/s from cold memory, 1348 warm).
constexpr int64_t kPrefetchSteps = 2;

// Palette 1, tiles 0-7 all 16 rows of 64 bytes: C in 0-3, A in 4-5, B in 6-7.
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {64, 64, 64, 64, 64, 64, 64, 64};
  uint8_t rows[16] = {16, 16, 16, 16, 16, 16, 16, 16};
};
static_assert(sizeof(TileConfig) == 64, "the tile configuration is 64 bytes");

std::atomic<unsigned> g_epoch{1};

void amx_bf16_begin() { g_epoch.fetch_add(1, std::memory_order_relaxed); }

inline void ensure_configured() {
  static const TileConfig config;
  thread_local unsigned seen = 0;
  const unsigned now = g_epoch.load(std::memory_order_relaxed);
  if (seen != now) {
    _tile_loadconfig(&config);
    seen = now;
  }
}

inline __mmask16 lanes16(int64_t count) {
  return static_cast<__mmask16>(count >= 16 ? 0xFFFFu : count <= 0 ? 0u : (1u << count) - 1u);
}
inline __mmask32 lanes32(int64_t count) {
  return count >= 32 ? 0xFFFFFFFFu : count <= 0 ? 0u : (1u << count) - 1u;
}

// 16 x 16 words transposed in registers: r[i] word j -> r[j] word i.
inline void transpose_16x16(__m512i r[16]) {
  __m512i t[16], u[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {
    u[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
    u[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
    u[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
    u[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
  }
  // u[4 i + j], 128-bit lane L: word j + 4 L of rows 4 i .. 4 i + 3.
  for (int j = 0; j < 4; ++j) {
    const __m512i v0 = _mm512_shuffle_i32x4(u[j], u[4 + j], 0x88);
    const __m512i v1 = _mm512_shuffle_i32x4(u[j], u[4 + j], 0xDD);
    const __m512i w0 = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0x88);
    const __m512i w1 = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0xDD);
    r[j] = _mm512_shuffle_i32x4(v0, w0, 0x88);
    r[j + 8] = _mm512_shuffle_i32x4(v0, w0, 0xDD);
    r[j + 4] = _mm512_shuffle_i32x4(v1, w1, 0x88);
    r[j + 12] = _mm512_shuffle_i32x4(v1, w1, 0xDD);
  }
}

// 16 rows (r0 + g .. r0 + g + 15 of op(X), those below `rows` read) x 16 pairs of step s:
// out[i] word p = pair p of row g + i when by_row, else out[p] word i = the same pair.
// Zero past kc and past `rows`.
inline void load_block(const uint16_t* x, int64_t ld, bool trans, int64_t r0, int64_t rows,
                       int64_t g, int64_t k0, int64_t kc, int64_t s, bool by_row, __m512i out[16]) {
  const int64_t kb = s * kStepK;  // first column of K of the step, from k0
  if (!trans) {
    // op(X)[r, k] = x[r * ld + k]: a row's 16 pairs are 32 contiguous values.
    const __mmask32 kmask = lanes32(kc - kb);
    for (int i = 0; i < 16; ++i) {
      const uint16_t* row = x + (r0 + g + i) * ld + k0 + kb;
      __builtin_prefetch(row + kPrefetchSteps * kStepK);
      out[i] = g + i < rows ? _mm512_maskz_loadu_epi16(kmask, row) : _mm512_setzero_si512();
    }
    if (!by_row) transpose_16x16(out);
    return;
  }
  // op(X)[r, k] = x[k * ld + r]: columns k and k + 1 of op(X) are two contiguous runs of rows,
  // interleaved into pairs.
  const __mmask16 rmask = lanes16(rows - g);
  for (int p = 0; p < 16; ++p) {
    const int64_t k = kb + 2 * p;
    __builtin_prefetch(x + (k0 + k + kPrefetchSteps * kStepK) * ld + r0 + g);
    __builtin_prefetch(x + (k0 + k + 1 + kPrefetchSteps * kStepK) * ld + r0 + g);
    __m512i lo = _mm512_setzero_si512(), hi = _mm512_setzero_si512();
    if (k < kc)
      lo = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(rmask, x + (k0 + k) * ld + r0 + g));
    if (k + 1 < kc)
      hi = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(rmask, x + (k0 + k + 1) * ld + r0 + g));
    out[p] = _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16));
  }
  if (by_row) transpose_16x16(out);
}

// A panel (by_row: A's runs, a row's pairs) or a B panel (a pair's columns), per step and 16
// rows at a time; groups past `rows` zero.
void pack_runs(const uint16_t* x, int64_t ld, bool trans, int64_t r0, int64_t rows, int64_t k0,
               int64_t kc, bool by_row, uint32_t* dst) {
  const int64_t steps = (kc + kStepK - 1) / kStepK;
  __m512i block[16];
  for (int64_t s = 0; s < steps; ++s) {
    uint32_t* step = dst + s * kTile * kRun;
    for (int64_t g = 0; g < kTile; g += 16) {
      if (g < rows)
        load_block(x, ld, trans, r0, rows, g, k0, kc, s, by_row, block);
      else
        for (__m512i& v : block) v = _mm512_setzero_si512();
      for (int i = 0; i < 16; ++i) _mm512_store_si512(step + (g + i) * kRun, block[i]);
    }
  }
}

void amx_bf16_pack_a(const uint16_t* x, int64_t ld, bool trans, int64_t r0, int64_t rows,
                     int64_t k0, int64_t kc, uint32_t* dst) {
  pack_runs(x, ld, trans, r0, rows, k0, kc, true, dst);
}

void amx_bf16_pack_b(const uint16_t* x, int64_t ld, bool trans, int64_t r0, int64_t rows,
                     int64_t k0, int64_t kc, uint32_t* dst) {
  pack_runs(x, ld, trans, r0, rows, k0, kc, false, dst);
}

// One 32 x 32 tile of C over `steps` steps of K: load_a(s) loads step s of A into tiles 4
// (rows 0-15) and 5 (rows 16-31); B's steps come from its packed panel.
template <typename LoadA>
inline void tile_over(int64_t steps, LoadA load_a, const uint32_t* b, float* c, int64_t ldc, int m,
                      int n, float alpha, float beta, bool first) {
  ensure_configured();
  // In place when the tile is whole and C's old value is added as is or not read.
  const bool whole = m == kTile && n == kTile && alpha == 1.0f;
  const bool add_c = !first || beta == 1.0f;
  const bool in_place = whole && (add_c || beta == 0.0f);
  const int64_t c_stride = ldc * static_cast<int64_t>(sizeof(float));
  if (in_place && add_c) {
    _tile_loadd(0, c, c_stride);
    _tile_loadd(1, c + 16, c_stride);
    _tile_loadd(2, c + 16 * ldc, c_stride);
    _tile_loadd(3, c + 16 * ldc + 16, c_stride);
  } else {
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
  }
  constexpr int64_t kBytes = kRun * sizeof(uint32_t);
  for (int64_t s = 0; s < steps; ++s) {
    const uint32_t* bs = b + s * kTile * kRun;
    load_a(s);
    _tile_loadd(6, bs, kBytes);
    _tile_loadd(7, bs + 16 * kRun, kBytes);
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  if (in_place) {
    _tile_stored(0, c, c_stride);
    _tile_stored(1, c + 16, c_stride);
    _tile_stored(2, c + 16 * ldc, c_stride);
    _tile_stored(3, c + 16 * ldc + 16, c_stride);
    return;
  }
  alignas(64) float sums[kTile * kTile];
  constexpr int64_t kSumStride = kTile * sizeof(float);
  _tile_stored(0, sums, kSumStride);
  _tile_stored(1, sums + 16, kSumStride);
  _tile_stored(2, sums + 16 * kTile, kSumStride);
  _tile_stored(3, sums + 16 * kTile + 16, kSumStride);
  const __m512 va = _mm512_set1_ps(alpha);
  const bool read_c = !first || beta != 0.0f;
  const __m512 keep = _mm512_set1_ps(first ? beta : 1.0f);  // what the old C is multiplied by
  const __mmask16 m0 = lanes16(n), m1 = lanes16(n - 16);
  for (int i = 0; i < m; ++i) {
    float* row = c + i * ldc;
    __m512 x0 = _mm512_mul_ps(_mm512_load_ps(sums + i * kTile), va);
    __m512 x1 = _mm512_mul_ps(_mm512_load_ps(sums + i * kTile + 16), va);
    if (read_c) {
      x0 = _mm512_fmadd_ps(keep, _mm512_maskz_loadu_ps(m0, row), x0);
      x1 = _mm512_fmadd_ps(keep, _mm512_maskz_loadu_ps(m1, row + 16), x1);
    }
    _mm512_mask_storeu_ps(row, m0, x0);
    _mm512_mask_storeu_ps(row + 16, m1, x1);
  }
}

void amx_bf16_tile(int64_t steps, const uint32_t* a, const uint32_t* b, float* c, int64_t ldc,
                   int m, int n, float alpha, float beta, bool first) {
  constexpr int64_t kBytes = kRun * sizeof(uint32_t);
  const auto load_a = [a](int64_t s) {
    const uint32_t* as = a + s * kTile * kRun;
    _tile_loadd(4, as, kBytes);
    _tile_loadd(5, as + 16 * kRun, kBytes);
  };
  tile_over(steps, load_a, b, c, ldc, m, n, alpha, beta, first);
}

void amx_bf16_tile_a(int64_t kc, const uint16_t* a, int64_t lda, const uint32_t* b, float* c,
                     int64_t ldc, int n, float alpha, float beta, bool first) {
  // Whole steps straight from A's rows (a tile row is 32 values of K, as A stores them);
  // the last, partial step from a zero-padded copy, so nothing past kc is read.
  const int64_t whole = kc / kStepK, tail = kc % kStepK;
  const int64_t stride = lda * static_cast<int64_t>(sizeof(uint16_t));
  alignas(64) uint16_t last[kTile * kStepK];
  if (tail) {
    const __mmask32 mask = lanes32(tail);
    for (int r = 0; r < kTile; ++r)
      _mm512_store_si512(last + r * kStepK,
                         _mm512_maskz_loadu_epi16(mask, a + r * lda + whole * kStepK));
  }
  const auto load_a = [&](int64_t s) {
    if (s < whole) {
      _tile_loadd(4, a + s * kStepK, stride);
      _tile_loadd(5, a + 16 * lda + s * kStepK, stride);
    } else {
      constexpr int64_t kLastStride = kStepK * sizeof(uint16_t);
      _tile_loadd(4, last, kLastStride);
      _tile_loadd(5, last + 16 * kStepK, kLastStride);
    }
  };
  tile_over(whole + (tail ? 1 : 0), load_a, b, c, ldc, kTile, n, alpha, beta, first);
}

}  // namespace

const VecKernels* vec_kernels_amx() {
  static const VecKernels* kernels = []() -> const VecKernels* {
    const VecKernels* base = vec_kernels_avx512_bf16();
    if (!base) return nullptr;
    static VecKernels k = *base;
    k.amx_bf16_pack_a = amx_bf16_pack_a;
    k.amx_bf16_pack_b = amx_bf16_pack_b;
    k.amx_bf16_tile = amx_bf16_tile;
    k.amx_bf16_tile_a = amx_bf16_tile_a;
    k.amx_bf16_begin = amx_bf16_begin;
    return &k;
  }();
  return kernels;
}

}  // namespace ortmodule
#else
namespace ortmodule {
const VecKernels* vec_kernels_amx() { return nullptr; }
}  // namespace ortmodule
#endif
