#include "kernels/cpu/softmax.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/cpu/broadcast.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/math/softmax.h"
#include "kernels/parallel.h"

namespace ortmodule {
namespace {

// Sums along the axis are accumulated in double so that float results over long
// axes do not drift; for double inputs this changes nothing.
using Acc = double;

// When inner > 1 the axis is strided; processing a tile of neighbouring inner
// positions together turns every pass over the axis into contiguous loads.
constexpr int64_t kInnerTile = 64;

// Rows per chunk so that one chunk touches roughly 32K elements.
int64_t row_grain(int64_t dim) { return std::max<int64_t>(1, 32768 / std::max<int64_t>(1, dim)); }

// Runs fn(row_offset) for every contiguous row of an [outer, dim] matrix.
template <typename Fn>
void for_each_row(int64_t outer, int64_t dim, const Fn& fn) {
  parallel_for(0, outer, row_grain(dim), [&](int64_t begin, int64_t end) {
    for (int64_t o = begin; o < end; ++o) fn(o * dim);
  });
}

// Runs fn(offset, len) over runs of at most kInnerTile consecutive inner positions
// of one outer index; offset is the element offset of (o, 0, i). Parallelised over
// the outer * inner rows, so a small `outer` still uses every thread.
template <typename Fn>
void for_each_inner_tile(int64_t outer, int64_t dim, int64_t inner, const Fn& fn) {
  parallel_for(0, outer * inner, row_grain(dim), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end;) {
      const int64_t o = r / inner;
      const int64_t i = r % inner;
      const int64_t len = std::min({kInnerTile, inner - i, end - r});
      fn(o * dim * inner + i, len);
      r += len;
    }
  });
}

// x, y: [dim] contiguous. Reads each x[k] before writing y[k], so y may alias x.
template <typename T>
void softmax_forward_row(int64_t dim, const T* x, T* y, bool log) {
  // std::max keeps the running max when x[k] is NaN; the NaN still reaches the
  // output through exp(x[k] - max) and the sum.
  T max = x[0];
  for (int64_t k = 1; k < dim; ++k) max = std::max(max, x[k]);
  Acc sum = 0;
  if (log) {
    for (int64_t k = 0; k < dim; ++k) sum += std::exp(x[k] - max);
    const T log_sum = static_cast<T>(std::log(sum));
    // (x - max) - log_sum rather than x - (max + log_sum): exact near the max.
    for (int64_t k = 0; k < dim; ++k) y[k] = (x[k] - max) - log_sum;
  } else {
    for (int64_t k = 0; k < dim; ++k) {
      const T e = std::exp(x[k] - max);
      y[k] = e;
      sum += e;
    }
    const T inv_sum = static_cast<T>(1.0 / sum);
    for (int64_t k = 0; k < dim; ++k) y[k] *= inv_sum;
  }
}

// x, y: [dim, len] with row stride `inner` (len <= kInnerTile); y may alias x.
template <typename T>
void softmax_forward_tile(int64_t dim, int64_t inner, int64_t len, const T* x, T* y, bool log) {
  T max[kInnerTile];
  Acc sum[kInnerTile];
  for (int64_t j = 0; j < len; ++j) {
    max[j] = x[j];
    sum[j] = 0;
  }
  for (int64_t d = 1; d < dim; ++d) {
    const T* xd = x + d * inner;
    for (int64_t j = 0; j < len; ++j) max[j] = std::max(max[j], xd[j]);
  }
  if (log) {
    for (int64_t d = 0; d < dim; ++d) {
      const T* xd = x + d * inner;
      for (int64_t j = 0; j < len; ++j) sum[j] += std::exp(xd[j] - max[j]);
    }
    T log_sum[kInnerTile];
    for (int64_t j = 0; j < len; ++j) log_sum[j] = static_cast<T>(std::log(sum[j]));
    for (int64_t d = 0; d < dim; ++d) {
      const T* xd = x + d * inner;
      T* yd = y + d * inner;
      for (int64_t j = 0; j < len; ++j) yd[j] = (xd[j] - max[j]) - log_sum[j];
    }
  } else {
    for (int64_t d = 0; d < dim; ++d) {
      const T* xd = x + d * inner;
      T* yd = y + d * inner;
      for (int64_t j = 0; j < len; ++j) {
        const T e = std::exp(xd[j] - max[j]);
        yd[j] = e;
        sum[j] += e;
      }
    }
    T inv_sum[kInnerTile];
    for (int64_t j = 0; j < len; ++j) inv_sum[j] = static_cast<T>(1.0 / sum[j]);
    for (int64_t d = 0; d < dim; ++d) {
      T* yd = y + d * inner;
      for (int64_t j = 0; j < len; ++j) yd[j] *= inv_sum[j];
    }
  }
}

// dy, y, dx: [dim] contiguous; dx may alias dy because the sum is taken first.
template <typename T>
void softmax_backward_row(int64_t dim, const T* dy, const T* y, T* dx, bool log) {
  Acc sum = 0;
  if (log) {
    for (int64_t k = 0; k < dim; ++k) sum += dy[k];
    const T s = static_cast<T>(sum);
    for (int64_t k = 0; k < dim; ++k) dx[k] = log_softmax_grad(dy[k], y[k], s);
  } else {
    for (int64_t k = 0; k < dim; ++k) sum += static_cast<Acc>(dy[k]) * y[k];
    const T s = static_cast<T>(sum);
    for (int64_t k = 0; k < dim; ++k) dx[k] = softmax_grad(dy[k], y[k], s);
  }
}

// dy, y, dx: [dim, len] with row stride `inner`; dx may alias dy.
template <typename T>
void softmax_backward_tile(int64_t dim, int64_t inner, int64_t len, const T* dy, const T* y, T* dx,
                           bool log) {
  Acc sum[kInnerTile];
  for (int64_t j = 0; j < len; ++j) sum[j] = 0;
  for (int64_t d = 0; d < dim; ++d) {
    const T* dyd = dy + d * inner;
    const T* yd = y + d * inner;
    if (log) {
      for (int64_t j = 0; j < len; ++j) sum[j] += dyd[j];
    } else {
      for (int64_t j = 0; j < len; ++j) sum[j] += static_cast<Acc>(dyd[j]) * yd[j];
    }
  }
  T s[kInnerTile];
  for (int64_t j = 0; j < len; ++j) s[j] = static_cast<T>(sum[j]);
  for (int64_t d = 0; d < dim; ++d) {
    const T* dyd = dy + d * inner;
    const T* yd = y + d * inner;
    T* dxd = dx + d * inner;
    if (log) {
      for (int64_t j = 0; j < len; ++j) dxd[j] = log_softmax_grad(dyd[j], yd[j], s[j]);
    } else {
      for (int64_t j = 0; j < len; ++j) dxd[j] = softmax_grad(dyd[j], yd[j], s[j]);
    }
  }
}

// One row of scale * x + mask into y (a row of y's shape); the softmax then runs on y in
// place. Same rounding as the unfused Mul then Add.
template <typename T>
void scale_and_mask_row(int64_t dim, T scale, const T* x, int64_t x_step, const T* mask,
                        int64_t mask_step, T* y) {
  if (x_step == 1 && mask && mask_step == 1) {
    if constexpr (std::is_same_v<T, float>) {
      if (const auto vec = vec_kernels().scale_add) return vec(dim, x, scale, mask, y);
    }
    for (int64_t k = 0; k < dim; ++k) y[k] = scaled_masked(x[k], scale, mask[k]);
  } else if (mask) {
    for (int64_t k = 0; k < dim; ++k)
      y[k] = scaled_masked(x[k * x_step], scale, mask[k * mask_step]);
  } else {
    for (int64_t k = 0; k < dim; ++k) y[k] = x[k * x_step] * scale;
  }
}

// One row of keep ? scale * x : fill into y (a row of y's shape).
template <typename T>
void scale_or_fill_row(int64_t dim, T scale, const T* x, int64_t x_step, const uint8_t* keep,
                       int64_t keep_step, T fill, T* y) {
  if (x_step == 1 && keep_step == 1) {
    if constexpr (std::is_same_v<T, float>) {
      if (const auto vec = vec_kernels().scale_or_fill) return vec(dim, x, scale, keep, fill, y);
    }
    for (int64_t k = 0; k < dim; ++k) y[k] = scaled_or_fill(x[k], scale, keep[k] != 0, fill);
  } else {
    for (int64_t k = 0; k < dim; ++k)
      y[k] = scaled_or_fill(x[k * x_step], scale, keep[k * keep_step] != 0, fill);
  }
}

// The element offset of row r's first element in an operand with broadcast `strides`.
int64_t row_offset(const std::vector<int64_t>& out, const std::vector<int64_t>& strides,
                   int64_t r) {
  return broadcast_offset(out, strides, r, out.size() - 1);
}

// One row of softmax_backward (not log), vectorized where the CPU allows.
template <typename T>
void softmax_grad_row(int64_t dim, const T* dy, const T* y, T* dx) {
  if constexpr (std::is_same_v<T, float>) {
    if (const auto vec = vec_kernels().softmax_backward_row) return vec(dim, dy, y, dx, false);
  }
  softmax_backward_row(dim, dy, y, dx, false);
}

// Rows of y's shape `out`: the product of its leading dims.
int64_t leading_rows(const std::vector<int64_t>& out) {
  int64_t rows = 1;
  for (size_t d = 0; d + 1 < out.size(); ++d) rows *= out[d];
  return rows;
}

// Calls fn(dim, r, x_offset, mask_offset) for every row r of shape.out, in parallel, with the
// offsets of x's and (when masked) the mask's row r through their broadcast strides.
template <typename Fn>
void for_each_broadcast_row(const ScaledMaskedSoftmaxShape& shape, bool masked, const Fn& fn) {
  const std::vector<int64_t>& out = shape.out;
  const int64_t dim = out.back(), rows = leading_rows(out);
  if (rows <= 0 || dim <= 0) return;
  parallel_for(0, rows, row_grain(dim), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r)
      fn(dim, r, row_offset(out, shape.x_strides, r),
         masked ? row_offset(out, shape.mask_strides, r) : 0);
  });
}

template <typename T>
void softmax_row_in_place(int64_t dim, T* y) {
  if constexpr (std::is_same_v<T, float>) {
    if (const auto vec = vec_kernels().softmax_forward_row) return vec(dim, y, y, false);
  }
  softmax_forward_row(dim, y, y, false);
}

}  // namespace

template <typename T>
void softmax_forward(int64_t outer, int64_t dim, int64_t inner, const T* x, T* y, bool log) {
  if (outer <= 0 || dim <= 0 || inner <= 0) return;
  if (inner == 1) {
    if constexpr (std::is_same_v<T, float>) {
      if (const auto vec = vec_kernels().softmax_forward_row) {
        for_each_row(outer, dim, [&](int64_t off) { vec(dim, x + off, y + off, log); });
        return;
      }
    }
    for_each_row(outer, dim, [&](int64_t off) { softmax_forward_row(dim, x + off, y + off, log); });
  } else {
    for_each_inner_tile(outer, dim, inner, [&](int64_t off, int64_t len) {
      softmax_forward_tile(dim, inner, len, x + off, y + off, log);
    });
  }
}

template <typename T>
void softmax_backward(int64_t outer, int64_t dim, int64_t inner, const T* dy, const T* y, T* dx,
                      bool log) {
  if (outer <= 0 || dim <= 0 || inner <= 0) return;
  if (inner == 1) {
    if constexpr (std::is_same_v<T, float>) {
      if (const auto vec = vec_kernels().softmax_backward_row) {
        for_each_row(outer, dim, [&](int64_t off) { vec(dim, dy + off, y + off, dx + off, log); });
        return;
      }
    }
    for_each_row(outer, dim,
                 [&](int64_t off) { softmax_backward_row(dim, dy + off, y + off, dx + off, log); });
  } else {
    for_each_inner_tile(outer, dim, inner, [&](int64_t off, int64_t len) {
      softmax_backward_tile(dim, inner, len, dy + off, y + off, dx + off, log);
    });
  }
}

template <typename T>
void softmax_backward_rows(int64_t outer, int64_t dim, const T* y, T* dx, bool log,
                           const std::function<void(int64_t, T*)>& dy_row) {
  if (outer <= 0 || dim <= 0) return;
  if constexpr (std::is_same_v<T, float>) {
    if (const auto vec = vec_kernels().softmax_backward_row) {
      for_each_row(outer, dim, [&](int64_t off) {
        dy_row(off / dim, dx + off);
        vec(dim, dx + off, y + off, dx + off, log);
      });
      return;
    }
  }
  for_each_row(outer, dim, [&](int64_t off) {
    dy_row(off / dim, dx + off);
    softmax_backward_row(dim, dx + off, y + off, dx + off, log);
  });
}

template <typename T>
void scaled_masked_softmax_forward(const ScaledMaskedSoftmaxShape& shape, T scale, const T* x,
                                   const T* mask, T* y) {
  const int64_t x_step = shape.x_strides.back();
  const int64_t mask_step = mask ? shape.mask_strides.back() : 0;
  for_each_broadcast_row(shape, mask != nullptr,
                         [&](int64_t dim, int64_t r, int64_t x_off, int64_t mask_off) {
                           T* yr = y + r * dim;
                           scale_and_mask_row(dim, scale, x + x_off, x_step,
                                              mask ? mask + mask_off : nullptr, mask_step, yr);
                           softmax_row_in_place(dim, yr);
                         });
}

template <typename T>
void scaled_masked_softmax_backward(int64_t rows, int64_t dim, T scale, const T* dy, const T* y,
                                    T* dx) {
  if (rows <= 0 || dim <= 0) return;
  for_each_row(rows, dim, [&](int64_t off) {
    attention_softmax_grad_row(dim, scale, dy + off, y + off, RowMask<T>{}, dx + off);
  });
}

template <typename T>
void scaled_kept_softmax_forward(const ScaledMaskedSoftmaxShape& shape, T scale, const T* x,
                                 const uint8_t* keep, T fill, T* y) {
  const int64_t x_step = shape.x_strides.back();
  const int64_t keep_step = shape.mask_strides.back();
  for_each_broadcast_row(shape, true, [&](int64_t dim, int64_t r, int64_t x_off, int64_t keep_off) {
    T* yr = y + r * dim;
    scale_or_fill_row(dim, scale, x + x_off, x_step, keep + keep_off, keep_step, fill, yr);
    softmax_row_in_place(dim, yr);
  });
}

template <typename T>
void scaled_kept_softmax_backward(const ScaledMaskedSoftmaxShape& shape, T scale, const T* dy,
                                  const T* y, const uint8_t* keep, T* dx) {
  const std::vector<int64_t>& out = shape.out;
  const int64_t dim = out.back(), rows = leading_rows(out);
  if (rows <= 0 || dim <= 0) return;
  RowMask<T> mask;
  mask.step = shape.mask_strides.back();
  for_each_row(rows, dim, [&](int64_t off) {
    RowMask<T> row = mask;
    row.keep = keep + row_offset(out, shape.mask_strides, off / dim);
    attention_softmax_grad_row(dim, scale, dy + off, y + off, row, dx + off);
  });
}

template <typename T>
void attention_scores_row(int64_t n, T scale, const T* x, const RowMask<T>& mask, T* y) {
  if (mask.keep) {
    scale_or_fill_row(n, scale, x, 1, mask.keep, mask.step, mask.fill, y);
  } else {
    scale_and_mask_row(n, scale, x, 1, mask.add, mask.step, y);
  }
}

template <typename T>
void softmax_row(int64_t n, T* y) {
  softmax_row_in_place(n, y);
}

template <typename T>
void attention_softmax_row(int64_t n, T scale, const T* x, const RowMask<T>& mask, T* y) {
  attention_scores_row(n, scale, x, mask, y);
  softmax_row_in_place(n, y);
}

template <typename T>
void attention_softmax_grad_row(int64_t n, T scale, const T* dy, const T* y, const RowMask<T>& mask,
                                T* dx) {
  softmax_grad_row(n, dy, y, dx);
  if (mask.keep) {
    if constexpr (std::is_same_v<T, float>) {
      if (mask.step == 1 && vec_kernels().scale_kept)
        return vec_kernels().scale_kept(n, mask.keep, scale, dx);
    }
    for (int64_t k = 0; k < n; ++k) dx[k] = mask.keep[k * mask.step] ? dx[k] * scale : T(0);
  } else if (scale != T(1)) {
    for (int64_t k = 0; k < n; ++k) dx[k] *= scale;
  }
}

template void softmax_forward<float>(int64_t, int64_t, int64_t, const float*, float*, bool);
template void softmax_forward<double>(int64_t, int64_t, int64_t, const double*, double*, bool);
template void softmax_backward<float>(int64_t, int64_t, int64_t, const float*, const float*, float*,
                                      bool);
template void softmax_backward<double>(int64_t, int64_t, int64_t, const double*, const double*,
                                       double*, bool);
template void softmax_backward_rows<float>(int64_t, int64_t, const float*, float*, bool,
                                           const std::function<void(int64_t, float*)>&);
template void softmax_backward_rows<double>(int64_t, int64_t, const double*, double*, bool,
                                            const std::function<void(int64_t, double*)>&);

template void scaled_masked_softmax_forward<float>(const ScaledMaskedSoftmaxShape&, float,
                                                   const float*, const float*, float*);
template void scaled_masked_softmax_forward<double>(const ScaledMaskedSoftmaxShape&, double,
                                                    const double*, const double*, double*);
template void scaled_kept_softmax_forward<float>(const ScaledMaskedSoftmaxShape&, float,
                                                 const float*, const uint8_t*, float, float*);
template void scaled_kept_softmax_forward<double>(const ScaledMaskedSoftmaxShape&, double,
                                                  const double*, const uint8_t*, double, double*);
template void scaled_kept_softmax_backward<float>(const ScaledMaskedSoftmaxShape&, float,
                                                  const float*, const float*, const uint8_t*,
                                                  float*);
template void scaled_kept_softmax_backward<double>(const ScaledMaskedSoftmaxShape&, double,
                                                   const double*, const double*, const uint8_t*,
                                                   double*);
template void attention_softmax_row<float>(int64_t, float, const float*, const RowMask<float>&,
                                           float*);
template void attention_softmax_row<double>(int64_t, double, const double*, const RowMask<double>&,
                                            double*);
template void attention_scores_row<float>(int64_t, float, const float*, const RowMask<float>&,
                                          float*);
template void attention_scores_row<double>(int64_t, double, const double*, const RowMask<double>&,
                                           double*);
template void softmax_row<float>(int64_t, float*);
template void softmax_row<double>(int64_t, double*);
template void attention_softmax_grad_row<float>(int64_t, float, const float*, const float*,
                                                const RowMask<float>&, float*);
template void attention_softmax_grad_row<double>(int64_t, double, const double*, const double*,
                                                 const RowMask<double>&, double*);
template void scaled_masked_softmax_backward<float>(int64_t, int64_t, float, const float*,
                                                    const float*, float*);
template void scaled_masked_softmax_backward<double>(int64_t, int64_t, double, const double*,
                                                     const double*, double*);

}  // namespace ortmodule
