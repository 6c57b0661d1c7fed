// The tile transforms of the Winograd F(2x2, 3x3) convolutions (conv_winograd.cpp): filters,
// input tiles, output tiles and their gradients, each over one image or one set of filters,
// writing the plain [16, rows, ld] layout or the packed GEMM's panels (kernels/cpu/sgemm.h).
// The scalar loops here are the baseline path; with AVX2 or AVX-512, float input, output and
// output-gradient transforms run the vector kernels of vec_winograd.inl (same arithmetic, same
// order of operations), vectorised over all of a plane's tiles rather than along a tile row.
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "kernels/cpu/conv.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/parallel.h"

namespace ortmodule {
namespace winograd_detail {

// The tile grid of an output [outH, outW] and the zero-padded input plane it reads, [Hp, Wp]
// with the input at row pad_top, column pad_left.
struct Tiles {
  int64_t th, tw, per_image, Hp, Wp;
};

inline Tiles tiles_of(const Conv2dParams& p) {
  Tiles t;
  t.th = (p.outH + 1) / 2;
  t.tw = (p.outW + 1) / 2;
  t.per_image = t.th * t.tw;
  t.Hp = 2 * t.th + 2;
  t.Wp = 2 * t.tw + 2;
  return t;
}

// Scratch floats a transform of one image takes (its `plane` and `a` arguments): the padded
// plane of the scalar loops, or the phase planes of the vector kernels.
inline int64_t plane_scratch(const Tiles& t) {
  return std::max(t.Hp * t.Wp, winograd_scratch_floats({0, 0, 0, 0, t.th, t.tw}));
}

// The 4x4 transformed filter u = G g G^T of one 3x3 filter g (taps read in reverse order when
// Flip: the filter rotated by 180 degrees), where
// G = [[1, 0, 0], [1/2, 1/2, 1/2], [1/2, -1/2, 1/2], [0, 0, 1]]; u[i * 4 + j]. Called per
// filter in the weight transforms' inner loops: always inlined.
template <bool Flip, typename T>
__attribute__((always_inline)) inline void weight_tile(const T* g9, T* u) {
  T g[9];
  for (int k = 0; k < 9; ++k) g[k] = g9[Flip ? 8 - k : k];
  T gg[4][3];  // G g
  for (int j = 0; j < 3; ++j) {
    gg[0][j] = g[j];
    gg[1][j] = (g[j] + g[3 + j] + g[6 + j]) * T(0.5);
    gg[2][j] = (g[j] - g[3 + j] + g[6 + j]) * T(0.5);
    gg[3][j] = g[6 + j];
  }
  for (int i = 0; i < 4; ++i) {
    u[i * 4] = gg[i][0];
    u[i * 4 + 1] = (gg[i][0] + gg[i][1] + gg[i][2]) * T(0.5);
    u[i * 4 + 2] = (gg[i][0] - gg[i][1] + gg[i][2]) * T(0.5);
    u[i * 4 + 3] = gg[i][2];
  }
}

// w: [M, C, 3, 3] -> U: [16, M, C], U[e][m][c] = (G g G^T)[e] for g = w[m, c].
template <typename T>
void transform_weights(int64_t M, int64_t C, const T* w, T* U) {
  parallel_for(0, M, std::max<int64_t>(1, 4096 / std::max<int64_t>(1, C)),
               [&](int64_t m0, int64_t m1) {
                 T u[16];
                 for (int64_t m = m0; m < m1; ++m) {
                   for (int64_t c = 0; c < C; ++c) {
                     weight_tile<false>(w + (m * C + c) * 9, u);
                     for (int e = 0; e < 16; ++e) U[(e * M + m) * C + c] = u[e];
                   }
                 }
               });
}

// Filters g(m, c) = w + m * sm + c * sc (flipped when Flip) -> U as the micro-kernel's packed
// A panels: element e's panel mp at Up + e * ue + mp * C * MR holds [c][r] = U[e][mp * MR + r][c],
// rows past M zero.
template <bool Flip>
void transform_weights_packed(int64_t M, int64_t C, const float* w, int64_t sm, int64_t sc, int MR,
                              float* Up, int64_t ue) {
  const int64_t panels = (M + MR - 1) / MR;
  parallel_for(0, panels, 1, [&](int64_t p0, int64_t p1) {
    float u[16];
    for (int64_t mp = p0; mp < p1; ++mp) {
      const int64_t rows = std::min<int64_t>(MR, M - mp * MR);
      for (int64_t c = 0; c < C; ++c) {
        float* dst = Up + (mp * C + c) * MR;
        for (int64_t r = 0; r < rows; ++r) {
          weight_tile<Flip>(w + (mp * MR + r) * sm + c * sc, u);
          for (int e = 0; e < 16; ++e) dst[e * ue + r] = u[e];
        }
        for (int64_t r = rows; r < MR; ++r)
          for (int e = 0; e < 16; ++e) dst[e * ue + r] = 0.0f;
      }
    }
  });
}

// Where transform_input writes element 0 of V[.][c][t] (element e at + e * es), and how many
// consecutive t from there are consecutive in memory. Plain: V [16, C, ld] row-major.
template <typename T>
struct PlainColumns {
  T* V;
  int64_t ld;
  T* at(int64_t c, int64_t t, int64_t* run) const {
    *run = ld - t;
    return V + c * ld + t;
  }
  WinogradColumns columns(int64_t c, int64_t t0, int64_t es) const {
    return {V + c * ld, es, t0, ld, 0};
  }
};

// The micro-kernel's packed B panels: panel t / NR at V + (t / NR) * C * NR holds [c][t % NR].
struct PanelColumns {
  float* V;
  int64_t C, NR;
  float* at(int64_t c, int64_t t, int64_t* run) const {
    *run = NR - t % NR;
    return V + (t / NR) * C * NR + c * NR + t % NR;
  }
  WinogradColumns columns(int64_t c, int64_t t0, int64_t es) const {
    return {V + c * NR, es, t0, NR, C * NR};
  }
};

// One image x: [C, H, W] -> columns [t0, t0 + per_image) of V: [16, C, ld] with element e at
// V + e * es, where V[e][c][t0 + ty * tw + tx] = (B^T d B)[e] for the tile d at padded row
// 2 ty, column 2 tx, B^T = [[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]].
// B^T combines rows (a loop along the row), B columns (a loop over tiles with stride-2
// loads): both run over contiguous memory, so the compiler vectorises them.
// plane: [plane_scratch(t)] and rows: [4, Wp] scratch.
template <typename T, typename Columns>
void transform_input(const Conv2dParams& p, const Tiles& t, const T* x, const Columns& cols,
                     int64_t es, int64_t t0, T* plane, T* rows) {
  if constexpr (std::is_same_v<T, float>) {
    if (const auto vec = vec_kernels().winograd_input) {
      const WinogradPlane g{p.H, p.W, p.pad_top, p.pad_left, t.th, t.tw};
      for (int64_t c = 0; c < p.C; ++c) vec(g, x + c * p.H * p.W, cols.columns(c, t0, es), plane);
      return;
    }
  }
  const int64_t in_rows = std::min(p.H, t.Hp - p.pad_top);
  const int64_t in_cols = std::min(p.W, t.Wp - p.pad_left);
  const int64_t Wp = t.Wp;
  for (int64_t c = 0; c < p.C; ++c) {
    std::fill(plane, plane + t.Hp * Wp, T(0));
    for (int64_t h = 0; h < in_rows; ++h) {
      const T* src = x + (c * p.H + h) * p.W;
      std::copy(src, src + in_cols, plane + (p.pad_top + h) * Wp + p.pad_left);
    }
    for (int64_t ty = 0; ty < t.th; ++ty) {
      const T* d0 = plane + 2 * ty * Wp;
      const T *d1 = d0 + Wp, *d2 = d1 + Wp, *d3 = d2 + Wp;
      T *b0 = rows, *b1 = rows + Wp, *b2 = rows + 2 * Wp, *b3 = rows + 3 * Wp;
      for (int64_t q = 0; q < Wp; ++q) {
        b0[q] = d0[q] - d2[q];
        b1[q] = d1[q] + d2[q];
        b2[q] = d2[q] - d1[q];
        b3[q] = d1[q] - d3[q];
      }
      for (int64_t tx0 = 0; tx0 < t.tw;) {  // runs of tiles consecutive in V
        int64_t run = 0;
        T* v = cols.at(c, t0 + ty * t.tw + tx0, &run);
        const int64_t n = std::min(run, t.tw - tx0);
        for (int i = 0; i < 4; ++i) {
          const T* r = rows + i * Wp + 2 * tx0;
          T *v0 = v + (i * 4) * es, *v1 = v0 + es, *v2 = v1 + es, *v3 = v2 + es;
          for (int64_t tx = 0; tx < n; ++tx) {
            const T r0 = r[2 * tx], r1 = r[2 * tx + 1], r2 = r[2 * tx + 2], r3 = r[2 * tx + 3];
            v0[tx] = r0 - r2;
            v1[tx] = r1 + r2;
            v2[tx] = r2 - r1;
            v3[tx] = r1 - r3;
          }
        }
        tx0 += n;
      }
    }
  }
}

// Columns [t0, t0 + per_image) of Mo: [16, M, ld] (element e at Mo + e * es) -> one image
// y: [M, outH, outW] (+ bias): Y = A^T m A with A^T = [[1, 1, 1, 0], [0, 1, -1, -1]], clipped
// at the bottom/right edges. a: [plane_scratch(t)] scratch.
template <typename T>
void transform_output(const Conv2dParams& p, const Tiles& t, const T* Mo, int64_t ld, int64_t es,
                      int64_t t0, const T* bias, T* y, T* a) {
  if constexpr (std::is_same_v<T, float>) {
    if (const auto vec = vec_kernels().winograd_output) {
      const WinogradPlane g{p.outH, p.outW, 0, 0, t.th, t.tw};
      for (int64_t m = 0; m < p.M; ++m) {
        vec(g, Mo + m * ld + t0, es, bias != nullptr ? bias[m] : 0.0f, y + m * p.outH * p.outW, a);
      }
      return;
    }
  }
  const int64_t tw = t.tw, full = p.outW / 2;  // tiles whose two columns are both inside
  for (int64_t m = 0; m < p.M; ++m) {
    const T b = bias != nullptr ? bias[m] : T(0);
    T* ym = y + m * p.outH * p.outW;
    for (int64_t ty = 0; ty < t.th; ++ty) {
      const T* mo = Mo + m * ld + t0 + ty * tw;
      for (int j = 0; j < 4; ++j) {  // A^T m: row combinations, over the row's tiles
        const T *m0 = mo + j * es, *m1 = mo + (4 + j) * es;
        const T *m2 = mo + (8 + j) * es, *m3 = mo + (12 + j) * es;
        T *a0 = a + j * tw, *a1 = a + (4 + j) * tw;
        for (int64_t tx = 0; tx < tw; ++tx) {
          a0[tx] = m0[tx] + m1[tx] + m2[tx];
          a1[tx] = m1[tx] - m2[tx] - m3[tx];
        }
      }
      for (int i = 0; i < 2; ++i) {  // ... then A: column combinations
        const int64_t oh = 2 * ty + i;
        if (oh >= p.outH) break;
        const T *c0 = a + (i * 4) * tw, *c1 = c0 + tw, *c2 = c1 + tw, *c3 = c2 + tw;
        T* out = ym + oh * p.outW;
        for (int64_t tx = 0; tx < full; ++tx) {
          out[2 * tx] = c0[tx] + c1[tx] + c2[tx] + b;
          out[2 * tx + 1] = c1[tx] - c2[tx] - c3[tx] + b;
        }
        if (full < tw) out[2 * full] = c0[full] + c1[full] + c2[full] + b;
      }
    }
  }
}

// One image dy: [M, outH, outW] -> columns [t0, t0 + per_image) of D: [16, M, ld] (element e
// at D + e * es): D[e][m][t] = (A dY A^T)[e] for the 2x2 tile dY of dy at row 2 ty, column
// 2 tx, A = [[1, 0], [1, 1], [1, -1], [0, -1]] (the transpose of the output transform's A^T).
// Tiles past the bottom/right edges of an odd output read zeros: their clipped outputs had no
// gradient. As transform_input: rows first (a loop along the row), then columns (stride-2
// loads over tiles). plane: [plane_scratch(t)] and rows: [4, 2 tw] scratch.
template <typename T>
void transform_output_gradient(const Conv2dParams& p, const Tiles& t, const T* dy, T* D, int64_t ld,
                               int64_t es, int64_t t0, T* plane, T* rows) {
  if constexpr (std::is_same_v<T, float>) {
    if (const auto vec = vec_kernels().winograd_output_gradient) {
      const WinogradPlane g{p.outH, p.outW, 0, 0, t.th, t.tw};
      for (int64_t m = 0; m < p.M; ++m)
        vec(g, dy + m * p.outH * p.outW, D + m * ld + t0, es, plane);
      return;
    }
  }
  const int64_t Wq = 2 * t.tw, Hq = 2 * t.th;
  const bool padded = Wq != p.outW || Hq != p.outH;
  if (padded) std::fill(plane, plane + Hq * Wq, T(0));
  for (int64_t m = 0; m < p.M; ++m) {
    const T* src = dy + m * p.outH * p.outW;
    if (padded) {
      for (int64_t h = 0; h < p.outH; ++h) {
        std::copy(src + h * p.outW, src + (h + 1) * p.outW, plane + h * Wq);
      }
      src = plane;
    }
    for (int64_t ty = 0; ty < t.th; ++ty) {
      const T* y0 = src + 2 * ty * Wq;
      const T* y1 = y0 + Wq;
      T *b1 = rows + Wq, *b2 = rows + 2 * Wq, *b3 = rows + 3 * Wq;
      for (int64_t q = 0; q < Wq; ++q) {
        b1[q] = y0[q] + y1[q];
        b2[q] = y0[q] - y1[q];
        b3[q] = -y1[q];
      }
      T* d = D + m * ld + t0 + ty * t.tw;
      for (int i = 0; i < 4; ++i) {
        const T* r = i == 0 ? y0 : rows + i * Wq;
        T *d0 = d + (i * 4) * es, *d1 = d0 + es, *d2 = d1 + es, *d3 = d2 + es;
        for (int64_t tx = 0; tx < t.tw; ++tx) {
          const T r0 = r[2 * tx], r1 = r[2 * tx + 1];
          d0[tx] = r0;
          d1[tx] = r0 + r1;
          d2[tx] = r0 - r1;
          d3[tx] = -r1;
        }
      }
    }
  }
}

// S: [16, C] (element e at S + e * C) -> dw: [C, 3, 3], dw[c] = G^T S[:, c] G with G as in
// transform_weights (rows of G^T: [1, 1/2, 1/2, 0], [0, 1/2, -1/2, 0], [0, 1/2, 1/2, 1]).
template <typename T>
void transform_weight_gradient(int64_t C, const T* S, T* dw) {
  for (int64_t c = 0; c < C; ++c) {
    T s[4][4];
    for (int e = 0; e < 16; ++e) s[e / 4][e % 4] = S[e * C + c];
    T gs[3][4];  // G^T S
    for (int j = 0; j < 4; ++j) {
      const T half_sum = (s[1][j] + s[2][j]) * T(0.5);
      gs[0][j] = s[0][j] + half_sum;
      gs[1][j] = (s[1][j] - s[2][j]) * T(0.5);
      gs[2][j] = half_sum + s[3][j];
    }
    T* g = dw + c * 9;
    for (int i = 0; i < 3; ++i) {  // ... G
      const T half_sum = (gs[i][1] + gs[i][2]) * T(0.5);
      g[i * 3] = gs[i][0] + half_sum;
      g[i * 3 + 1] = (gs[i][1] - gs[i][2]) * T(0.5);
      g[i * 3 + 2] = half_sum + gs[i][3];
    }
  }
}

}  // namespace winograd_detail
}  // namespace ortmodule
