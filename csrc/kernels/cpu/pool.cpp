// Max, average and global average pooling, parallel over (n, c) planes: every window reads and
// every gradient writes inside one plane, so chunks of planes never share output memory.
#include "kernels/cpu/pool.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include "kernels/cpu/cpu_isa.h"
#include "kernels/math/pool.h"
#include "kernels/parallel.h"

namespace ortmodule {
namespace {

// The start of a running maximum: -inf for floating types, the least value for integers
// (MaxPool accepts int8 and uint8). Only an empty window keeps it.
template <typename T>
T lowest_value() {
  if (std::numeric_limits<T>::has_infinity) return -std::numeric_limits<T>::infinity();
  return std::numeric_limits<T>::lowest();
}

// Elements touched per parallel chunk; below this threads cost more than they save.
constexpr int64_t kGrainElems = 1 << 14;

int64_t plane_grain(int64_t elems_per_plane) {
  return std::max<int64_t>(1, kGrainElems / std::max<int64_t>(1, elems_per_plane));
}

// The least position of an index outside its plane, shared by the threads of one call.
class FirstBadIndex {
 public:
  void note(int64_t position) {
    int64_t seen = first_.load(std::memory_order_relaxed);
    while ((seen < 0 || position < seen) &&
           !first_.compare_exchange_weak(seen, position, std::memory_order_relaxed)) {
    }
  }
  int64_t get() const { return first_.load(); }

 private:
  std::atomic<int64_t> first_{-1};
};

// dx[indices[o]] += dy[o] for the outputs o of one plane (P outputs, X inputs), which must
// name cells of that plane: -1 (an empty window) passes nothing, any other index outside the
// plane is noted in *bad and skipped. dx's plane must be initialised.
template <typename T>
void scatter_plane(int64_t plane, int64_t P, int64_t X, const T* dy, const int64_t* indices, T* dx,
                   FirstBadIndex* bad) {
  const int64_t lo = plane * X, hi = lo + X;
  for (int64_t o = plane * P; o < (plane + 1) * P; ++o) {
    const int64_t at = indices[o];
    if (at >= lo && at < hi) {
      dx[at] += dy[o];
    } else if (at != -1) {
      bad->note(o);
    }
  }
}

// The window of output (oh, ow) restricted to input cells: taps [kh0, kh1) x [kw0, kw1), first
// input row/column h0/w0 (the position of tap 0, possibly negative).
struct Window {
  int64_t kh0, kh1, kw0, kw1, h0, w0;
};

Window window_at(const Pool2dParams& p, int64_t oh, int64_t ow) {
  Window win;
  win.h0 = oh * p.stride_h - p.pad_top;
  win.w0 = ow * p.stride_w - p.pad_left;
  pool_tap_range(win.h0, p.dil_h, p.H, p.kH, &win.kh0, &win.kh1);
  pool_tap_range(win.w0, p.dil_w, p.W, p.kW, &win.kw0, &win.kw1);
  return win;
}

// Outputs o in [lo, hi) whose whole window, taps o * stride - pad + k * dilation for k in
// [0, kernel), lies in [0, size).
struct OutRange {
  int64_t lo, hi;
};

OutRange inside_windows(int64_t out, int64_t stride, int64_t pad, int64_t dilation, int64_t kernel,
                        int64_t size) {
  const int64_t lo = std::min(out, (pad + stride - 1) / stride);
  const int64_t last_start = size - 1 - (kernel - 1) * dilation + pad;  // largest o * stride
  const int64_t hi = last_start < 0 ? 0 : std::min(out, last_start / stride + 1);
  return {lo, std::max(lo, hi)};
}

// With count_include_pad the divisor counts the taps inside the padded input, as PyTorch's
// avg_pool2d does: a ceil_mode window that runs past the bottom/right padding divides by its
// clipped size, not by kH * kW.
int64_t avg_divisor(const Pool2dParams& p, const Window& win) {
  if (p.divisor_override > 0) return p.divisor_override;
  if (p.count_include_pad)
    return pool_padded_taps(win.h0, p.dil_h, p.H, p.pad_top, p.pad_bottom, p.kH) *
           pool_padded_taps(win.w0, p.dil_w, p.W, p.pad_left, p.pad_right, p.kW);
  return (win.kh1 - win.kh0) * (win.kw1 - win.kw0);
}

// Outputs [lo, hi) of one output row whose windows lie inside the input. r0 is the cell of
// tap (0, 0) of output 0, so output ow reads r0[ow * stride + offset(kh, kw)]. The taps are
// visited in row-major order, each over the whole row segment: per output a strided load, a
// compare and two selects, which the compiler vectorises when the stride is a compile-time
// constant (kStride 1 or 2; 0 means the runtime stride). best receives the maxima, off each
// maximum's tap offset (int32: the caller checks that offsets fit).
template <int kStride, typename T>
void maxpool_row_inside_loop(const Pool2dParams& p, const T* r0, int64_t lo, int64_t hi, T* best,
                             int32_t* off) {
  const int64_t stride = kStride > 0 ? kStride : p.stride_w;
  for (int64_t ow = lo; ow < hi; ++ow) {
    best[ow] = r0[ow * stride];
    off[ow] = 0;
  }
  for (int64_t kh = 0; kh < p.kH; ++kh) {
    for (int64_t kw = kh == 0 ? 1 : 0; kw < p.kW; ++kw) {
      const int32_t tap = static_cast<int32_t>(kh * p.dil_h * p.W + kw * p.dil_w);
      const T* r = r0 + tap;
      for (int64_t ow = lo; ow < hi; ++ow) {
        const T v = r[ow * stride];
        const bool replaces = pool_max_replaces(v, best[ow]);
        best[ow] = replaces ? v : best[ow];
        off[ow] = replaces ? tap : off[ow];
      }
    }
  }
}

// The same for a kKH x kKW window with dilation 1 and stride kStride, all compile-time, so
// each output's taps unroll into registers: faster than the tap-by-tap passes when rows are
// short (a 14-wide output row is a few vectors). y and idx (when kIndices) point at the output
// row; first_at is the flat input index of r0[0].
template <int kKH, int kKW, int kStride, bool kIndices, typename T>
void maxpool_row_fixed(const T* __restrict r0, int64_t W, int64_t lo, int64_t hi, int64_t first_at,
                       T* __restrict y, int64_t* __restrict idx) {
  const int32_t w = static_cast<int32_t>(W);
  for (int64_t ow = lo; ow < hi; ++ow) {
    const T* c = r0 + ow * kStride;
    T best = c[0];
    int32_t off = 0;
    for (int t = 1; t < kKH * kKW; ++t) {
      const int32_t tap = (t / kKW) * w + t % kKW;
      const T v = c[tap];
      const bool replaces = pool_max_replaces(v, best);
      best = replaces ? v : best;
      off = replaces ? tap : off;
    }
    y[ow] = best;
    if (kIndices) idx[ow] = first_at + ow * kStride + off;
  }
}

// Outputs [lo, hi) of output row oh whose windows lie inside the input: maxima into y, flat
// input indices into idx (nullable). row0 is the position in the plane of tap (0, 0) of
// output 0, first_at its flat input index.
template <typename T>
void maxpool_row_inside(const Pool2dParams& p, const T* xp, int64_t row0, int64_t first_at,
                        int64_t lo, int64_t hi, T* y, int64_t* idx, int32_t* off) {
  const T* r0 = xp + row0;
  const bool dense = p.dil_h == 1 && p.dil_w == 1;
  if constexpr (std::is_same_v<T, float>) {
    const auto row = vec_kernels().maxpool_s2_row;
    if (row != nullptr && dense && p.kH == p.kW && (p.kH == 2 || p.kH == 3) && p.stride_w == 2) {
      row(r0 + lo * 2, p.W, static_cast<int>(p.kH), hi - lo, first_at + lo * 2, y + lo,
          idx != nullptr ? idx + lo : nullptr);
      return;
    }
  }
  if (dense && p.kH == 2 && p.kW == 2 && p.stride_w == 2) {
    if (idx != nullptr) {
      maxpool_row_fixed<2, 2, 2, true>(r0, p.W, lo, hi, first_at, y, idx);
    } else {
      maxpool_row_fixed<2, 2, 2, false>(r0, p.W, lo, hi, first_at, y, idx);
    }
  } else if (dense && p.kH == 3 && p.kW == 3 && p.stride_w == 2) {
    if (idx != nullptr) {
      maxpool_row_fixed<3, 3, 2, true>(r0, p.W, lo, hi, first_at, y, idx);
    } else {
      maxpool_row_fixed<3, 3, 2, false>(r0, p.W, lo, hi, first_at, y, idx);
    }
  } else {
    if (p.stride_w == 2) {
      maxpool_row_inside_loop<2>(p, r0, lo, hi, y, off);
    } else if (p.stride_w == 1) {
      maxpool_row_inside_loop<1>(p, r0, lo, hi, y, off);
    } else {
      maxpool_row_inside_loop<0>(p, r0, lo, hi, y, off);
    }
    if (idx != nullptr) {
      for (int64_t ow = lo; ow < hi; ++ow) idx[ow] = first_at + ow * p.stride_w + off[ow];
    }
  }
}

}  // namespace

// x: [N, C, H, W] -> y, indices: [N, C, outH, outW]
//
// Windows that lie wholly inside the input (all of them without padding or ceil_mode) take
// maxpool_row_inside, a row at a time with no bounds arithmetic; only the border windows pay
// for window_at's clipping.
template <typename T>
void maxpool2d_forward(const Pool2dParams& p, const T* x, T* y, int64_t* indices) {
  const int64_t HW = p.H * p.W, P = p.outH * p.outW;
  OutRange rows = inside_windows(p.outH, p.stride_h, p.pad_top, p.dil_h, p.kH, p.H);
  const OutRange cols = inside_windows(p.outW, p.stride_w, p.pad_left, p.dil_w, p.kW, p.W);
  // The row loop keeps tap offsets, all below H * W, in int32; larger planes take the
  // clipped loop throughout.
  if (HW >= (int64_t{1} << 31)) rows = {p.outH, p.outH};
  parallel_for(0, p.N * p.C, plane_grain(P * p.kH * p.kW), [&](int64_t b0, int64_t b1) {
    std::vector<int32_t> off(static_cast<size_t>(p.outW));
    for (int64_t plane = b0; plane < b1; ++plane) {
      const T* xp = x + plane * HW;
      T* yp = y + plane * P;
      int64_t* ip = indices != nullptr ? indices + plane * P : nullptr;
      auto clipped = [&](int64_t oh, int64_t ow) {
        const Window win = window_at(p, oh, ow);
        T best = lowest_value<T>();
        int64_t best_at = -1;
        for (int64_t kh = win.kh0; kh < win.kh1; ++kh) {
          const int64_t row = (win.h0 + kh * p.dil_h) * p.W + win.w0;
          for (int64_t kw = win.kw0; kw < win.kw1; ++kw) {
            const int64_t at = row + kw * p.dil_w;
            if (best_at < 0 || pool_max_replaces(xp[at], best)) {
              best = xp[at];
              best_at = at;
            }
          }
        }
        yp[oh * p.outW + ow] = best;
        if (ip != nullptr) ip[oh * p.outW + ow] = best_at < 0 ? -1 : plane * HW + best_at;
      };
      for (int64_t oh = 0; oh < p.outH; ++oh) {
        const bool row_inside = oh >= rows.lo && oh < rows.hi;
        const int64_t lo = row_inside ? cols.lo : p.outW, hi = row_inside ? cols.hi : p.outW;
        for (int64_t ow = 0; ow < lo; ++ow) clipped(oh, ow);
        if (lo < hi) {
          // Position (within the plane) of tap (0, 0) of output (oh, 0).
          const int64_t row0 = (oh * p.stride_h - p.pad_top) * p.W - p.pad_left;
          maxpool_row_inside(p, xp, row0, plane * HW + row0, lo, hi, yp + oh * p.outW,
                             ip != nullptr ? ip + oh * p.outW : nullptr, off.data());
        }
        for (int64_t ow = hi; ow < p.outW; ++ow) clipped(oh, ow);
      }
    }
  });
}

// dy, indices: [N, C, outH, outW] -> dx: [N, C, H, W]
template <typename T>
int64_t maxpool2d_backward(const Pool2dParams& p, const T* dy, const int64_t* indices, T* dx) {
  const int64_t HW = p.H * p.W, P = p.outH * p.outW;
  FirstBadIndex bad;
  parallel_for(0, p.N * p.C, plane_grain(P + HW), [&](int64_t b0, int64_t b1) {
    for (int64_t plane = b0; plane < b1; ++plane) {
      std::fill(dx + plane * HW, dx + (plane + 1) * HW, T(0));
      scatter_plane(plane, P, HW, dy, indices, dx, &bad);
    }
  });
  return bad.get();
}

// x: [N, C, H, W] -> y: [N, C, outH, outW]
template <typename T>
void avgpool2d_forward(const Pool2dParams& p, const T* x, T* y) {
  const int64_t HW = p.H * p.W, P = p.outH * p.outW;
  parallel_for(0, p.N * p.C, plane_grain(P * p.kH * p.kW), [&](int64_t b0, int64_t b1) {
    for (int64_t plane = b0; plane < b1; ++plane) {
      const T* xp = x + plane * HW;
      for (int64_t oh = 0; oh < p.outH; ++oh) {
        for (int64_t ow = 0; ow < p.outW; ++ow) {
          const Window win = window_at(p, oh, ow);
          double sum = 0;
          for (int64_t kh = win.kh0; kh < win.kh1; ++kh) {
            const int64_t row = (win.h0 + kh * p.dil_h) * p.W + win.w0;
            for (int64_t kw = win.kw0; kw < win.kw1; ++kw) sum += xp[row + kw * p.dil_w];
          }
          const int64_t divisor = avg_divisor(p, win);
          // An empty window (only possible without count_include_pad) averages to zero.
          y[plane * P + oh * p.outW + ow] =
              divisor > 0 ? static_cast<T>(sum / static_cast<double>(divisor)) : T(0);
        }
      }
    }
  });
}

// dy: [N, C, outH, outW] -> dx: [N, C, H, W]
template <typename T>
void avgpool2d_backward(const Pool2dParams& p, const T* dy, T* dx) {
  const int64_t HW = p.H * p.W, P = p.outH * p.outW;
  parallel_for(0, p.N * p.C, plane_grain(P * p.kH * p.kW + HW), [&](int64_t b0, int64_t b1) {
    std::fill(dx + b0 * HW, dx + b1 * HW, T(0));
    for (int64_t plane = b0; plane < b1; ++plane) {
      T* dxp = dx + plane * HW;
      for (int64_t oh = 0; oh < p.outH; ++oh) {
        for (int64_t ow = 0; ow < p.outW; ++ow) {
          const Window win = window_at(p, oh, ow);
          const int64_t divisor = avg_divisor(p, win);
          if (divisor == 0) continue;
          const T g = dy[plane * P + oh * p.outW + ow] / static_cast<T>(divisor);
          for (int64_t kh = win.kh0; kh < win.kh1; ++kh) {
            const int64_t row = (win.h0 + kh * p.dil_h) * p.W + win.w0;
            for (int64_t kw = win.kw0; kw < win.kw1; ++kw) dxp[row + kw * p.dil_w] += g;
          }
        }
      }
    }
  });
}

namespace {

// The taps of output position (o0, o1, o2) that fall inside the input: [lo[i], hi[i]) with
// first input coordinate start[i]; `padded` counts the taps inside the padded input.
struct Window3d {
  int64_t lo[3], hi[3], start[3], padded;
};

Window3d window3d_at(const Pool3dParams& p, const int64_t* o) {
  Window3d w;
  w.padded = 1;
  for (int i = 0; i < 3; ++i) {
    w.start[i] = o[i] * p.stride[i] - p.pad_begin[i];
    pool_tap_range(w.start[i], p.dilation[i], p.in[i], p.kernel[i], &w.lo[i], &w.hi[i]);
    w.padded *= pool_padded_taps(w.start[i], p.dilation[i], p.in[i], p.pad_begin[i], p.pad_end[i],
                                 p.kernel[i]);
  }
  return w;
}

int64_t plane_size(const int64_t* dims) { return dims[0] * dims[1] * dims[2]; }

// Calls f(flat output index within the plane, window) for every output position.
template <typename F>
void for_each_window3d(const Pool3dParams& p, F f) {
  int64_t o[3];
  int64_t at = 0;
  for (o[0] = 0; o[0] < p.out[0]; ++o[0])
    for (o[1] = 0; o[1] < p.out[1]; ++o[1])
      for (o[2] = 0; o[2] < p.out[2]; ++o[2]) f(at++, window3d_at(p, o));
}

// Calls g(flat input index within the plane) for every tap of the window inside the input.
template <typename G>
void for_each_tap3d(const Pool3dParams& p, const Window3d& w, G g) {
  for (int64_t a = w.lo[0]; a < w.hi[0]; ++a) {
    const int64_t i0 = w.start[0] + a * p.dilation[0];
    for (int64_t b = w.lo[1]; b < w.hi[1]; ++b) {
      const int64_t i1 = w.start[1] + b * p.dilation[1];
      const int64_t row = (i0 * p.in[1] + i1) * p.in[2];
      for (int64_t c = w.lo[2]; c < w.hi[2]; ++c) g(row + w.start[2] + c * p.dilation[2]);
    }
  }
}

int64_t avg3d_divisor(const Pool3dParams& p, const Window3d& w) {
  if (p.divisor_override > 0) return p.divisor_override;
  if (p.count_include_pad) return w.padded;
  return (w.hi[0] - w.lo[0]) * (w.hi[1] - w.lo[1]) * (w.hi[2] - w.lo[2]);
}

}  // namespace

template <typename T>
void maxpool3d_forward(const Pool3dParams& p, const T* x, T* y, int64_t* indices) {
  const int64_t X = plane_size(p.in), P = plane_size(p.out);
  const int64_t taps = p.kernel[0] * p.kernel[1] * p.kernel[2];
  parallel_for(0, p.N * p.C, plane_grain(P * taps), [&](int64_t b0, int64_t b1) {
    for (int64_t plane = b0; plane < b1; ++plane) {
      const T* xp = x + plane * X;
      for_each_window3d(p, [&](int64_t o, const Window3d& w) {
        T best = lowest_value<T>();
        int64_t best_at = -1;
        for_each_tap3d(p, w, [&](int64_t at) {
          if (best_at < 0 || pool_max_replaces(xp[at], best)) {
            best = xp[at];
            best_at = at;
          }
        });
        y[plane * P + o] = best;
        if (indices != nullptr) indices[plane * P + o] = best_at < 0 ? -1 : plane * X + best_at;
      });
    }
  });
}

template <typename T>
int64_t maxpool3d_backward(const Pool3dParams& p, const T* dy, const int64_t* indices, T* dx) {
  const int64_t X = plane_size(p.in), P = plane_size(p.out);
  FirstBadIndex bad;
  parallel_for(0, p.N * p.C, plane_grain(P + X), [&](int64_t b0, int64_t b1) {
    for (int64_t plane = b0; plane < b1; ++plane) {
      std::fill(dx + plane * X, dx + (plane + 1) * X, T(0));
      scatter_plane(plane, P, X, dy, indices, dx, &bad);
    }
  });
  return bad.get();
}

template <typename T>
void avgpool3d_forward(const Pool3dParams& p, const T* x, T* y) {
  const int64_t X = plane_size(p.in), P = plane_size(p.out);
  const int64_t taps = p.kernel[0] * p.kernel[1] * p.kernel[2];
  parallel_for(0, p.N * p.C, plane_grain(P * taps), [&](int64_t b0, int64_t b1) {
    for (int64_t plane = b0; plane < b1; ++plane) {
      const T* xp = x + plane * X;
      for_each_window3d(p, [&](int64_t o, const Window3d& w) {
        double sum = 0;
        for_each_tap3d(p, w, [&](int64_t at) { sum += xp[at]; });
        const int64_t divisor = avg3d_divisor(p, w);
        y[plane * P + o] = divisor > 0 ? static_cast<T>(sum / static_cast<double>(divisor)) : T(0);
      });
    }
  });
}

template <typename T>
void avgpool3d_backward(const Pool3dParams& p, const T* dy, T* dx) {
  const int64_t X = plane_size(p.in), P = plane_size(p.out);
  const int64_t taps = p.kernel[0] * p.kernel[1] * p.kernel[2];
  parallel_for(0, p.N * p.C, plane_grain(P * taps + X), [&](int64_t b0, int64_t b1) {
    for (int64_t plane = b0; plane < b1; ++plane) {
      T* dxp = dx + plane * X;
      std::fill(dxp, dxp + X, T(0));
      for_each_window3d(p, [&](int64_t o, const Window3d& w) {
        const int64_t divisor = avg3d_divisor(p, w);
        if (divisor == 0) return;
        const T g = dy[plane * P + o] / static_cast<T>(divisor);
        for_each_tap3d(p, w, [&](int64_t at) { dxp[at] += g; });
      });
    }
  });
}

// x: [N, C, S] -> y: [N, C]
template <typename T>
void global_avgpool_forward(int64_t N, int64_t C, int64_t S, const T* x, T* y) {
  parallel_for(0, N * C, plane_grain(S), [&](int64_t b0, int64_t b1) {
    for (int64_t plane = b0; plane < b1; ++plane) {
      const T* xp = x + plane * S;
      double sum = 0;
      for (int64_t s = 0; s < S; ++s) sum += xp[s];
      y[plane] = S > 0 ? static_cast<T>(sum / static_cast<double>(S)) : T(0);
    }
  });
}

// dy: [N, C] -> dx: [N, C, S]
template <typename T>
void global_avgpool_backward(int64_t N, int64_t C, int64_t S, const T* dy, T* dx) {
  parallel_for(0, N * C, plane_grain(S), [&](int64_t b0, int64_t b1) {
    for (int64_t plane = b0; plane < b1; ++plane) {
      const T g = dy[plane] / static_cast<T>(S);
      std::fill(dx + plane * S, dx + (plane + 1) * S, g);
    }
  });
}

#define ORTM_INSTANTIATE_POOL(T)                                                             \
  template void maxpool2d_forward<T>(const Pool2dParams&, const T*, T*, int64_t*);           \
  template int64_t maxpool2d_backward<T>(const Pool2dParams&, const T*, const int64_t*, T*); \
  template void avgpool2d_forward<T>(const Pool2dParams&, const T*, T*);                     \
  template void avgpool2d_backward<T>(const Pool2dParams&, const T*, T*);                    \
  template void maxpool3d_forward<T>(const Pool3dParams&, const T*, T*, int64_t*);           \
  template int64_t maxpool3d_backward<T>(const Pool3dParams&, const T*, const int64_t*, T*); \
  template void avgpool3d_forward<T>(const Pool3dParams&, const T*, T*);                     \
  template void avgpool3d_backward<T>(const Pool3dParams&, const T*, T*);                    \
  template void global_avgpool_forward<T>(int64_t, int64_t, int64_t, const T*, T*);          \
  template void global_avgpool_backward<T>(int64_t, int64_t, int64_t, const T*, T*);

ORTM_INSTANTIATE_POOL(float)
ORTM_INSTANTIATE_POOL(double)
#undef ORTM_INSTANTIATE_POOL

// MaxPool's forward also takes int8 and uint8 (no gradient: integers are not differentiable).
template void maxpool2d_forward<int8_t>(const Pool2dParams&, const int8_t*, int8_t*, int64_t*);
template void maxpool2d_forward<uint8_t>(const Pool2dParams&, const uint8_t*, uint8_t*, int64_t*);
template void maxpool3d_forward<int8_t>(const Pool3dParams&, const int8_t*, int8_t*, int64_t*);
template void maxpool3d_forward<uint8_t>(const Pool3dParams&, const uint8_t*, uint8_t*, int64_t*);

}  // namespace ortmodule
