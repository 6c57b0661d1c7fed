// Rotary embedding by halves on the CPU (see rotary.h). Lines along the rotated axis are split
// over threads; a line's operands start at offsets from the broadcast strides, so cos and sin
// of [batch, 1, seq, dim] serve every head of x [batch, heads, seq, dim] in place.
#include "kernels/cpu/rotary.h"

#include <algorithm>

#include "kernels/parallel.h"

namespace ortmodule {
namespace {

// One line of D elements, every operand contiguous along it: each half a loop of its own
// (branch-free, so it vectorises), the same arithmetic as the strided loops below.
template <typename T>
void contiguous_line(RotaryMode mode, int64_t D, int64_t h, const T* x, const T* c, const T* s,
                     T* y) {
  const int64_t tail = D - h;
  switch (mode) {
    case RotaryMode::kEmbed:
      for (int64_t i = 0; i < tail; ++i) {
        const T p = x[i] * c[i];
        const T q = -x[i + h] * s[i];
        y[i] = p + q;
      }
      for (int64_t i = tail; i < D; ++i) {
        const T p = x[i] * c[i];
        const T q = x[i - tail] * s[i];
        y[i] = p + q;
      }
      break;
    case RotaryMode::kGradient:
      for (int64_t i = 0; i < h; ++i) {
        const T p = x[i] * c[i];
        const T z = x[i + tail] * s[i + tail];
        y[i] = p + z;
      }
      for (int64_t i = h; i < D; ++i) {
        const T p = x[i] * c[i];
        const T z = x[i - h] * s[i - h];
        y[i] = p + -z;
      }
      break;
    case RotaryMode::kRotate:
      for (int64_t i = 0; i < tail; ++i) y[i] = -x[i + h];
      for (int64_t i = tail; i < D; ++i) y[i] = x[i - tail];
      break;
  }
}

}  // namespace

template <typename T>
void rotary_halves(const RotaryArgs& a, const T* x, const T* cos, const T* sin, T* y) {
  const int64_t rank = static_cast<int64_t>(a.out_shape.size());
  int64_t n = 1;
  for (int64_t d : a.out_shape) n *= d;
  const int64_t D = a.out_shape[a.axis];
  if (n == 0 || D == 0) return;
  int64_t inner = 1;
  for (int64_t d = a.axis + 1; d < rank; ++d) inner *= a.out_shape[d];
  const int64_t lines = n / D, h = std::clamp<int64_t>(a.split, 0, D), tail = D - h;
  const int64_t xs = a.x_strides[a.axis], cs = a.cos_strides[a.axis], ss = a.sin_strides[a.axis];
  parallel_for(0, lines, std::max<int64_t>(1, 16384 / D), [&](int64_t l0, int64_t l1) {
    for (int64_t line = l0; line < l1; ++line) {
      // line counts y's elements with the axis index 0 in row-major order of the other dims.
      int64_t xo = 0, co = 0, so = 0, rem = line;
      for (int64_t d = rank - 1; d >= 0; --d) {
        if (d == a.axis) continue;
        const int64_t idx = rem % a.out_shape[d];
        rem /= a.out_shape[d];
        xo += idx * a.x_strides[d];
        co += idx * a.cos_strides[d];
        so += idx * a.sin_strides[d];
      }
      const int64_t yo = (line / inner) * D * inner + line % inner;
      const T* xl = x + xo;
      T* yl = y + yo;
      const T* cl = cos ? cos + co : nullptr;
      const T* sl = sin ? sin + so : nullptr;
      if (xs == 1 && cs == 1 && ss == 1 && inner == 1) {
        contiguous_line(a.mode, D, h, xl, cl, sl, yl);
        continue;
      }
      switch (a.mode) {
        case RotaryMode::kEmbed:
          for (int64_t i = 0; i < D; ++i) {
            const T r = i < tail ? -xl[(i + h) * xs] : xl[(i - tail) * xs];
            const T p = xl[i * xs] * cl[i * cs];
            const T q = r * sl[i * ss];
            yl[i * inner] = p + q;
          }
          break;
        case RotaryMode::kGradient:
          for (int64_t i = 0; i < D; ++i) {
            const int64_t j = i < h ? i + tail : i - h;  // rot^T reads z = x * sin at j
            const T z = xl[j * xs] * sl[j * ss];
            const T p = xl[i * xs] * cl[i * cs];
            yl[i * inner] = p + (i < h ? z : -z);
          }
          break;
        case RotaryMode::kRotate:
          for (int64_t i = 0; i < D; ++i)
            yl[i * inner] = i < tail ? -xl[(i + h) * xs] : xl[(i - tail) * xs];
          break;
      }
    }
  });
}

template void rotary_halves<float>(const RotaryArgs&, const float*, const float*, const float*,
                                   float*);
template void rotary_halves<double>(const RotaryArgs&, const double*, const double*, const double*,
                                    double*);

}  // namespace ortmodule
