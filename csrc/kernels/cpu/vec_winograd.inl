// The Winograd F(2x2, 3x3) tile transforms of one plane, vectorised over the plane's tiles
// (AVX2 and AVX-512; included by vec_kernels.inl inside its anonymous namespace).
//
// A tile reads a 4x4 (input) or 2x2 (output gradient) window at row 2 ty, column 2 tx: along
// a row of tiles the windows overlap and step by two, so a register of consecutive tiles
// needs every other column. Each transform therefore first splits its plane into phase
// planes, one per row parity and column offset, each laid out [rows, tw] so that tile
// t = ty * tw + tx finds its window element at index t (or t + tw, one tile row down): the
// tile arithmetic then runs over all of the plane's tiles at once, a register at a time,
// however narrow the image (a 14x14 output has rows of 7 tiles). The splits are a few
// permutes per two registers of columns. The arithmetic and its order are those of
// conv_winograd_transforms.h, whose scalar loops remain the baseline path and the reference.
//
// The transforms are written once over WinogradOps<V>: masked loads and stores of the first
// lanes (partial registers at the row and plane ends), the even/odd split and its inverse.

namespace winograd {

template <typename V>
struct WinogradOps;

#if defined(__AVX512F__)
template <>
struct WinogradOps<simd::VecAvx512> {
  using F = __m512;
  static constexpr int kW = 16;
  // Lanes [lo, hi), clipped to [0, 16).
  static __mmask16 lanes(int64_t lo, int64_t hi) {
    lo = lo < 0 ? 0 : lo;
    hi = hi > 16 ? 16 : hi;
    if (hi <= lo) return 0;
    return static_cast<__mmask16>(((1u << (hi - lo)) - 1u) << lo);
  }
  // Lanes [lo, hi) of p (the others zero and not read: p + lane may lie outside memory there).
  static F load(const float* p, int64_t lo, int64_t hi) {
    return _mm512_maskz_loadu_ps(lanes(lo, hi), p);
  }
  static void store(float* p, F v, int64_t n) { _mm512_mask_storeu_ps(p, lanes(0, n), v); }
  static F negate(F v) {
    return _mm512_castsi512_ps(_mm512_xor_si512(
        _mm512_castps_si512(v), _mm512_set1_epi32(static_cast<int32_t>(0x80000000u))));
  }
  // Even and odd lanes of the 32 floats lo:hi.
  static void split(F lo, F hi, F* even, F* odd) {
    const __m512i e = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    *even = _mm512_permutex2var_ps(lo, e, hi);
    *odd = _mm512_permutex2var_ps(lo, _mm512_add_epi32(e, _mm512_set1_epi32(1)), hi);
  }
  // The inverse: even[0], odd[0], even[1], ... as 32 floats first:second.
  static void interleave(F even, F odd, F* first, F* second) {
    const __m512i lo = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
    *first = _mm512_permutex2var_ps(even, lo, odd);
    *second = _mm512_permutex2var_ps(even, _mm512_add_epi32(lo, _mm512_set1_epi32(8)), odd);
  }
};
#endif

#if defined(__AVX2__) && defined(__FMA__) && !defined(__AVX512F__)
template <>
struct WinogradOps<simd::VecAvx2> {
  using F = __m256;
  static constexpr int kW = 8;
  static __m256i lanes(int64_t lo, int64_t hi) {
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    lo = lo < -1 ? -1 : lo > 8 ? 8 : lo;
    hi = hi < 0 ? 0 : hi > 8 ? 8 : hi;
    const __m256i from = _mm256_cmpgt_epi32(lane, _mm256_set1_epi32(static_cast<int32_t>(lo - 1)));
    const __m256i below = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int32_t>(hi)), lane);
    return _mm256_and_si256(from, below);
  }
  static F load(const float* p, int64_t lo, int64_t hi) {
    return _mm256_maskload_ps(p, lanes(lo, hi));
  }
  static void store(float* p, F v, int64_t n) { _mm256_maskstore_ps(p, lanes(0, n), v); }
  static F negate(F v) { return _mm256_xor_ps(v, _mm256_set1_ps(-0.0f)); }
  static void split(F lo, F hi, F* even, F* odd) {
    // Within each 128-bit half: lo's evens then hi's; then the 64-bit pairs put in order.
    const __m256 e = _mm256_shuffle_ps(lo, hi, _MM_SHUFFLE(2, 0, 2, 0));
    const __m256 o = _mm256_shuffle_ps(lo, hi, _MM_SHUFFLE(3, 1, 3, 1));
    *even = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(e), 0xD8));
    *odd = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(o), 0xD8));
  }
  static void interleave(F even, F odd, F* first, F* second) {
    const __m256 lo = _mm256_unpacklo_ps(even, odd), hi = _mm256_unpackhi_ps(even, odd);
    *first = _mm256_permute2f128_ps(lo, hi, 0x20);
    *second = _mm256_permute2f128_ps(lo, hi, 0x31);
  }
};
#endif

// Columns c0 + 2 i (even) and c0 + 2 i + 1 (odd), i < kW, of a row whose columns [0, n)
// exist (the others read as zero; a null row is all zero). c0 may be negative.
template <typename V>
void split_columns(const float* row, int64_t c0, int64_t n, typename WinogradOps<V>::F* even,
                   typename WinogradOps<V>::F* odd) {
  using Ops = WinogradOps<V>;
  constexpr int W = Ops::kW;
  if (row == nullptr) {
    *even = *odd = V::zero();
    return;
  }
  const auto lo = Ops::load(row + c0, -c0, n - c0);
  const auto hi = Ops::load(row + c0 + W, -c0 - W, n - c0 - W);
  Ops::split(lo, hi, even, odd);
}

// x: [H, W] -> (B^T d B)[e] for every tile d of the padded plane, B^T = [[1, 0, -1, 0],
// [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]]: rows first, then columns.
template <typename V>
void input(const WinogradPlane& g, const float* x, const WinogradColumns& dst, float* scratch) {
  using Ops = WinogradOps<V>;
  using F = typename Ops::F;
  constexpr int W = Ops::kW;
  const int64_t tw = g.tw, tiles = g.th * tw, phase_size = (g.th + 1) * tw;
  // phase[k][l]: padded-plane rows of parity k, element (r, q) = column 2 q + l of row 2 r + k;
  // l = 0, 1 are a tile's first two columns, l = 2, 3 its last two (the next tile's first).
  float* phase[2][4];
  for (int k = 0; k < 2; ++k)
    for (int l = 0; l < 4; ++l) phase[k][l] = scratch + (k * 4 + l) * phase_size;
  for (int64_t h = 0; h < 2 * g.th + 2; ++h) {
    const int64_t src_row = h - g.pad_top;
    const float* row = src_row >= 0 && src_row < g.H ? x + src_row * g.W : nullptr;
    const int64_t at = (h >> 1) * tw;
    for (int64_t q0 = 0; q0 < tw; q0 += W) {
      F even, odd;
      for (int half = 0; half < 2; ++half) {  // columns 2 q (+ 1), then 2 q + 2 (+ 1)
        split_columns<V>(row, 2 * q0 + 2 * half - g.pad_left, g.W, &even, &odd);
        Ops::store(phase[h & 1][2 * half] + at + q0, even, tw - q0);
        Ops::store(phase[h & 1][2 * half + 1] + at + q0, odd, tw - q0);
      }
    }
  }
  for (int64_t f = 0; f < tiles;) {  // runs of tiles consecutive in dst
    const int64_t t = dst.t0 + f;
    const int64_t n = std::min(dst.run - t % dst.run, tiles - f);
    float* out = dst.base + (t / dst.run) * dst.run_stride + t % dst.run;
    for (int64_t i = 0; i < n; i += W) {
      F b[4][4];  // B^T d: b[i][l]
      for (int l = 0; l < 4; ++l) {
        F d[4];
        for (int k = 0; k < 4; ++k)
          d[k] = Ops::load(phase[k & 1][l] + f + i + (k >> 1) * tw, 0, n - i);
        b[0][l] = V::sub(d[0], d[2]);
        b[1][l] = V::add(d[1], d[2]);
        b[2][l] = V::sub(d[2], d[1]);
        b[3][l] = V::sub(d[1], d[3]);
      }
      float* o = out + i;
      for (int r = 0; r < 4; ++r) {  // ... B
        Ops::store(o + (4 * r) * dst.es, V::sub(b[r][0], b[r][2]), n - i);
        Ops::store(o + (4 * r + 1) * dst.es, V::add(b[r][1], b[r][2]), n - i);
        Ops::store(o + (4 * r + 2) * dst.es, V::sub(b[r][2], b[r][1]), n - i);
        Ops::store(o + (4 * r + 3) * dst.es, V::sub(b[r][1], b[r][3]), n - i);
      }
    }
    f += n;
  }
}

// m[e * es + t] -> y: [H, W], the 2x2 tile A^T m A + bias at row 2 ty, column 2 tx, A^T =
// [[1, 1, 1, 0], [0, 1, -1, -1]]: rows first, then columns, into four [th, tw] planes of
// output phases that are then interleaved into y's rows.
template <typename V>
void output(const WinogradPlane& g, const float* m, int64_t es, float bias, float* y,
            float* scratch) {
  using Ops = WinogradOps<V>;
  using F = typename Ops::F;
  constexpr int W = Ops::kW;
  const int64_t tw = g.tw, tiles = g.th * tw;
  float* out_phase[2][2];  // [i][j]: y[2 ty + i][2 tx + j]
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 2; ++j) out_phase[i][j] = scratch + (i * 2 + j) * tiles;
  const F b = V::set1(bias);
  for (int64_t f = 0; f < tiles; f += W) {
    F a[2][4];  // A^T m: a[i][l]
    for (int l = 0; l < 4; ++l) {
      F v[4];
      for (int k = 0; k < 4; ++k) v[k] = Ops::load(m + (4 * k + l) * es + f, 0, tiles - f);
      a[0][l] = V::add(V::add(v[0], v[1]), v[2]);
      a[1][l] = V::sub(V::sub(v[1], v[2]), v[3]);
    }
    for (int i = 0; i < 2; ++i) {  // ... A
      Ops::store(out_phase[i][0] + f, V::add(V::add(V::add(a[i][0], a[i][1]), a[i][2]), b),
                 tiles - f);
      Ops::store(out_phase[i][1] + f, V::add(V::sub(V::sub(a[i][1], a[i][2]), a[i][3]), b),
                 tiles - f);
    }
  }
  for (int64_t ty = 0; ty < g.th; ++ty) {
    for (int i = 0; i < 2 && 2 * ty + i < g.H; ++i) {
      float* row = y + (2 * ty + i) * g.W;
      for (int64_t q0 = 0; q0 < tw; q0 += W) {
        const F even = Ops::load(out_phase[i][0] + ty * tw + q0, 0, tw - q0);
        const F odd = Ops::load(out_phase[i][1] + ty * tw + q0, 0, tw - q0);
        F first, second;
        Ops::interleave(even, odd, &first, &second);
        const int64_t col = 2 * q0;
        Ops::store(row + col, first, g.W - col);
        Ops::store(row + col + W, second, g.W - col - W);
      }
    }
  }
}

// dy: [H, W] -> d[e * es + t] = (A dY A^T)[e] for the 2x2 tile dY at row 2 ty, column 2 tx
// (zeros past the edges), A = [[1, 0], [1, 1], [1, -1], [0, -1]]: rows first, then columns.
template <typename V>
void output_gradient(const WinogradPlane& g, const float* dy, float* d, int64_t es,
                     float* scratch) {
  using Ops = WinogradOps<V>;
  using F = typename Ops::F;
  constexpr int W = Ops::kW;
  const int64_t tw = g.tw, tiles = g.th * tw;
  float* phase[2][2];  // [i][j]: dy[2 ty + i][2 tx + j]
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 2; ++j) phase[i][j] = scratch + (i * 2 + j) * tiles;
  for (int64_t ty = 0; ty < g.th; ++ty) {
    for (int i = 0; i < 2; ++i) {
      const int64_t r = 2 * ty + i;
      const float* row = r < g.H ? dy + r * g.W : nullptr;
      for (int64_t q0 = 0; q0 < tw; q0 += W) {
        F even, odd;
        split_columns<V>(row, 2 * q0, g.W, &even, &odd);
        Ops::store(phase[i][0] + ty * tw + q0, even, tw - q0);
        Ops::store(phase[i][1] + ty * tw + q0, odd, tw - q0);
      }
    }
  }
  for (int64_t f = 0; f < tiles; f += W) {
    F r[4][2];  // A dY: r[k][j]
    for (int j = 0; j < 2; ++j) {
      const F y0 = Ops::load(phase[0][j] + f, 0, tiles - f);
      const F y1 = Ops::load(phase[1][j] + f, 0, tiles - f);
      r[0][j] = y0;
      r[1][j] = V::add(y0, y1);
      r[2][j] = V::sub(y0, y1);
      r[3][j] = Ops::negate(y1);
    }
    for (int k = 0; k < 4; ++k) {  // ... A^T
      float* o = d + f + (4 * k) * es;
      Ops::store(o, r[k][0], tiles - f);
      Ops::store(o + es, V::add(r[k][0], r[k][1]), tiles - f);
      Ops::store(o + 2 * es, V::sub(r[k][0], r[k][1]), tiles - f);
      Ops::store(o + 3 * es, Ops::negate(r[k][1]), tiles - f);
    }
  }
}

}  // namespace winograd
