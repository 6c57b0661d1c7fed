#include "kernels/cpu/transpose.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kernels/parallel.h"

namespace ortmodule {

namespace {

// Side of the square tiles of the blocked path: 32 x 32 x 4 bytes = 4 KiB read and
// written per tile, which stays in L1 while both its rows and columns are touched.
constexpr int64_t kTile = 32;

// y[o, i, j] = x[src(o) + i + j * col_stride] over one [rows_i, cols_j] block of every
// outer position o: the input's contiguous dim became the output's second-to-last-like
// dim `k`, so tiles read contiguous columns of x and write contiguous rows of y.
template <typename E>
void transpose_tiled(const std::vector<int64_t>& y_shape, const std::vector<int64_t>& src_stride,
                     int64_t k, const E* x, E* y) {
  const int64_t rank = static_cast<int64_t>(y_shape.size());
  const int64_t last = rank - 1;
  std::vector<int64_t> y_strides(rank, 1);
  for (int64_t i = rank - 2; i >= 0; --i) y_strides[i] = y_strides[i + 1] * y_shape[i + 1];
  std::vector<int64_t> outer_dims;
  for (int64_t d = 0; d < last; ++d)
    if (d != k) outer_dims.push_back(d);
  int64_t outer = 1;
  for (int64_t d : outer_dims) outer *= y_shape[d];
  const int64_t rows = y_shape[k], cols = y_shape[last];
  const int64_t row_tiles = (rows + kTile - 1) / kTile;
  const int64_t col_stride = src_stride[last], dst_row_stride = y_strides[k];
  const int64_t grain = std::max<int64_t>(1, 16384 / (kTile * std::max<int64_t>(cols, 1)));
  parallel_for(0, outer * row_tiles, grain, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      int64_t rem = t / row_tiles, src = 0, dst = 0;
      for (auto it = outer_dims.rbegin(); it != outer_dims.rend(); ++it) {
        const int64_t idx = rem % y_shape[*it];
        rem /= y_shape[*it];
        src += idx * src_stride[*it];
        dst += idx * y_strides[*it];
      }
      const int64_t i0 = (t % row_tiles) * kTile, i1 = std::min(rows, i0 + kTile);
      for (int64_t j0 = 0; j0 < cols; j0 += kTile) {
        const int64_t j1 = std::min(cols, j0 + kTile);
        for (int64_t j = j0; j < j1; ++j) {
          const E* xc = x + src + j * col_stride;
          E* yc = y + dst + j;
          for (int64_t i = i0; i < i1; ++i) yc[i * dst_row_stride] = xc[i];
        }
      }
    }
  });
}

template <typename E>
void transpose_typed(const std::vector<int64_t>& x_shape, const std::vector<int64_t>& perm,
                     const E* x, E* y) {
  const int64_t rank = static_cast<int64_t>(x_shape.size());
  std::vector<int64_t> x_strides(rank, 1), y_shape(rank), src_stride(rank);
  for (int64_t i = rank - 2; i >= 0; --i) x_strides[i] = x_strides[i + 1] * x_shape[i + 1];
  for (int64_t i = 0; i < rank; ++i) {
    y_shape[i] = x_shape[perm[i]];
    src_stride[i] = x_strides[perm[i]];
  }
  int64_t n = 1;
  for (int64_t d : x_shape) n *= d;
  if (n == 0) return;
  const int64_t inner = rank ? y_shape[rank - 1] : 1;
  const int64_t inner_stride = rank ? src_stride[rank - 1] : 1;
  // The input's last dim moved (a matrix transpose, K^T in attention): row-by-row copies
  // would read x with a large stride, so go by tiles. Extent-1 dims do not count.
  if (rank >= 2 && inner > 1 && inner_stride != 1) {
    int64_t k = -1;
    for (int64_t d = 0; d < rank - 1; ++d)
      if (src_stride[d] == 1 && y_shape[d] > 1) k = d;
    if (k >= 0 && y_shape[k] >= kTile / 4) return transpose_tiled(y_shape, src_stride, k, x, y);
  }
  parallel_for(0, n / inner, std::max<int64_t>(1, 16384 / inner), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      int64_t rem = r, src = 0;
      for (int64_t d = rank - 2; d >= 0; --d) {
        src += (rem % y_shape[d]) * src_stride[d];
        rem /= y_shape[d];
      }
      E* yr = y + r * inner;
      if (inner_stride == 1) {
        // Head permutations ([B,S,H,D] -> [B,H,S,D]) move whole rows.
        std::memcpy(yr, x + src, static_cast<size_t>(inner) * sizeof(E));
      } else {
        for (int64_t j = 0; j < inner; ++j) yr[j] = x[src + j * inner_stride];
      }
    }
  });
}

}  // namespace

void transpose(const std::vector<int64_t>& x_shape, const std::vector<int64_t>& perm, const void* x,
               void* y, size_t elem_size) {
  switch (elem_size) {
    case 8:
      transpose_typed(x_shape, perm, static_cast<const int64_t*>(x), static_cast<int64_t*>(y));
      break;
    case 4:
      transpose_typed(x_shape, perm, static_cast<const int32_t*>(x), static_cast<int32_t*>(y));
      break;
    case 2:
      transpose_typed(x_shape, perm, static_cast<const int16_t*>(x), static_cast<int16_t*>(y));
      break;
    default:
      transpose_typed(x_shape, perm, static_cast<const int8_t*>(x), static_cast<int8_t*>(y));
      break;
  }
}

}  // namespace ortmodule
