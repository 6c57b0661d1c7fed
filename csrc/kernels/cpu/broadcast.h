// N-ary numpy broadcasting over contiguous row-major tensors: for each output
// element, the offsets of the corresponding element of every operand. Used by ops
// whose operands differ in dtype (Where, comparisons) where binary_map does not fit.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

#include "kernels/parallel.h"

namespace ortmodule {

// Strides of `shape` seen through broadcasting to `out` (0 along broadcast dims),
// shapes right-aligned.
inline std::vector<int64_t> broadcast_strides(const std::vector<int64_t>& shape,
                                              const std::vector<int64_t>& out) {
  const size_t rank = out.size();
  std::vector<int64_t> strides(rank, 0);
  int64_t k = 1;
  for (size_t i = rank; i-- > 0;) {
    const int64_t j = static_cast<int64_t>(i) - static_cast<int64_t>(rank - shape.size());
    const int64_t d = j >= 0 ? shape[j] : 1;
    strides[i] = d == 1 ? 0 : k;
    k *= d;
  }
  return strides;
}

// The element offset, in an operand with broadcast `strides` (broadcast_strides), of index i
// over the first `dims` dims of `out` (i counts in out's row-major order over those dims).
inline int64_t broadcast_offset(const std::vector<int64_t>& out,
                                const std::vector<int64_t>& strides, int64_t i, size_t dims) {
  int64_t offset = 0;
  for (size_t d = dims; d-- > 0;) {
    offset += (i % out[d]) * strides[d];
    i /= out[d];
  }
  return offset;
}

// Calls f(i, offsets) for every output index i, offsets[k] being operand k's
// element offset. Rows of the innermost dim run on parallel chunks.
template <size_t N, typename F>
void for_each_broadcast(const std::vector<int64_t>& out,
                        const std::array<std::vector<int64_t>, N>& operand_shapes, F f) {
  const int64_t rank = static_cast<int64_t>(out.size());
  std::array<std::vector<int64_t>, N> st;
  for (size_t k = 0; k < N; ++k) st[k] = broadcast_strides(operand_shapes[k], out);
  int64_t n = 1;
  for (int64_t d : out) n *= d;
  const int64_t inner = rank ? out[rank - 1] : 1;
  if (n == 0 || inner == 0) return;
  const int64_t rows = n / inner;
  parallel_for(0, rows, std::max<int64_t>(1, 32768 / inner), [&](int64_t r0, int64_t r1) {
    std::array<int64_t, N> off{};
    for (int64_t r = r0; r < r1; ++r) {
      std::array<int64_t, N> base{};
      int64_t rem = r;
      for (int64_t d = rank - 2; d >= 0; --d) {
        const int64_t idx = rem % out[d];
        rem /= out[d];
        for (size_t k = 0; k < N; ++k) base[k] += idx * st[k][d];
      }
      for (int64_t c = 0; c < inner; ++c) {
        for (size_t k = 0; k < N; ++k) off[k] = base[k] + c * (rank ? st[k][rank - 1] : 0);
        f(r * inner + c, off);
      }
    }
  });
}

}  // namespace ortmodule
