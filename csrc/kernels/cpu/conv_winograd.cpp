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
// ranges each sum their own S, added up at the end). Where float GEMMs run on the packed
// micro-kernels (gemm_uses_packed_kernels), the forward and the input gradient transform U
// and V straight into the micro-kernel's packed panels and call it themselves.
// The transforms are in conv_winograd_transforms.h.
#include "kernels/cpu/conv_winograd.h"

#include <algorithm>
#include <cstdint>
#include <mutex>
#include <type_traits>
#include <utility>
#include <vector>

#include "kernels/cpu/conv_common.h"
#include "kernels/cpu/conv_winograd_transforms.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/sgemm.h"
#include "kernels/gemm.h"
#include "kernels/parallel.h"

namespace ortmodule {

using conv_detail::balanced_chunk;
using conv_detail::Scratch;
using winograd_detail::PanelColumns;
using winograd_detail::PlainColumns;
using winograd_detail::Tiles;
using winograd_detail::tiles_of;
using winograd_detail::transform_input;
using winograd_detail::transform_output;
using winograd_detail::transform_output_gradient;
using winograd_detail::transform_weight_gradient;
using winograd_detail::transform_weights;
using winograd_detail::transform_weights_packed;

namespace {

// Transformed-input (and -output) elements per chunk of images: 1 MiB of float, to stay in L2.
constexpr int64_t kChunkElems = 1 << 18;

// Elements between consecutive tile elements' blocks beyond their size (see the forward).
constexpr int64_t kStreamPad = 64;

// Tiles a chunk of the weight gradient's GEMMs sums over at least (see its chunk size).
constexpr int64_t kMinChunkTiles = 64;

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
  // 8x8 with 16 channels 0.86x, one 32x32 image with 64 channels 0.60x). With the vector
  // transforms (AVX-512), 4x4 outputs with 256 channels are faster at best (2 threads: 0.64
  // ms against 1.00 forward) but slower in the median of alternating calls (1.08 against
  // 0.92 forward, 2.55 against 1.98 backward): their transformed weights, 16 x 256 x 256
  // floats, outweigh the images. So 8x8 stays the bound.
  constexpr int64_t min_side = 8;
  const auto pad_ok = [](int64_t pad) { return pad >= 0 && pad <= 2; };
  return shape && pad_ok(p.pad_top) && pad_ok(p.pad_left) && pad_ok(pad_bottom) &&
         pad_ok(pad_right) && p.C >= 16 && p.M >= 16 && p.outH >= min_side && p.outW >= min_side &&
         p.H >= min_side && p.W >= min_side;
}

namespace {

// conv2d_winograd_forward for float on the packed GEMM's micro-kernel: U is transformed once
// into packed A panels and the input transform writes packed B panels, so the 16 products of a
// chunk run the micro-kernel on them directly, with no per-product packing. Filters g(m, c) =
// w + m * sm + c * sc, flipped when `flip` (the input gradient's transposed convolution reads
// w in place).
void winograd_forward_packed(const Conv2dParams& p, const float* x, const float* w, int64_t sm,
                             int64_t sc, bool flip, const float* bias, float* y) {
  const VecKernels& vk = vec_kernels();
  const int MR = vk.gemm_mr;
  const int64_t NR = vk.gemm_nr;
  const Tiles t = tiles_of(p);
  const int64_t m_panels = (p.M + MR - 1) / MR, ue = m_panels * MR * p.C;
  Scratch<float> U(16 * ue);
  if (flip) {
    transform_weights_packed<true>(p.M, p.C, w, sm, sc, MR, U.data(), ue);
  } else {
    transform_weights_packed<false>(p.M, p.C, w, sm, sc, MR, U.data(), ue);
  }
  const int64_t per_image = 16 * std::max(p.C, p.M) * t.per_image;
  const int64_t chunk = std::max<int64_t>(1, std::min(p.N, kChunkElems / per_image));
  parallel_for(0, p.N, 1, [&](int64_t n_begin, int64_t n_end) {
    const int64_t max_b = balanced_chunk(chunk, n_end - n_begin);
    const int64_t max_ld = max_b * t.per_image, max_panels = (max_ld + NR - 1) / NR;
    const int64_t v_es = max_panels * NR * p.C + kStreamPad, m_es = p.M * max_ld + kStreamPad;
    Scratch<float> V(16 * v_es), Mo(16 * m_es), plane(winograd_detail::plane_scratch(t)),
        rows(4 * t.Wp), a(winograd_detail::plane_scratch(t));
    const PanelColumns cols{V.data(), p.C, NR};
    for (int64_t n0 = n_begin; n0 < n_end; n0 += max_b) {
      const int64_t B = std::min(max_b, n_end - n0), ld = B * t.per_image;
      const int64_t panels = (ld + NR - 1) / NR, tail = ld - (panels - 1) * NR;
      for (int64_t b = 0; b < B; ++b) {
        transform_input(p, t, x + (n0 + b) * p.C * p.H * p.W, cols, v_es, b * t.per_image,
                        plane.data(), rows.data());
      }
      for (int64_t e = 0; tail < NR && e < 16; ++e) {  // the micro-kernel reads whole panels
        float* last = V.data() + e * v_es + (panels - 1) * p.C * NR;
        for (int64_t c = 0; c < p.C; ++c)
          std::fill(last + c * NR + tail, last + (c + 1) * NR, 0.0f);
      }
      for (int64_t e = 0; e < 16; ++e) {
        const float* Ue = U.data() + e * ue;
        const float* Ve = V.data() + e * v_es;
        float* Me = Mo.data() + e * m_es;
        for (int64_t np = 0; np < panels; ++np) {
          const int n = static_cast<int>(np + 1 < panels ? NR : tail);
          for (int64_t mp = 0; mp < m_panels; ++mp) {
            vk.gemm_tile(p.C, Ue + mp * p.C * MR, Ve + np * p.C * NR, Me + mp * MR * ld + np * NR,
                         ld, static_cast<int>(std::min<int64_t>(MR, p.M - mp * MR)), n, 1.0f, 0.0f,
                         true);
          }
        }
      }
      for (int64_t b = 0; b < B; ++b) {
        transform_output(p, t, Mo.data(), ld, m_es, b * t.per_image, bias,
                         y + (n0 + b) * p.M * p.outH * p.outW, a.data());
      }
    }
  });
}

}  // namespace

// x: [N, C, H, W], w: [M, C, 3, 3], bias: [M] or null -> y: [N, M, outH, outW]
template <typename T>
void conv2d_winograd_forward(const Conv2dParams& p, const T* x, const T* w, const T* bias, T* y) {
  if constexpr (std::is_same_v<T, float>) {
    if (gemm_uses_packed_kernels()) {
      winograd_forward_packed(p, x, w, p.C * 9, 9, false, bias, y);
      return;
    }
  }
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
    Scratch<T> V(16 * v_es), Mo(16 * m_es), plane(winograd_detail::plane_scratch(t)),
        rows(4 * t.Wp), a(winograd_detail::plane_scratch(t));
    for (int64_t n0 = n_begin; n0 < n_end; n0 += max_b) {
      const int64_t B = std::min(max_b, n_end - n0), ld = B * t.per_image;
      for (int64_t b = 0; b < B; ++b) {
        transform_input(p, t, x + (n0 + b) * p.C * p.H * p.W, PlainColumns<T>{V.data(), ld}, v_es,
                        b * t.per_image, plane.data(), rows.data());
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
  Conv2dParams q = p;
  q.C = p.M;
  q.M = p.C;
  q.H = p.outH;
  q.W = p.outW;
  q.outH = p.H;
  q.outW = p.W;
  q.pad_top = 2 - p.pad_top;
  q.pad_left = 2 - p.pad_left;
  if constexpr (std::is_same_v<T, float>) {
    if (gemm_uses_packed_kernels()) {  // wt's filter (c, m) is w's (m, c) flipped, read in place
      winograd_forward_packed(q, dy, w, 9, p.C * 9, true, nullptr, dx);
      return;
    }
  }
  std::vector<T> wt(static_cast<size_t>(p.C * p.M * 9));
  for (int64_t m = 0; m < p.M; ++m)
    for (int64_t c = 0; c < p.C; ++c)
      for (int k = 0; k < 9; ++k) wt[(c * p.M + m) * 9 + k] = w[(m * p.C + c) * 9 + 8 - k];
  conv2d_winograd_forward<T>(q, dy, wt.data(), nullptr, dx);
}

namespace {

// The weight gradient's 16 products, one per entry e of the 4x4 tile: S_e = D_e V_e^T +
// beta S_e (D_e [M, ld], V_e [C, ld], S_e [M, C], the entries d_es, v_es and MC apart); on the
// micro-kernel wherever the ISA has one, even where gemm() is the BLAS's.
template <typename T>
void weight_gradient_products(int64_t M, int64_t C, int64_t ld, const T* D, int64_t d_es,
                              const T* V, int64_t v_es, T beta, T* S, int64_t MC) {
  if constexpr (std::is_same_v<T, float>) {
    if (gemm_uses_packed_kernels()) {
      for (int64_t e = 0; e < 16; ++e)
        packed_sgemm(false, true, M, C, ld, 1.0f, D + e * d_es, ld, V + e * v_es, ld, beta,
                     S + e * MC, C);
      return;
    }
  }
  gemm_batched<T>(false, true, 16, M, C, ld, T(1), D, ld, d_es, V, ld, v_es, beta, S, C, MC);
}

}  // namespace

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
    Scratch<T> V(16 * v_es), D(16 * d_es), plane(winograd_detail::plane_scratch(t)), rows(4 * t.Wp);
    Partial part{n_begin, Scratch<T>(16 * MC)};
    for (int64_t n0 = n_begin; n0 < n_end; n0 += max_b) {
      const int64_t B = std::min(max_b, n_end - n0), ld = B * t.per_image;
      for (int64_t b = 0; b < B; ++b) {
        transform_input(p, t, x + (n0 + b) * p.C * p.H * p.W, PlainColumns<T>{V.data(), ld}, v_es,
                        b * t.per_image, plane.data(), rows.data());
        transform_output_gradient(p, t, dy + (n0 + b) * p.M * p.outH * p.outW, D.data(), ld, d_es,
                                  b * t.per_image, plane.data(), rows.data());
      }
      weight_gradient_products(p.M, p.C, ld, D.data(), d_es, V.data(), v_es,
                               n0 == n_begin ? T(0) : T(1), part.S.data(), MC);
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
