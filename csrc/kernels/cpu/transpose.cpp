#include "kernels/cpu/transpose.h"

#include <cstring>

#include "kernels/parallel.h"

namespace ortmodule {

namespace {

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
  parallel_for(0, n / inner, std::max<int64_t>(1, 16384 / inner), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      int64_t rem = r, src = 0;
      for (int64_t d = rank - 2; d >= 0; --d) {
        src += (rem % y_shape[d]) * src_stride[d];
        rem /= y_shape[d];
      }
      E* yr = y + r * inner;
      for (int64_t j = 0; j < inner; ++j) yr[j] = x[src + j * inner_stride];
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
