// The vectorized float32 kernels, written once over a register wrapper V and included by
// vec_avx2.cpp and vec_avx512.cpp (each compiled with its target flags). Everything is in
// an anonymous namespace so no symbol compiled with wide instructions is shared with
// baseline code. Each kernel's baseline twin (the scalar loop in activation.cpp, softmax.cpp,
// layernorm.cpp) defines its semantics; sums accumulate in double as theirs do.
#include <cstring>

#include "kernels/cpu/simd.h"
#include "kernels/cpu/vec_kernels.h"
#include "kernels/math/bfloat16.h"
#include "kernels/math/layernorm.h"
#include "kernels/math/pool.h"
#include "kernels/math/vec_math.h"

namespace ortmodule {
namespace {

// The first n (< kWidth) floats of p in a register, the other lanes `fill`.
template <typename V>
typename V::F load_tail(const float* p, int64_t n, float fill) {
  alignas(64) float buf[V::kWidth];
  for (int64_t i = 0; i < V::kWidth; ++i) buf[i] = i < n ? p[i] : fill;
  return V::load(buf);
}
template <typename V>
void store_tail(float* p, typename V::F v, int64_t n) {
  alignas(64) float buf[V::kWidth];
  V::store(buf, v);
  for (int64_t i = 0; i < n; ++i) p[i] = buf[i];
}

// Floats ahead of the loads that the element-wise loops prefetch (4 KiB). Without it a
// kernel of many instructions per vector (Gelu, its gradient) reading cold memory ran 3.5x
// slower than from cache on a Xeon VM (1.45 vs 0.41 ms for 4 MiB), whose hardware prefetch
// did not keep up; short kernels (Relu, Exp) lose little.
constexpr int64_t kPrefetchAhead = 1024;

// y = f(x) over [n]; the tail goes through the same vector code.
template <typename V, typename Fn>
void map_unary(int64_t n, const float* x, float* y, const Fn& f) {
  int64_t i = 0;
  for (; i + V::kWidth <= n; i += V::kWidth) {
    __builtin_prefetch(x + i + kPrefetchAhead);
    V::store(y + i, f(V::load(x + i)));
  }
  if (i < n) store_tail<V>(y + i, f(load_tail<V>(x + i, n - i, 0.0f)), n - i);
}
template <typename V, typename Fn>
void map_binary(int64_t n, const float* a, const float* b, float* y, const Fn& f) {
  int64_t i = 0;
  for (; i + V::kWidth <= n; i += V::kWidth) {
    __builtin_prefetch(a + i + kPrefetchAhead);
    __builtin_prefetch(b + i + kPrefetchAhead);
    V::store(y + i, f(V::load(a + i), V::load(b + i)));
  }
  if (i < n)
    store_tail<V>(y + i, f(load_tail<V>(a + i, n - i, 0.0f), load_tail<V>(b + i, n - i, 0.0f)),
                  n - i);
}

template <typename V>
void activation(VecActivation op, int64_t n, const float* x, float* y) {
  using F = typename V::F;
  switch (op) {
    case VecActivation::kExp:
      return map_unary<V>(n, x, y, [](F v) { return math::vec_exp<V>(v); });
    case VecActivation::kSigmoid:
      return map_unary<V>(n, x, y, [](F v) { return math::vec_sigmoid<V>(v); });
    case VecActivation::kTanh:
      return map_unary<V>(n, x, y, [](F v) { return math::vec_tanh<V>(v); });
  }
}

template <typename V>
void arith(VecArith op, int64_t n, const float* a, const float* b, float* y) {
  using F = typename V::F;
  switch (op) {
    case VecArith::kAdd:
      return map_binary<V>(n, a, b, y, [](F p, F q) { return V::add(p, q); });
    case VecArith::kSub:
      return map_binary<V>(n, a, b, y, [](F p, F q) { return V::sub(p, q); });
    case VecArith::kMul:
      return map_binary<V>(n, a, b, y, [](F p, F q) { return V::mul(p, q); });
    case VecArith::kDiv:
      return map_binary<V>(n, a, b, y, [](F p, F q) { return V::div(p, q); });
    case VecArith::kSquare:
      return map_unary<V>(n, a, y, [](F p) { return V::mul(p, p); });
    case VecArith::kCube:
      return map_unary<V>(n, a, y, [](F p) { return V::mul(V::mul(p, p), p); });
  }
}

template <typename V>
void gelu_forward(int64_t n, const float* x, float* y, bool tanh) {
  using F = typename V::F;
  if (tanh) {
    map_unary<V>(n, x, y, [](F v) { return math::vec_gelu_tanh<V>(v); });
  } else {
    map_unary<V>(n, x, y, [](F v) { return math::vec_gelu<V>(v); });
  }
}

// dx = f(dy, x, &y) over [n], and y too where not null (the tail through the same code).
template <typename V, typename Fn>
void map_binary_and_value(int64_t n, const float* a, const float* b, float* dx, float* y,
                          const Fn& f) {
  using F = typename V::F;
  int64_t i = 0;
  for (; i + V::kWidth <= n; i += V::kWidth) {
    __builtin_prefetch(a + i + kPrefetchAhead);
    __builtin_prefetch(b + i + kPrefetchAhead);
    F value;
    V::store(dx + i, f(V::load(a + i), V::load(b + i), &value));
    V::store(y + i, value);
  }
  if (i < n) {
    F value;
    const F d = f(load_tail<V>(a + i, n - i, 0.0f), load_tail<V>(b + i, n - i, 0.0f), &value);
    store_tail<V>(dx + i, d, n - i);
    store_tail<V>(y + i, value, n - i);
  }
}

template <typename V>
void gelu_backward(int64_t n, const float* dy, const float* x, float* dx, float* y, bool tanh) {
  using F = typename V::F;
  if (y) {
    if (tanh) {
      map_binary_and_value<V>(n, dy, x, dx, y, [](F g, F v, F* value) {
        return math::vec_gelu_tanh_grad_and_value<V>(g, v, value);
      });
    } else {
      map_binary_and_value<V>(n, dy, x, dx, y, [](F g, F v, F* value) {
        return math::vec_gelu_grad_and_value<V>(g, v, value);
      });
    }
  } else if (tanh) {
    map_binary<V>(n, dy, x, dx, [](F g, F v) { return math::vec_gelu_tanh_grad<V>(g, v); });
  } else {
    map_binary<V>(n, dy, x, dx, [](F g, F v) { return math::vec_gelu_grad<V>(g, v); });
  }
}

// x, y: [dim] (softmax.cpp: softmax_forward_row). A NaN anywhere makes the row NaN, as
// there (through the max here, through the sum there).
template <typename V>
void softmax_forward_row(int64_t dim, const float* x, float* y, bool log) {
  using F = typename V::F;
  const float neg_inf = -__builtin_inff();
  const int64_t full = dim - dim % V::kWidth, rest = dim - full;
  F vmax = V::set1(neg_inf);
  for (int64_t k = 0; k < full; k += V::kWidth) vmax = V::max(vmax, V::load(x + k));
  if (rest) vmax = V::max(vmax, load_tail<V>(x + full, rest, neg_inf));
  const F max = V::set1(V::reduce_max(vmax));
  auto sum = V::dacc_zero();
  if (log) {
    for (int64_t k = 0; k < full; k += V::kWidth)
      V::dacc_add(sum, math::vec_exp<V>(V::sub(V::load(x + k), max)));
    if (rest)
      V::dacc_add(sum, math::vec_exp<V>(V::sub(load_tail<V>(x + full, rest, neg_inf), max)));
    const F log_sum = V::set1(static_cast<float>(__builtin_log(V::dacc_sum(sum))));
    for (int64_t k = 0; k < full; k += V::kWidth)
      V::store(y + k, V::sub(V::sub(V::load(x + k), max), log_sum));
    if (rest)
      store_tail<V>(y + full, V::sub(V::sub(load_tail<V>(x + full, rest, 0.0f), max), log_sum),
                    rest);
    return;
  }
  for (int64_t k = 0; k < full; k += V::kWidth) {
    const F e = math::vec_exp<V>(V::sub(V::load(x + k), max));
    V::store(y + k, e);
    V::dacc_add(sum, e);
  }
  if (rest) {
    const F e = math::vec_exp<V>(V::sub(load_tail<V>(x + full, rest, neg_inf), max));
    store_tail<V>(y + full, e, rest);
    V::dacc_add(sum, e);
  }
  const F inv_sum = V::set1(static_cast<float>(1.0 / V::dacc_sum(sum)));
  for (int64_t k = 0; k < full; k += V::kWidth) V::store(y + k, V::mul(V::load(y + k), inv_sum));
  if (rest) store_tail<V>(y + full, V::mul(load_tail<V>(y + full, rest, 0.0f), inv_sum), rest);
}

// dy, y, dx: [dim] (softmax.cpp: softmax_backward_row).
template <typename V>
void softmax_backward_row(int64_t dim, const float* dy, const float* y, float* dx, bool log) {
  using F = typename V::F;
  const int64_t full = dim - dim % V::kWidth, rest = dim - full;
  auto sum = V::dacc_zero();
  for (int64_t k = 0; k < full; k += V::kWidth)
    V::dacc_add(sum, log ? V::load(dy + k) : V::mul(V::load(dy + k), V::load(y + k)));
  if (rest) {
    const F g = load_tail<V>(dy + full, rest, 0.0f);
    V::dacc_add(sum, log ? g : V::mul(g, load_tail<V>(y + full, rest, 0.0f)));
  }
  const F s = V::set1(static_cast<float>(V::dacc_sum(sum)));
  if (log) {
    map_binary<V>(dim, dy, y, dx,
                  [&](F g, F out) { return V::fnmadd(math::vec_exp<V>(out), s, g); });
  } else {
    map_binary<V>(dim, dy, y, dx, [&](F g, F out) { return V::mul(out, V::sub(g, s)); });
  }
}

// softmax.cpp's scale_or_fill_row for contiguous rows: y = keep ? x * scale : fill.
template <typename V>
void scale_or_fill(int64_t n, const float* x, float scale, const uint8_t* keep, float fill,
                   float* y) {
  const typename V::F s = V::set1(scale), f = V::set1(fill);
  int64_t i = 0;
  for (; i + V::kWidth <= n; i += V::kWidth)
    V::store(y + i, V::select(V::bytes_nonzero(keep + i), V::mul(V::load(x + i), s), f));
  for (; i < n; ++i) y[i] = keep[i] ? x[i] * scale : fill;
}

// softmax.cpp's scale_and_mask_row for contiguous rows: y = x * scale + mask. The product is
// held in a register the compiler cannot see into, so that it is not contracted with the sum
// into one fused multiply-add (GNU C++ contracts vector expressions by default): the unfused
// Mul then Add round twice.
template <typename V>
void scale_add(int64_t n, const float* x, float scale, const float* mask, float* y) {
  using F = typename V::F;
  const F s = V::set1(scale);
  map_binary<V>(n, x, mask, y, [s](F p, F m) {
    F product = V::mul(p, s);
    __asm__("" : "+v"(product));
    return V::add(product, m);
  });
}

// The masking of softmax.cpp's scaled_kept_softmax_backward: dx = keep ? dx * scale : 0.
template <typename V>
void scale_kept(int64_t n, const uint8_t* keep, float scale, float* dx) {
  const typename V::F s = V::set1(scale), zero = V::zero();
  int64_t i = 0;
  for (; i + V::kWidth <= n; i += V::kWidth)
    V::store(dx + i, V::select(V::bytes_nonzero(keep + i), V::mul(V::load(dx + i), s), zero));
  for (; i < n; ++i) dx[i] = keep[i] ? dx[i] * scale : 0.0f;
}

#include "kernels/cpu/vec_norm.inl"

// ---- packed GEMM micro-kernel ----
// Rows of the C tile: 14 with 16-float registers (28 accumulators, 2 B registers and a
// broadcast: 31 of 32 registers), 6 with 8-float ones (12 + 3 of 16).
template <typename V>
constexpr int gemm_mr() {
  return V::kWidth == 16 ? 14 : 6;
}

// The micro-kernel over any layout of A: load_a(i, k) is row i, column k of the A panel. R of
// the panel's rows are computed (m <= R <= MR): a partial panel's rows take a smaller tile
// (gemm_tile_rows), each row of C summed over k as in the full tile.
template <typename V, int R, typename LoadA>
__attribute__((always_inline)) inline void gemm_tile_impl(int64_t kc, const LoadA& load_a,
                                                          const float* b, float* c, int64_t ldc,
                                                          int m, int n, float alpha, float beta,
                                                          bool first) {
  using F = typename V::F;
  constexpr int W = V::kWidth;
  F acc[R][2];
#pragma GCC unroll 16
  for (int i = 0; i < R; ++i) acc[i][0] = acc[i][1] = V::zero();
  for (int64_t k = 0; k < kc; ++k) {
    const F b0 = V::load(b), b1 = V::load(b + W);
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i) {
      const F ai = V::set1(load_a(i, k));
      acc[i][0] = V::fmadd(ai, b0, acc[i][0]);
      acc[i][1] = V::fmadd(ai, b1, acc[i][1]);
    }
    b += 2 * W;
  }
  const F va = V::set1(alpha), vb = V::set1(beta);
  const bool read_c = !first || beta != 0.0f;
  const F keep = first ? vb : V::set1(1.0f);  // what the old C is multiplied by
  if (m == R && n == 2 * W) {
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i) {
      float* row = c + i * ldc;
      F x0 = V::mul(acc[i][0], va), x1 = V::mul(acc[i][1], va);
      if (read_c) {
        x0 = V::fmadd(keep, V::load(row), x0);
        x1 = V::fmadd(keep, V::load(row + W), x1);
      }
      V::store(row, x0);
      V::store(row + W, x1);
    }
    return;
  }
  // A partial tile: through a buffer, cell by cell.
  alignas(64) float tile[R][2 * W];
  for (int i = 0; i < R; ++i) {
    V::store(tile[i], V::mul(acc[i][0], va));
    V::store(tile[i] + W, V::mul(acc[i][1], va));
  }
  const float kept = first ? beta : 1.0f;
  for (int i = 0; i < m; ++i) {
    float* row = c + i * ldc;
    for (int j = 0; j < n; ++j) row[j] = read_c ? tile[i][j] + kept * row[j] : tile[i][j];
  }
}

// The tile for m of the panel's MR rows: the full one, or for the last panel of a product
// whose rows are no multiple of MR the smallest of MR/2, 4, 2 and 1 rows that holds them (a
// product of 128 rows has a last panel of 2 with MR = 14: 10 full tiles' work for 9.1).
template <typename V, typename LoadA>
__attribute__((always_inline)) inline void gemm_tile_rows(int64_t kc, const LoadA& load_a,
                                                          const float* b, float* c, int64_t ldc,
                                                          int m, int n, float alpha, float beta,
                                                          bool first) {
  constexpr int MR = gemm_mr<V>();
  constexpr int kHalf = (MR + 1) / 2;
  if (m > kHalf)
    gemm_tile_impl<V, MR>(kc, load_a, b, c, ldc, m, n, alpha, beta, first);
  else if (m > 4)
    gemm_tile_impl<V, kHalf>(kc, load_a, b, c, ldc, m, n, alpha, beta, first);
  else if (m > 2)
    gemm_tile_impl<V, (kHalf < 4 ? kHalf : 4)>(kc, load_a, b, c, ldc, m, n, alpha, beta, first);
  else if (m == 2)
    gemm_tile_impl<V, 2>(kc, load_a, b, c, ldc, m, n, alpha, beta, first);
  else
    gemm_tile_impl<V, 1>(kc, load_a, b, c, ldc, m, n, alpha, beta, first);
}

template <typename V>
void gemm_tile(int64_t kc, const float* a, const float* b, float* c, int64_t ldc, int m, int n,
               float alpha, float beta, bool first) {
  constexpr int MR = gemm_mr<V>();
  gemm_tile_rows<V>(
      kc, [a](int i, int64_t k) { return a[k * MR + i]; }, b, c, ldc, m, n, alpha, beta, first);
}

template <typename V>
void gemm_tile_a(int64_t kc, const float* a, int64_t lda, bool trans, const float* b, float* c,
                 int64_t ldc, int m, int n, float alpha, float beta, bool first) {
  if (trans) {
    gemm_tile_rows<V>(
        kc, [a, lda](int i, int64_t k) { return a[k * lda + i]; }, b, c, ldc, m, n, alpha, beta,
        first);
    return;
  }
  gemm_tile_rows<V>(
      kc, [a, lda](int i, int64_t k) { return a[i * lda + k]; }, b, c, ldc, m, n, alpha, beta,
      first);
}

// 8 rows of 8 floats at x (row stride ld) -> 8 columns at dst (row stride width), transposed
// with the classic unpack / shuffle / permute sequence (AVX2: both vector files have it).
inline void transpose_8x8(const float* x, int64_t ld, float* dst, int width) {
  __m256 r[8], t[8];
  for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(x + i * ld);
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 8; i += 4) {
    r[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
    r[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xEE);
    r[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
    r[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
  }
  for (int i = 0; i < 4; ++i) {
    _mm256_storeu_ps(dst + i * width, _mm256_permute2f128_ps(r[i], r[i + 4], 0x20));
    _mm256_storeu_ps(dst + (i + 4) * width, _mm256_permute2f128_ps(r[i], r[i + 4], 0x31));
  }
}

void pack_transposed(const float* x, int64_t ld, int64_t rows, int64_t kc, int width, float* dst) {
  const int64_t full_rows = rows / 8 * 8, full_k = kc / 8 * 8;
  for (int64_t k = 0; k < full_k; k += 8) {
    for (int64_t r = 0; r < full_rows; r += 8)
      transpose_8x8(x + r * ld + k, ld, dst + k * width + r, width);
    for (int64_t r = full_rows; r < rows; ++r)
      for (int64_t j = 0; j < 8; ++j) dst[(k + j) * width + r] = x[r * ld + k + j];
  }
  for (int64_t k = full_k; k < kc; ++k)
    for (int64_t r = 0; r < rows; ++r) dst[k * width + r] = x[r * ld + k];
  for (int64_t k = 0; k < kc; ++k)
    for (int64_t r = rows; r < width; ++r) dst[k * width + r] = 0.0f;
}

#if defined(__AVX512F__)
// The first `count` of 16 lanes (count clipped to 0..16).
inline __mmask16 lanes(int64_t count) {
  return static_cast<__mmask16>(count >= 16 ? 0xFFFFu : count <= 0 ? 0u : (1u << count) - 1u);
}

// 16 outputs at a time: each row's 32 inputs split into even and odd columns by two
// permutes (a 3-wide window's third column is the even split of the row two columns on);
// the last group takes masked loads and stores, so short rows (a 14-wide output) are one group.
template <int k>
void maxpool_s2_row_k(const float* r, int64_t W, int64_t n, int64_t first_at, float* y,
                      int64_t* idx) {
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
  const __m512i lane2 = _mm512_setr_epi64(0, 2, 4, 6, 8, 10, 12, 14);
  for (int64_t ow = 0; ow < n; ow += 16) {
    const int64_t left = std::min<int64_t>(16, n - ow);
    const __mmask16 out_mask = lanes(left);
    __m512 taps[9];
    int32_t tap_off[9];
    int t = 0;
    for (int row = 0; row < k; ++row) {
      const float* src = r + row * W + 2 * ow;
      const int64_t in = 2 * left;  // columns 2 ow .. 2 ow + 2 left - 1 of this group
      const __m512 lo = _mm512_maskz_loadu_ps(lanes(in), src);
      const __m512 hi = _mm512_maskz_loadu_ps(lanes(in - 16), src + 16);
      taps[t] = _mm512_permutex2var_ps(lo, even, hi);
      tap_off[t++] = static_cast<int32_t>(row * W);
      taps[t] = _mm512_permutex2var_ps(lo, odd, hi);
      tap_off[t++] = static_cast<int32_t>(row * W + 1);
      if constexpr (k == 3) {  // columns 2 ow + 2: the last window ends at column 2 left
        const __m512 lo2 = _mm512_maskz_loadu_ps(lanes(in - 1), src + 2);
        const __m512 hi2 = _mm512_maskz_loadu_ps(lanes(in - 17), src + 18);
        taps[t] = _mm512_permutex2var_ps(lo2, even, hi2);
        tap_off[t++] = static_cast<int32_t>(row * W + 2);
      }
    }
    __m512 best = taps[0];
    __m512i off = _mm512_setzero_si512();
    for (int i = 1; i < t; ++i) {
      const __mmask16 replaces = _mm512_cmp_ps_mask(taps[i], best, _CMP_GT_OQ) |
                                 _mm512_cmp_ps_mask(taps[i], taps[i], _CMP_UNORD_Q);
      best = _mm512_mask_blend_ps(replaces, best, taps[i]);
      off = _mm512_mask_blend_epi32(replaces, off, _mm512_set1_epi32(tap_off[i]));
    }
    _mm512_mask_storeu_ps(y + ow, out_mask, best);
    if (idx == nullptr) continue;
    for (int half = 0; half < 2; ++half) {
      const __m256i off8 =
          half == 0 ? _mm512_castsi512_si256(off) : _mm512_extracti64x4_epi64(off, 1);
      const __m512i base =
          _mm512_add_epi64(_mm512_set1_epi64(first_at + 2 * (ow + 8 * half)), lane2);
      const __mmask8 m8 = static_cast<__mmask8>(out_mask >> (8 * half));
      _mm512_mask_storeu_epi64(idx + ow + 8 * half, m8,
                               _mm512_add_epi64(base, _mm512_cvtepi32_epi64(off8)));
    }
  }
}

// The window size at compile time: the taps unroll into registers.
void maxpool_s2_row(const float* r, int64_t W, int k, int64_t n, int64_t first_at, float* y,
                    int64_t* idx) {
  if (k == 2) {
    maxpool_s2_row_k<2>(r, W, n, first_at, y, idx);
  } else {
    maxpool_s2_row_k<3>(r, W, n, first_at, y, idx);
  }
}

// 16 outputs per two masked loads and a permute.
void copy_stride2(const float* x, int64_t n, float* y) {
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  for (int64_t i = 0; i < n; i += 16) {
    const int64_t left = std::min<int64_t>(16, n - i),
                  in = 2 * left - 1;  // the last read: 2 (n - 1)
    const __m512 lo = _mm512_maskz_loadu_ps(lanes(in), x + 2 * i);
    const __m512 hi = _mm512_maskz_loadu_ps(lanes(in - 16), x + 2 * i + 16);
    _mm512_mask_storeu_ps(y + i, lanes(left), _mm512_permutex2var_ps(lo, even, hi));
  }
}

#include "kernels/cpu/vec_convert.inl"

#elif defined(__AVX2__)
#include "kernels/cpu/vec_avx2_strided.inl"
#endif

#include "kernels/cpu/vec_winograd.inl"

template <typename V>
VecKernels make_vec_kernels() {
  VecKernels k{};
  k.activation = activation<V>;
  k.arith = arith<V>;
  k.gelu_forward = gelu_forward<V>;
  k.gelu_backward = gelu_backward<V>;
  k.softmax_forward_row = softmax_forward_row<V>;
  k.softmax_backward_row = softmax_backward_row<V>;
  k.scale_or_fill = scale_or_fill<V>;
  k.scale_kept = scale_kept<V>;
  k.scale_add = scale_add<V>;
  k.layernorm_forward_row = norm_forward_row<V, true>;
  k.layernorm_backward_row = norm_backward_row<V, true>;
  k.rmsnorm_forward_row = rmsnorm_forward_row<V>;
  k.rmsnorm_backward_row = rmsnorm_backward_row<V>;
  k.norm_param_grad_rows = norm_param_grad_rows<V>;
  k.sum_rows_f64 = sum_rows_f64<V>;
  k.gemm_tile = gemm_tile<V>;
  k.gemm_tile_a = gemm_tile_a<V>;
  k.gemm_mr = gemm_mr<V>();
  k.gemm_nr = 2 * V::kWidth;
  k.pack_transposed = pack_transposed;
  k.winograd_input = winograd::input<V>;
  k.winograd_output = winograd::output<V>;
  k.winograd_output_gradient = winograd::output_gradient<V>;
#if defined(__AVX2__)
  // AVX-512's (vec_convert.inl and above) or AVX2's (vec_avx2_strided.inl).
  k.maxpool_s2_row = maxpool_s2_row;
  k.copy_stride2 = copy_stride2;
  k.float_to_bf16 = float_to_bf16;
  k.bf16_to_float = bf16_to_float;
#endif
#if defined(__AVX512F__)
  k.bias_round_gelu_bf16 = bias_round_gelu_bf16;
  k.round_bf16_float = round_bf16_float;
#endif
  return k;
}

}  // namespace
}  // namespace ortmodule
