// im2col and col2im of the 2-D convolutions (conv.cpp): the column buffer of a chunk of images,
// and the scatter of its gradient back onto the images.
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "kernels/cpu/conv.h"
#include "kernels/cpu/conv_common.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/parallel.h"

namespace ortmodule {
namespace conv_detail {

// Column-buffer elements per chunk of images (1 MiB of float): large enough to amortise the
// gemm call overhead, small enough to stay in L2.
constexpr int64_t kChunkColElems = 1 << 18;

// Columns (images * output pixels) a chunk's gemm gets at least, whatever its column buffer:
// MKL runs a [512, 4608] x [4608, 8] product ~10x slower per flop than one 32 columns wide.
constexpr int64_t kMinChunkCols = 64;

// Elements of column-buffer work per parallel chunk of a single-image im2col; below this
// threads cost more than they save.
constexpr int64_t kColGrainElems = 1 << 15;

// A 1x1 kernel that maps each input pixel to the same output pixel makes one image's column
// buffer identical to its input, so a single-image chunk skips the copy.
inline bool is_pointwise(const Conv2dParams& p) {
  return p.kH == 1 && p.kW == 1 && p.stride_h == 1 && p.stride_w == 1 && p.pad_top == 0 &&
         p.pad_left == 0 && p.outH == p.H && p.outW == p.W;
}

// Shapes derived once per call. The column buffer of a chunk of B images is [K, B * P]: image b
// occupies columns [b * P, (b + 1) * P) of every row.
//
// im2col and col2im work on a zero-padded copy of each image plane, [Hp, Wp] with the input at
// row pad_top, column pad_left, large enough for every tap of every output. Their copy loops
// then have no bounds tests and no short zero-fills, which dominate for small images (a 4x4
// output row is 4 elements). Without padding the plane is the input itself.
//
// Small outputs (at most kTableMaxP pixels) skip the padded copy: im2col and col2im look each
// tap's input pixel up in a table, [kH * kW, P] offsets into the image plane (-1 in the
// padding). Their rows are a few elements (2 for ResNet's 2x2 layer), where per-row loops and
// the padded copy cost more than the lookups.
struct ConvDims {
  int64_t Cg, Mg, K, P, HW;
  int64_t Hp, Wp;
  bool padded;
  int64_t chunk;  // images per gemm
  bool pointwise;
  std::vector<int32_t> taps;  // the small-output table; empty for larger outputs
};

constexpr int64_t kTableMaxP = 64;

inline ConvDims conv_dims(const Conv2dParams& p) {
  ConvDims d;
  d.Cg = p.C / p.group;
  d.Mg = p.M / p.group;
  d.K = d.Cg * p.kH * p.kW;
  d.P = p.outH * p.outW;
  d.HW = p.H * p.W;
  // One past the last row / column any tap reads, in padded coordinates.
  const int64_t rows = (p.outH - 1) * p.stride_h + (p.kH - 1) * p.dil_h + 1;
  const int64_t cols = (p.outW - 1) * p.stride_w + (p.kW - 1) * p.dil_w + 1;
  d.Hp = std::max(p.H + p.pad_top, rows);
  d.Wp = std::max(p.W + p.pad_left, cols);
  d.padded = d.Hp != p.H || d.Wp != p.W;
  const int64_t by_buffer = kChunkColElems / std::max<int64_t>(1, d.K * d.P);
  const int64_t by_width = (kMinChunkCols + d.P - 1) / std::max<int64_t>(1, d.P);
  d.chunk = std::max<int64_t>(1, std::min(p.N, std::max(by_buffer, by_width)));
  d.pointwise = is_pointwise(p);
  if (d.P <= kTableMaxP) {
    d.taps.reserve(static_cast<size_t>(p.kH * p.kW * d.P));
    for (int64_t kh = 0; kh < p.kH; ++kh) {
      for (int64_t kw = 0; kw < p.kW; ++kw) {
        for (int64_t oh = 0; oh < p.outH; ++oh) {
          for (int64_t ow = 0; ow < p.outW; ++ow) {
            const int64_t ih = oh * p.stride_h - p.pad_top + kh * p.dil_h;
            const int64_t iw = ow * p.stride_w - p.pad_left + kw * p.dil_w;
            const bool inside = ih >= 0 && ih < p.H && iw >= 0 && iw < p.W;
            d.taps.push_back(inside ? static_cast<int32_t>(ih * p.W + iw) : -1);
          }
        }
      }
    }
  }
  return d;
}

// x: [Cg, H, W] -> xp: [Cg, Hp, Wp], zero outside the input.
template <typename T>
void pad_planes(const Conv2dParams& p, const ConvDims& d, const T* x, T* xp) {
  for (int64_t c = 0; c < d.Cg; ++c) {
    T* plane = xp + c * d.Hp * d.Wp;
    std::fill(plane, plane + p.pad_top * d.Wp, T(0));
    for (int64_t h = 0; h < p.H; ++h) {
      T* row = plane + (p.pad_top + h) * d.Wp;
      std::fill(row, row + p.pad_left, T(0));
      std::copy(x + (c * p.H + h) * p.W, x + (c * p.H + h + 1) * p.W, row + p.pad_left);
      std::fill(row + p.pad_left + p.W, row + d.Wp, T(0));
    }
    std::fill(plane + (p.pad_top + p.H) * d.Wp, plane + d.Hp * d.Wp, T(0));
  }
}

// Calls fn(col_row, plane_at, oh) for every output row oh of every kernel tap of channels
// [c0, c1): col_row = (c * kH + kh) * kW + kw is the column-buffer row, and output (oh, ow)
// of that tap reads padded-plane element plane_at + ow * stride_w.
template <typename Fn>
void for_each_tap_row(const Conv2dParams& p, const ConvDims& d, int64_t c0, int64_t c1,
                      const Fn& fn) {
  for (int64_t c = c0; c < c1; ++c) {
    for (int64_t kh = 0; kh < p.kH; ++kh) {
      for (int64_t kw = 0; kw < p.kW; ++kw) {
        const int64_t row = (c * p.kH + kh) * p.kW + kw;
        const int64_t tap_at = (c * d.Hp + kh * p.dil_h) * d.Wp + kw * p.dil_w;
        for (int64_t oh = 0; oh < p.outH; ++oh) fn(row, tap_at + oh * p.stride_h * d.Wp, oh);
      }
    }
  }
}

// Channels per parallel chunk of im2col / col2im (only parallel when not already nested).
inline int64_t channel_grain(const Conv2dParams& p) {
  const int64_t per_channel = std::max<int64_t>(1, p.kH * p.kW * p.outH * p.outW);
  return std::max<int64_t>(1, kColGrainElems / per_channel);
}

// xp: [Cg, Hp, Wp] -> col: [Cg * kH * kW, outH * outW] with row stride ld.
template <typename T>
void im2col(const Conv2dParams& p, const ConvDims& d, const T* xp, T* col, int64_t ld) {
  const int64_t outW = p.outW, sw = p.stride_w;
  const auto copy_stride2 = vec_kernels().copy_stride2;
  auto copy_row = [&](int64_t row, int64_t at, int64_t oh) {
    const T* in = xp + at;
    T* out = col + row * ld + oh * outW;
    if constexpr (std::is_same_v<T, float>) {
      if (sw == 2 && outW >= 16 && copy_stride2 != nullptr) return copy_stride2(in, outW, out);
    }
    if (sw == 1) {
      for (int64_t ow = 0; ow < outW; ++ow) out[ow] = in[ow];
    } else {
      for (int64_t ow = 0; ow < outW; ++ow) out[ow] = in[ow * sw];
    }
  };
  parallel_for(0, d.Cg, channel_grain(p),
               [&](int64_t c0, int64_t c1) { for_each_tap_row(p, d, c0, c1, copy_row); });
}

// col: [Cg * kH * kW, outH * outW] with row stride ld -> xp: [Cg, Hp, Wp], accumulating (xp
// must be initialised). Every row of channel c lands in plane c only, so channel chunks never
// write the same memory.
template <typename T>
void col2im_add(const Conv2dParams& p, const ConvDims& d, const T* col, int64_t ld, T* xp) {
  const int64_t outW = p.outW, sw = p.stride_w;
  auto add_row = [&](int64_t row, int64_t at, int64_t oh) {
    const T* in = col + row * ld + oh * outW;
    T* out = xp + at;
    if (sw == 1) {
      for (int64_t ow = 0; ow < outW; ++ow) out[ow] += in[ow];
    } else {
      for (int64_t ow = 0; ow < outW; ++ow) out[ow * sw] += in[ow];
    }
  };
  parallel_for(0, d.Cg, channel_grain(p),
               [&](int64_t c0, int64_t c1) { for_each_tap_row(p, d, c0, c1, add_row); });
}

// Per-thread scratch: the column buffer and, when the input needs padding, one padded image.
template <typename T>
struct ConvScratch {
  Scratch<T> col, plane;
};

template <typename T>
ConvScratch<T> make_scratch(const ConvDims& d, int64_t max_b, bool needs_columns) {
  ConvScratch<T> s;
  if (!needs_columns) return s;
  if (!(d.pointwise && max_b == 1)) s.col = Scratch<T>(d.K * max_b * d.P);
  if (d.padded) s.plane = Scratch<T>(d.Cg * d.Hp * d.Wp);
  return s;
}

// One image x: [Cg, H, W] -> col: [K, P] with row stride ld, through the small-output table or
// the padded plane (s->plane).
template <typename T>
void im2col_image(const Conv2dParams& p, const ConvDims& d, const T* x, T* col, int64_t ld,
                  ConvScratch<T>* s) {
  if (!d.taps.empty()) {
    const int64_t taps = p.kH * p.kW;
    parallel_for(0, d.Cg, channel_grain(p), [&](int64_t c0, int64_t c1) {
      for (int64_t c = c0; c < c1; ++c) {
        const T* src = x + c * d.HW;
        for (int64_t t = 0; t < taps; ++t) {
          const int32_t* at = d.taps.data() + t * d.P;
          T* dst = col + (c * taps + t) * ld;
          for (int64_t q = 0; q < d.P; ++q) dst[q] = at[q] >= 0 ? src[at[q]] : T(0);
        }
      }
    });
    return;
  }
  if (d.padded) {
    pad_planes(p, d, x, s->plane.data());
    x = s->plane.data();
  }
  im2col(p, d, x, col, ld);
}

// The column buffer of group g of images [n0, n0 + B): x itself for a single pointwise image,
// otherwise im2col'ed into s->col.
template <typename T>
const T* columns(const Conv2dParams& p, const ConvDims& d, const T* x, int64_t n0, int64_t B,
                 int64_t g, ConvScratch<T>* s) {
  const T* xg = x + (n0 * p.C + g * d.Cg) * d.HW;
  if (B == 1 && d.pointwise) return xg;
  for (int64_t b = 0; b < B; ++b) {
    im2col_image(p, d, xg + b * p.C * d.HW, s->col.data() + b * d.P, B * d.P, s);
  }
  return s->col.data();
}

// dx of group g of one image from its column gradient dcol (row stride ld): dx_g is
// overwritten.
template <typename T>
void col2im(const Conv2dParams& p, const ConvDims& d, const T* dcol, int64_t ld, T* dx_g,
            ConvScratch<T>* s) {
  if (!d.taps.empty()) {  // taps in order, as col2im_add sums them
    const int64_t taps = p.kH * p.kW;
    std::fill(dx_g, dx_g + d.Cg * d.HW, T(0));
    parallel_for(0, d.Cg, channel_grain(p), [&](int64_t c0, int64_t c1) {
      for (int64_t c = c0; c < c1; ++c) {
        T* dst = dx_g + c * d.HW;
        for (int64_t t = 0; t < taps; ++t) {
          const int32_t* at = d.taps.data() + t * d.P;
          const T* src = dcol + (c * taps + t) * ld;
          for (int64_t q = 0; q < d.P; ++q)
            if (at[q] >= 0) dst[at[q]] += src[q];
        }
      }
    });
    return;
  }
  if (!d.padded) {
    std::fill(dx_g, dx_g + d.Cg * d.HW, T(0));
    col2im_add(p, d, dcol, ld, dx_g);
    return;
  }
  T* plane = s->plane.data();
  std::fill(plane, plane + d.Cg * d.Hp * d.Wp, T(0));
  col2im_add(p, d, dcol, ld, plane);
  for (int64_t c = 0; c < d.Cg; ++c) {
    for (int64_t h = 0; h < p.H; ++h) {
      const T* row = plane + (c * d.Hp + p.pad_top + h) * d.Wp + p.pad_left;
      std::copy(row, row + p.W, dx_g + (c * p.H + h) * p.W);
    }
  }
}

}  // namespace conv_detail
}  // namespace ortmodule
