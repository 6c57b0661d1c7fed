// Winograd F(2x2, 3x3) (Lavin & Gray, "Fast Algorithms for Convolutional Neural Networks"):
//   Y = A^T [ (G g G^T) .* (B^T d B) ] A
// for each 4x4 input tile d (stride 2 over the padded input) and 3x3 filter g, giving a 2x2
// output tile. The 16 element-wise products, summed over input channels, are 16 GEMMs:
//   M[e] [M, T] = U[e] [M, C] * V[e] [C, T]     (e = tile element, T = tiles of a chunk)
// with U = the transformed weights (once per call) and V = the transformed input tiles.
//
// Threads split the images into ranges as conv.cpp does; each range runs chunks of images
// through single-threaded GEMMs, so ranges never share output memory.
#include "kernels/cpu/conv_winograd.h"

#include <algorithm>
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
  // 16x16 with 64 channels 0.7x).
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

template void conv2d_winograd_forward<float>(const Conv2dParams&, const float*, const float*,
                                             const float*, float*);
template void conv2d_winograd_forward<double>(const Conv2dParams&, const double*, const double*,
                                              const double*, double*);
template void conv2d_winograd_backward_input<float>(const Conv2dParams&, const float*, const float*,
                                                    float*);
template void conv2d_winograd_backward_input<double>(const Conv2dParams&, const double*,
                                                     const double*, double*);

}  // namespace ortmodule
