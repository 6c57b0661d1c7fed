// The Winograd F(2x2, 3x3) tile transforms of one plane, vectorised over the plane's tiles
// (AVX-512; included by vec_kernels.inl inside its anonymous namespace).
//
// A tile reads a 4x4 (input) or 2x2 (output gradient) window at row 2 ty, column 2 tx: along
// a row of tiles the windows overlap and step by two, so a register of consecutive tiles
// needs every other column. Each transform therefore first splits its plane into phase
// planes, one per row parity and column offset, each laid out [rows, tw] so that tile
// t = ty * tw + tx finds its window element at index t (or t + tw, one tile row down): the
// tile arithmetic then runs over all of the plane's tiles at once, 16 per register, however
// narrow the image (a 14x14 output has rows of 7 tiles). The splits are two permutes per 32
// columns. The arithmetic and its order are those of conv_winograd_transforms.h, whose
// scalar loops remain the baseline path and the reference.

namespace winograd_avx512 {

// Lanes [lo, hi) of a 16-lane mask, clipped to [0, 16).
inline __mmask16 lane_range(int64_t lo, int64_t hi) {
  lo = lo < 0 ? 0 : lo;
  hi = hi > 16 ? 16 : hi;
  if (hi <= lo) return 0;
  return static_cast<__mmask16>(((1u << (hi - lo)) - 1u) << lo);
}

inline __m512 negate(__m512 v) {
  return _mm512_castsi512_ps(_mm512_xor_si512(
      _mm512_castps_si512(v), _mm512_set1_epi32(static_cast<int32_t>(0x80000000u))));
}

// Columns c0 + 2 i (even) and c0 + 2 i + 1 (odd), i < 16, of a row whose columns [0, n) exist
// (the others read as zero; a null row is all zero). c0 may be negative.
inline void split_columns(const float* row, int64_t c0, int64_t n, __m512* even, __m512* odd) {
  if (row == nullptr) {
    *even = *odd = _mm512_setzero_ps();
    return;
  }
  const __m512i even_index =
      _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd_index = _mm512_add_epi32(even_index, _mm512_set1_epi32(1));
  // Masked-off lanes are not read, so the addresses before the row or past its end are safe.
  const __m512 lo = _mm512_maskz_loadu_ps(lane_range(-c0, n - c0), row + c0);
  const __m512 hi = _mm512_maskz_loadu_ps(lane_range(-c0 - 16, n - c0 - 16), row + c0 + 16);
  *even = _mm512_permutex2var_ps(lo, even_index, hi);
  *odd = _mm512_permutex2var_ps(lo, odd_index, hi);
}

// Stores the first n lanes (n may exceed 16).
inline void store_lanes(float* p, __m512 v, int64_t n) {
  _mm512_mask_storeu_ps(p, lane_range(0, n), v);
}

// x: [H, W] -> (B^T d B)[e] for every tile d of the padded plane, B^T = [[1, 0, -1, 0],
// [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]]: rows first, then columns.
void input(const WinogradPlane& g, const float* x, const WinogradColumns& dst, float* scratch) {
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
    for (int64_t q0 = 0; q0 < tw; q0 += 16) {
      __m512 even, odd;
      for (int half = 0; half < 2; ++half) {  // columns 2 q (+ 1), then 2 q + 2 (+ 1)
        split_columns(row, 2 * q0 + 2 * half - g.pad_left, g.W, &even, &odd);
        store_lanes(phase[h & 1][2 * half] + at + q0, even, tw - q0);
        store_lanes(phase[h & 1][2 * half + 1] + at + q0, odd, tw - q0);
      }
    }
  }
  for (int64_t f = 0; f < tiles;) {  // runs of tiles consecutive in dst
    const int64_t t = dst.t0 + f;
    const int64_t n = std::min(dst.run - t % dst.run, tiles - f);
    float* out = dst.base + (t / dst.run) * dst.run_stride + t % dst.run;
    for (int64_t i = 0; i < n; i += 16) {
      const __mmask16 mask = lane_range(0, n - i);
      __m512 b[4][4];  // B^T d: b[i][l]
      for (int l = 0; l < 4; ++l) {
        __m512 d[4];
        for (int k = 0; k < 4; ++k)
          d[k] = _mm512_maskz_loadu_ps(mask, phase[k & 1][l] + f + i + (k >> 1) * tw);
        b[0][l] = _mm512_sub_ps(d[0], d[2]);
        b[1][l] = _mm512_add_ps(d[1], d[2]);
        b[2][l] = _mm512_sub_ps(d[2], d[1]);
        b[3][l] = _mm512_sub_ps(d[1], d[3]);
      }
      float* o = out + i;
      for (int r = 0; r < 4; ++r) {  // ... B
        _mm512_mask_storeu_ps(o + (4 * r) * dst.es, mask, _mm512_sub_ps(b[r][0], b[r][2]));
        _mm512_mask_storeu_ps(o + (4 * r + 1) * dst.es, mask, _mm512_add_ps(b[r][1], b[r][2]));
        _mm512_mask_storeu_ps(o + (4 * r + 2) * dst.es, mask, _mm512_sub_ps(b[r][2], b[r][1]));
        _mm512_mask_storeu_ps(o + (4 * r + 3) * dst.es, mask, _mm512_sub_ps(b[r][1], b[r][3]));
      }
    }
    f += n;
  }
}

// m[e * es + t] -> y: [H, W], the 2x2 tile A^T m A + bias at row 2 ty, column 2 tx, A^T =
// [[1, 1, 1, 0], [0, 1, -1, -1]]: rows first, then columns, into four [th, tw] planes of
// output phases that are then interleaved into y's rows.
void output(const WinogradPlane& g, const float* m, int64_t es, float bias, float* y,
            float* scratch) {
  const int64_t tw = g.tw, tiles = g.th * tw;
  float* out_phase[2][2];  // [i][j]: y[2 ty + i][2 tx + j]
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 2; ++j) out_phase[i][j] = scratch + (i * 2 + j) * tiles;
  const __m512 b = _mm512_set1_ps(bias);
  for (int64_t f = 0; f < tiles; f += 16) {
    const __mmask16 mask = lane_range(0, tiles - f);
    __m512 a[2][4];  // A^T m: a[i][l]
    for (int l = 0; l < 4; ++l) {
      __m512 v[4];
      for (int k = 0; k < 4; ++k) v[k] = _mm512_maskz_loadu_ps(mask, m + (4 * k + l) * es + f);
      a[0][l] = _mm512_add_ps(_mm512_add_ps(v[0], v[1]), v[2]);
      a[1][l] = _mm512_sub_ps(_mm512_sub_ps(v[1], v[2]), v[3]);
    }
    for (int i = 0; i < 2; ++i) {  // ... A
      const __m512 y0 = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a[i][0], a[i][1]), a[i][2]), b);
      const __m512 y1 = _mm512_add_ps(_mm512_sub_ps(_mm512_sub_ps(a[i][1], a[i][2]), a[i][3]), b);
      _mm512_mask_storeu_ps(out_phase[i][0] + f, mask, y0);
      _mm512_mask_storeu_ps(out_phase[i][1] + f, mask, y1);
    }
  }
  const __m512i lo_index =
      _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  const __m512i hi_index = _mm512_add_epi32(lo_index, _mm512_set1_epi32(8));
  for (int64_t ty = 0; ty < g.th; ++ty) {
    for (int i = 0; i < 2 && 2 * ty + i < g.H; ++i) {
      float* row = y + (2 * ty + i) * g.W;
      for (int64_t q0 = 0; q0 < tw; q0 += 16) {
        const __mmask16 mask = lane_range(0, tw - q0);
        const __m512 even = _mm512_maskz_loadu_ps(mask, out_phase[i][0] + ty * tw + q0);
        const __m512 odd = _mm512_maskz_loadu_ps(mask, out_phase[i][1] + ty * tw + q0);
        const int64_t col = 2 * q0;
        store_lanes(row + col, _mm512_permutex2var_ps(even, lo_index, odd), g.W - col);
        store_lanes(row + col + 16, _mm512_permutex2var_ps(even, hi_index, odd), g.W - col - 16);
      }
    }
  }
}

// dy: [H, W] -> d[e * es + t] = (A dY A^T)[e] for the 2x2 tile dY at row 2 ty, column 2 tx
// (zeros past the edges), A = [[1, 0], [1, 1], [1, -1], [0, -1]]: rows first, then columns.
void output_gradient(const WinogradPlane& g, const float* dy, float* d, int64_t es,
                     float* scratch) {
  const int64_t tw = g.tw, tiles = g.th * tw;
  float* phase[2][2];  // [i][j]: dy[2 ty + i][2 tx + j]
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 2; ++j) phase[i][j] = scratch + (i * 2 + j) * tiles;
  for (int64_t ty = 0; ty < g.th; ++ty) {
    for (int i = 0; i < 2; ++i) {
      const int64_t r = 2 * ty + i;
      const float* row = r < g.H ? dy + r * g.W : nullptr;
      for (int64_t q0 = 0; q0 < tw; q0 += 16) {
        __m512 even, odd;
        split_columns(row, 2 * q0, g.W, &even, &odd);
        store_lanes(phase[i][0] + ty * tw + q0, even, tw - q0);
        store_lanes(phase[i][1] + ty * tw + q0, odd, tw - q0);
      }
    }
  }
  for (int64_t f = 0; f < tiles; f += 16) {
    const __mmask16 mask = lane_range(0, tiles - f);
    __m512 r[4][2];  // A dY: r[k][j]
    for (int j = 0; j < 2; ++j) {
      const __m512 y0 = _mm512_maskz_loadu_ps(mask, phase[0][j] + f);
      const __m512 y1 = _mm512_maskz_loadu_ps(mask, phase[1][j] + f);
      r[0][j] = y0;
      r[1][j] = _mm512_add_ps(y0, y1);
      r[2][j] = _mm512_sub_ps(y0, y1);
      r[3][j] = negate(y1);
    }
    for (int k = 0; k < 4; ++k) {  // ... A^T
      float* o = d + f + (4 * k) * es;
      _mm512_mask_storeu_ps(o, mask, r[k][0]);
      _mm512_mask_storeu_ps(o + es, mask, _mm512_add_ps(r[k][0], r[k][1]));
      _mm512_mask_storeu_ps(o + 2 * es, mask, _mm512_sub_ps(r[k][0], r[k][1]));
      _mm512_mask_storeu_ps(o + 3 * es, mask, negate(r[k][1]));
    }
  }
}

}  // namespace winograd_avx512
