// Winograd F(2x2, 3x3) (Lavin & Gray, "Fast Algorithms for Convolutional Neural Networks"):
//   Y = A^T [ (G g G^T) .* (B^T d B) ] A
// for each 4x4 input tile d (stride 2 over the padded input) and 3x3 filter g, giving a 2x2
// output tile. The 16 element-wise products, summed over input channels, are 16 GEMMs:
//   M[e] [M, T] = U[e] [M, C] * V[e] [C, T]     (e = tile element, T = tiles of a chunk)
// with U = the transformed weights (once per call) and V = the transformed input tiles.
// The input gradient is the forward of the transposed convolution. The weight gradient is
//   dW = G^T [ sum over tiles (A dY A^T) .* (B^T d B) ] G
// (dY the tile's 2x2 output gradient): the same V, and 16 GEMMs summing over tiles,
//   S[e] [M, C] += D[e] [M, T] * V[e]^T [T, C]     (D = the transformed output gradient).
//
// Threads split the images into ranges as conv.cpp does; each range runs chunks of images
// through single-threaded GEMMs, so ranges never share output memory (the weight gradient's
// ranges each sum their own S, added up at the end).
#include "kernels/cpu/conv_winograd.h"

#include <algorithm>
#include <cstdint>
#include <mutex>
#include <utility>
#include <vector>

#include "kernels/cpu/conv_common.h"
#include "kernels/gemm.h"
#include "kernels/parallel.h"

namespace ortmodule {

using conv_detail::balanced_chunk;
using conv_detail::Scratch;

namespace {

// Transformed-input (and -output) elements per chunk of images: 1 MiB of float, to stay in L2.
constexpr int64_t kChunkElems = 1 << 18;

// Elements between consecutive tile elements' blocks beyond their size (see the forward).
constexpr int64_t kStreamPad = 64;

// Tiles a chunk of the weight gradient's GEMMs sums over at least (see its chunk size).
constexpr int64_t kMinChunkTiles = 64;

// The tile grid of an output [outH, outW] and the zero-padded input plane it reads, [Hp, Wp]
// with the input at row pad_top, column pad_left.
struct Tiles {
  int64_t th, tw, per_image, Hp, Wp;
};

Tiles tiles_of(const Conv2dParams& p) {
  Tiles t;
  t.th = (p.outH + 1) / 2;
  t.tw = (p.outW + 1) / 2;
  t.per_image = t.th * t.tw;
  t.Hp = 2 * t.th + 2;
  t.Wp = 2 * t.tw + 2;
  return t;
}

// w: [M, C, 3, 3] -> U: [16, M, C], U[e][m][c] = (G g G^T)[e] for g = w[m, c], where
// G = [[1, 0, 0], [1/2, 1/2, 1/2], [1/2, -1/2, 1/2], [0, 0, 1]].
template <typename T>
void transform_weights(int64_t M, int64_t C, const T* w, T* U) {
  parallel_for(0, M, std::max<int64_t>(1, 4096 / std::max<int64_t>(1, C)),
               [&](int64_t m0, int64_t m1) {
                 for (int64_t m = m0; m < m1; ++m) {
                   for (int64_t c = 0; c < C; ++c) {
                     const T* g = w + (m * C + c) * 9;
                     T gg[4][3];  // G g
                     for (int j = 0; j < 3; ++j) {
                       gg[0][j] = g[j];
                       gg[1][j] = (g[j] + g[3 + j] + g[6 + j]) * T(0.5);
                       gg[2][j] = (g[j] - g[3 + j] + g[6 + j]) * T(0.5);
                       gg[3][j] = g[6 + j];
                     }
                     for (int i = 0; i < 4; ++i) {
                       const T u[4] = {gg[i][0], (gg[i][0] + gg[i][1] + gg[i][2]) * T(0.5),
                                       (gg[i][0] - gg[i][1] + gg[i][2]) * T(0.5), gg[i][2]};
                       for (int j = 0; j < 4; ++j) U[((i * 4 + j) * M + m) * C + c] = u[j];
                     }
                   }
                 }
               });
}

// One image x: [C, H, W] -> columns [t0, t0 + per_image) of V: [16, C, ld] with element e at
// V + e * es, where V[e][c][t0 + ty * tw + tx] = (B^T d B)[e] for the tile d at padded row
// 2 ty, column 2 tx, B^T = [[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]].
// B^T combines rows (a loop along the row), B columns (a loop over tiles with stride-2
// loads): both run over contiguous memory, so the compiler vectorises them.
// plane: [Hp, Wp] and rows: [4, Wp] scratch.
template <typename T>
void transform_input(const Conv2dParams& p, const Tiles& t, const T* x, T* V, int64_t ld,
                     int64_t es, int64_t t0, T* plane, T* rows) {
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
      T* v = V + c * ld + t0 + ty * t.tw;
      for (int i = 0; i < 4; ++i) {
        const T* r = rows + i * Wp;
        T *v0 = v + (i * 4) * es, *v1 = v0 + es, *v2 = v1 + es, *v3 = v2 + es;
        for (int64_t tx = 0; tx < t.tw; ++tx) {
          const T r0 = r[2 * tx], r1 = r[2 * tx + 1], r2 = r[2 * tx + 2], r3 = r[2 * tx + 3];
          v0[tx] = r0 - r2;
          v1[tx] = r1 + r2;
          v2[tx] = r2 - r1;
          v3[tx] = r1 - r3;
        }
      }
    }
  }
}

// Columns [t0, t0 + per_image) of Mo: [16, M, ld] (element e at Mo + e * es) -> one image
// y: [M, outH, outW] (+ bias): Y = A^T m A with A^T = [[1, 1, 1, 0], [0, 1, -1, -1]], clipped
// at the bottom/right edges. a: [2, 4, tw] scratch.
template <typename T>
void transform_output(const Conv2dParams& p, const Tiles& t, const T* Mo, int64_t ld, int64_t es,
                      int64_t t0, const T* bias, T* y, T* a) {
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
// loads over tiles). plane: [2 th, 2 tw] and rows: [4, 2 tw] scratch.
template <typename T>
void transform_output_gradient(const Conv2dParams& p, const Tiles& t, const T* dy, T* D, int64_t ld,
                               int64_t es, int64_t t0, T* plane, T* rows) {
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

}  // namespace

bool conv2d_winograd_applies(const Conv2dParams& p) {
  const int64_t pad_bottom = p.outH + 2 - p.H - p.pad_top;
  const int64_t pad_right = p.outW + 2 - p.W - p.pad_left;
  const bool shape = p.kH == 3 && p.kW == 3 && p.stride_h == 1 && p.stride_w == 1 && p.dil_h == 1 &&
                     p.dil_w == 1 && p.group == 1;
  // Pads of 0..2 on every side keep the transposed convolution of the input gradient (pads
  // 2 - pad) a convolution with non-negative pads. The transforms cost more than the GEMMs
  // save for few channels or small images (measured, one thread: ResNet's 4x4 outputs with
  // 256 channels take 1.8x the time of im2col + GEMM, its 8x8 ones with 128 channels 0.85x,
  // 16x16 with 64 channels 0.7x). The weight gradient takes the same rule: it won at every
  // eligible shape measured (one thread, dw alone against im2col + GEMM: ResNet's 16x16 with
  // 64 channels 0.67x, 8x8 with 128 channels 0.65x, 8x8 with 512 channels 0.63x, batch 2 of
  // 8x8 with 16 channels 0.86x, one 32x32 image with 64 channels 0.60x).
  const auto pad_ok = [](int64_t pad) { return pad >= 0 && pad <= 2; };
  return shape && pad_ok(p.pad_top) && pad_ok(p.pad_left) && pad_ok(pad_bottom) &&
         pad_ok(pad_right) && p.C >= 16 && p.M >= 16 && p.outH >= 8 && p.outW >= 8 && p.H >= 8 &&
         p.W >= 8;
}

// x: [N, C, H, W], w: [M, C, 3, 3], bias: [M] or null -> y: [N, M, outH, outW]
template <typename T>
void conv2d_winograd_forward(const Conv2dParams& p, const T* x, const T* w, const T* bias, T* y) {
  const Tiles t = tiles_of(p);
  std::vector<T> U(static_cast<size_t>(16 * p.M * p.C));
  transform_weights(p.M, p.C, w, U.data());
  const int64_t per_image = 16 * std::max(p.C, p.M) * t.per_image;
  const int64_t chunk = std::max<int64_t>(1, std::min(p.N, kChunkElems / per_image));
  parallel_for(0, p.N, 1, [&](int64_t n_begin, int64_t n_end) {
    const int64_t max_b = balanced_chunk(chunk, n_end - n_begin);
    const int64_t max_ld = max_b * t.per_image;
    // Element strides padded off powers of two, so the 16 element streams of a transform do
    // not all map to the same cache sets.
    const int64_t v_es = p.C * max_ld + kStreamPad, m_es = p.M * max_ld + kStreamPad;
    Scratch<T> V(16 * v_es), Mo(16 * m_es), plane(t.Hp * t.Wp), rows(4 * t.Wp), a(8 * t.tw);
    for (int64_t n0 = n_begin; n0 < n_end; n0 += max_b) {
      const int64_t B = std::min(max_b, n_end - n0), ld = B * t.per_image;
      for (int64_t b = 0; b < B; ++b) {
        transform_input(p, t, x + (n0 + b) * p.C * p.H * p.W, V.data(), ld, v_es, b * t.per_image,
                        plane.data(), rows.data());
      }
      for (int64_t e = 0; e < 16; ++e) {
        gemm<T>(false, false, p.M, ld, p.C, T(1), U.data() + e * p.M * p.C, p.C,
                V.data() + e * v_es, ld, T(0), Mo.data() + e * m_es, ld);
      }
      for (int64_t b = 0; b < B; ++b) {
        transform_output(p, t, Mo.data(), ld, m_es, b * t.per_image, bias,
                         y + (n0 + b) * p.M * p.outH * p.outW, a.data());
      }
    }
  });
}

// dy: [N, M, outH, outW] -> dx: [N, C, H, W]
template <typename T>
void conv2d_winograd_backward_input(const Conv2dParams& p, const T* w, const T* dy, T* dx) {
  // dx[c, h, w] = sum over m, kh, kw of dy[m, h + pad_top - kh, w + pad_left - kw] w[m, c, kh, kw]
  // is the convolution of dy (pads 2 - pad) with wt[c, m, kh, kw] = w[m, c, 2 - kh, 2 - kw].
  std::vector<T> wt(static_cast<size_t>(p.C * p.M * 9));
  for (int64_t m = 0; m < p.M; ++m)
    for (int64_t c = 0; c < p.C; ++c)
      for (int k = 0; k < 9; ++k) wt[(c * p.M + m) * 9 + k] = w[(m * p.C + c) * 9 + 8 - k];
  Conv2dParams q = p;
  q.C = p.M;
  q.M = p.C;
  q.H = p.outH;
  q.W = p.outW;
  q.outH = p.H;
  q.outW = p.W;
  q.pad_top = 2 - p.pad_top;
  q.pad_left = 2 - p.pad_left;
  conv2d_winograd_forward<T>(q, dy, wt.data(), nullptr, dx);
}

// x: [N, C, H, W], dy: [N, M, outH, outW] -> dw: [M, C, 3, 3] (overwritten)
//   dw[m, c] = G^T [ sum over tiles (A dY A^T)[m] .* (B^T d B)[c] ] G
// The sum is 16 GEMMs per chunk, S[e] [M, C] += D[e] [M, T] * V[e]^T [T, C]. Each thread's
// range of images keeps its own S; the ranges' S are summed in range order (so the result does
// not depend on thread timing) before the 4x4 -> 3x3 transform.
template <typename T>
void conv2d_winograd_backward_weight(const Conv2dParams& p, const T* x, const T* dy, T* dw) {
  const Tiles t = tiles_of(p);
  const int64_t MC = p.M * p.C;
  // Both transformed buffers, V and D, count against the chunk's budget (sized on one of them,
  // as the forward, ResNet's 16x16 layer ran 1.5x slower), but a chunk has kMinChunkTiles tiles
  // at least: every chunk reads and writes all of S, [16, M, C], which a GEMM over 16 tiles (one
  // 8x8 image) with 512 channels does for 16 multiply-adds per element (3.3x slower than
  // im2col + GEMM; 0.64x with 64 tiles).
  const int64_t per_image = 16 * (p.C + p.M) * t.per_image;
  const int64_t by_tiles = (kMinChunkTiles + t.per_image - 1) / t.per_image;
  const int64_t chunk =
      std::max<int64_t>(1, std::min(p.N, std::max(by_tiles, kChunkElems / per_image)));
  struct Partial {
    int64_t n_begin;
    Scratch<T> S;  // [16, M, C], written by the range's first chunk (beta 0)
  };
  std::vector<Partial> partials;
  std::mutex partials_mutex;
  parallel_for(0, p.N, 1, [&](int64_t n_begin, int64_t n_end) {
    const int64_t max_b = balanced_chunk(chunk, n_end - n_begin);
    const int64_t max_ld = max_b * t.per_image;
    const int64_t v_es = p.C * max_ld + kStreamPad, d_es = p.M * max_ld + kStreamPad;
    Scratch<T> V(16 * v_es), D(16 * d_es), plane(t.Hp * t.Wp), rows(4 * t.Wp);
    Partial part{n_begin, Scratch<T>(16 * MC)};
    for (int64_t n0 = n_begin; n0 < n_end; n0 += max_b) {
      const int64_t B = std::min(max_b, n_end - n0), ld = B * t.per_image;
      for (int64_t b = 0; b < B; ++b) {
        transform_input(p, t, x + (n0 + b) * p.C * p.H * p.W, V.data(), ld, v_es, b * t.per_image,
                        plane.data(), rows.data());
        transform_output_gradient(p, t, dy + (n0 + b) * p.M * p.outH * p.outW, D.data(), ld, d_es,
                                  b * t.per_image, plane.data(), rows.data());
      }
      gemm_batched<T>(false, true, 16, p.M, p.C, ld, T(1), D.data(), ld, d_es, V.data(), ld, v_es,
                      n0 == n_begin ? T(0) : T(1), part.S.data(), p.C, MC);
    }
    std::lock_guard<std::mutex> lock(partials_mutex);
    partials.push_back(std::move(part));
  });
  std::sort(partials.begin(), partials.end(),
            [](const Partial& a, const Partial& b) { return a.n_begin < b.n_begin; });
  parallel_for(0, p.M, std::max<int64_t>(1, 4096 / std::max<int64_t>(1, p.C)),
               [&](int64_t m0, int64_t m1) {
                 Scratch<T> S(16 * p.C);  // row m of the summed S, [16, C]
                 for (int64_t m = m0; m < m1; ++m) {
                   for (int64_t e = 0; e < 16; ++e) {
                     T* dst = S.data() + e * p.C;
                     std::fill(dst, dst + p.C, T(0));
                     for (Partial& part : partials) {
                       const T* src = part.S.data() + e * MC + m * p.C;
                       for (int64_t c = 0; c < p.C; ++c) dst[c] += src[c];
                     }
                   }
                   transform_weight_gradient(p.C, S.data(), dw + m * p.C * 9);
                 }
               });
}

template void conv2d_winograd_forward<float>(const Conv2dParams&, const float*, const float*,
                                             const float*, float*);
template void conv2d_winograd_forward<double>(const Conv2dParams&, const double*, const double*,
                                              const double*, double*);
template void conv2d_winograd_backward_input<float>(const Conv2dParams&, const float*, const float*,
                                                    float*);
template void conv2d_winograd_backward_input<double>(const Conv2dParams&, const double*,
                                                     const double*, double*);
template void conv2d_winograd_backward_weight<float>(const Conv2dParams&, const float*,
                                                     const float*, float*);
template void conv2d_winograd_backward_weight<double>(const Conv2dParams&, const double*,
                                                      const double*, double*);

}  // namespace ortmodule
