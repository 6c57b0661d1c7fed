// 2-D convolution as im2col + gemm per (image, group).
//
// Forward and dx run one image per parallel_for iteration, so each chunk owns its column buffer
// and its slice of y or dx. dw sums over images; rather than keeping per-thread partial weights
// it loops images serially and lets each gemm (multithreaded internally) accumulate with beta=1.
#include "kernels/cpu/conv.h"

#include <algorithm>
#include <vector>

#include "kernels/gemm.h"
#include "kernels/parallel.h"

namespace ortmodule {
namespace {

// Elements of column-buffer work per parallel chunk; below this threads cost more than they save.
constexpr int64_t kColGrainElems = 1 << 15;

// Output positions o in [lo, hi) for which the input position o * stride + offset lies in
// [0, size). Computed once per kernel tap so the copy loops carry no bounds checks.
struct OutRange {
  int64_t lo, hi;
};

OutRange valid_outputs(int64_t offset, int64_t stride, int64_t size, int64_t out) {
  int64_t lo = offset < 0 ? (-offset + stride - 1) / stride : 0;
  int64_t hi = size - offset <= 0 ? 0 : (size - offset + stride - 1) / stride;
  lo = std::min(lo, out);
  hi = std::max(lo, std::min(hi, out));
  return {lo, hi};
}

// A 1x1 kernel that maps each input pixel to the same output pixel makes the column buffer
// identical to the input, so the copy is skipped.
bool is_pointwise(const Conv2dParams& p) {
  return p.kH == 1 && p.kW == 1 && p.stride_h == 1 && p.stride_w == 1 && p.pad_top == 0 &&
         p.pad_left == 0 && p.outH == p.H && p.outW == p.W;
}

// Calls fn(c, row, oh, ih, ow_range, iw_offset) for every output row oh of every kernel tap of
// channels [c0, c1): row = (c * kH + kh) * kW + kw indexes the column buffer
// [Cg * kH * kW, outH * outW], ih is the input row read (-1 when it lies in the padding), and
// output column ow in ow_range reads input column ow * stride_w + iw_offset.
template <typename Fn>
void for_each_tap_row(const Conv2dParams& p, int64_t c0, int64_t c1, const Fn& fn) {
  for (int64_t c = c0; c < c1; ++c) {
    for (int64_t kh = 0; kh < p.kH; ++kh) {
      const OutRange rh = valid_outputs(kh * p.dil_h - p.pad_top, p.stride_h, p.H, p.outH);
      for (int64_t kw = 0; kw < p.kW; ++kw) {
        const int64_t row = (c * p.kH + kh) * p.kW + kw;
        const int64_t iw_offset = kw * p.dil_w - p.pad_left;
        const OutRange rw = valid_outputs(iw_offset, p.stride_w, p.W, p.outW);
        for (int64_t oh = 0; oh < p.outH; ++oh) {
          const bool inside = oh >= rh.lo && oh < rh.hi;
          const int64_t ih = inside ? oh * p.stride_h + kh * p.dil_h - p.pad_top : -1;
          fn(c, row, oh, ih, rw, iw_offset);
        }
      }
    }
  }
}

// Channels per parallel chunk of im2col / col2im.
int64_t channel_grain(const Conv2dParams& p) {
  const int64_t per_channel = std::max<int64_t>(1, p.kH * p.kW * p.outH * p.outW);
  return std::max<int64_t>(1, kColGrainElems / per_channel);
}

// x: [Cg, H, W] -> col: [Cg * kH * kW, outH * outW]; padding taps read as zero.
template <typename T>
void im2col(const Conv2dParams& p, int64_t Cg, const T* x, T* col) {
  const int64_t P = p.outH * p.outW;
  auto copy_row = [&](int64_t c, int64_t row, int64_t oh, int64_t ih, OutRange rw, int64_t off) {
    T* out = col + row * P + oh * p.outW;
    if (ih < 0) {
      std::fill(out, out + p.outW, T(0));
      return;
    }
    const T* in = x + (c * p.H + ih) * p.W;
    std::fill(out, out + rw.lo, T(0));
    for (int64_t ow = rw.lo; ow < rw.hi; ++ow) out[ow] = in[ow * p.stride_w + off];
    std::fill(out + rw.hi, out + p.outW, T(0));
  };
  parallel_for(0, Cg, channel_grain(p),
               [&](int64_t c0, int64_t c1) { for_each_tap_row(p, c0, c1, copy_row); });
}

// col: [Cg * kH * kW, outH * outW] -> x: [Cg, H, W], accumulating (x must be initialised).
// Chunks split channels, and every row of channel c lands in plane c only, so chunks never
// write the same memory.
template <typename T>
void col2im_add(const Conv2dParams& p, int64_t Cg, const T* col, T* x) {
  const int64_t P = p.outH * p.outW;
  auto add_row = [&](int64_t c, int64_t row, int64_t oh, int64_t ih, OutRange rw, int64_t off) {
    if (ih < 0) return;
    const T* in = col + row * P + oh * p.outW;
    T* out = x + (c * p.H + ih) * p.W;
    for (int64_t ow = rw.lo; ow < rw.hi; ++ow) out[ow * p.stride_w + off] += in[ow];
  };
  parallel_for(0, Cg, channel_grain(p),
               [&](int64_t c0, int64_t c1) { for_each_tap_row(p, c0, c1, add_row); });
}

}  // namespace

// x: [N, C, H, W], w: [M, C/group, kH, kW], bias: [M] or null -> y: [N, M, outH, outW]
template <typename T>
void conv2d_forward(const Conv2dParams& p, const T* x, const T* w, const T* bias, T* y) {
  const int64_t Cg = p.C / p.group, Mg = p.M / p.group;
  const int64_t K = Cg * p.kH * p.kW, P = p.outH * p.outW, HW = p.H * p.W;
  const bool pointwise = is_pointwise(p);
  parallel_for(0, p.N, 1, [&](int64_t n0, int64_t n1) {
    std::vector<T> col(pointwise ? 0 : K * P);
    for (int64_t n = n0; n < n1; ++n) {
      for (int64_t g = 0; g < p.group; ++g) {
        const T* xg = x + (n * p.C + g * Cg) * HW;
        const T* cols = xg;
        if (!pointwise) {
          im2col(p, Cg, xg, col.data());
          cols = col.data();
        }
        gemm<T>(false, false, Mg, P, K, T(1), w + g * Mg * K, K, cols, P, T(0),
                y + (n * p.M + g * Mg) * P, P);
      }
      if (bias == nullptr) continue;
      for (int64_t m = 0; m < p.M; ++m) {
        T* ym = y + (n * p.M + m) * P;
        for (int64_t q = 0; q < P; ++q) ym[q] += bias[m];
      }
    }
  });
}

// dy: [N, M, outH, outW] -> dx: [N, C, H, W], dw: [M, C/group, kH, kW], dbias: [M]
template <typename T>
void conv2d_backward(const Conv2dParams& p, const T* x, const T* w, const T* dy, T* dx, T* dw,
                     T* dbias) {
  const int64_t Cg = p.C / p.group, Mg = p.M / p.group;
  const int64_t K = Cg * p.kH * p.kW, P = p.outH * p.outW, HW = p.H * p.W;
  const bool pointwise = is_pointwise(p);

  if (dbias != nullptr) {
    parallel_for(0, p.M, 1, [&](int64_t m0, int64_t m1) {
      for (int64_t m = m0; m < m1; ++m) {
        double sum = 0;  // double so float images with many pixels keep PyTorch-level accuracy
        for (int64_t n = 0; n < p.N; ++n) {
          const T* dym = dy + (n * p.M + m) * P;
          for (int64_t q = 0; q < P; ++q) sum += dym[q];
        }
        dbias[m] = static_cast<T>(sum);
      }
    });
  }

  if (dx != nullptr) {
    // dcol = w_g^T [K, Mg] * dy_g [Mg, P], scattered back onto the input plane.
    parallel_for(0, p.N, 1, [&](int64_t n0, int64_t n1) {
      std::vector<T> col(pointwise ? 0 : K * P);
      for (int64_t n = n0; n < n1; ++n) {
        T* dxn = dx + n * p.C * HW;
        if (!pointwise) std::fill(dxn, dxn + p.C * HW, T(0));
        for (int64_t g = 0; g < p.group; ++g) {
          const T* wg = w + g * Mg * K;
          const T* dyg = dy + (n * p.M + g * Mg) * P;
          T* dxg = dxn + g * Cg * HW;
          if (pointwise) {
            gemm<T>(true, false, K, P, Mg, T(1), wg, K, dyg, P, T(0), dxg, P);
          } else {
            gemm<T>(true, false, K, P, Mg, T(1), wg, K, dyg, P, T(0), col.data(), P);
            col2im_add(p, Cg, col.data(), dxg);
          }
        }
      }
    });
  }

  if (dw != nullptr) {
    // dw_g [Mg, K] = sum_n dy_g [Mg, P] * col_n^T [P, K].
    if (p.N == 0) std::fill(dw, dw + p.M * K, T(0));
    std::vector<T> col(pointwise ? 0 : K * P);
    for (int64_t n = 0; n < p.N; ++n) {
      for (int64_t g = 0; g < p.group; ++g) {
        const T* xg = x + (n * p.C + g * Cg) * HW;
        const T* cols = xg;
        if (!pointwise) {
          im2col(p, Cg, xg, col.data());
          cols = col.data();
        }
        gemm<T>(false, true, Mg, K, P, T(1), dy + (n * p.M + g * Mg) * P, P, cols, P,
                n == 0 ? T(0) : T(1), dw + g * Mg * K, K);
      }
    }
  }
}

template void conv2d_forward<float>(const Conv2dParams&, const float*, const float*, const float*,
                                    float*);
template void conv2d_forward<double>(const Conv2dParams&, const double*, const double*,
                                     const double*, double*);
template void conv2d_backward<float>(const Conv2dParams&, const float*, const float*, const float*,
                                     float*, float*, float*);
template void conv2d_backward<double>(const Conv2dParams&, const double*, const double*,
                                      const double*, double*, double*, double*);

}  // namespace ortmodule
