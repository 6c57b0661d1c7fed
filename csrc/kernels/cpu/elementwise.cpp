#include "kernels/cpu/elementwise.h"

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "kernels/cpu/cpu_isa.h"

namespace ortmodule {

namespace {
// Floats sum in double; signed integers in their unsigned type, which wraps as ONNX's (and
// numpy's) integer sums do (a signed overflow is undefined in C++).
template <typename T, typename = void>
struct SumAccumulator {
  using type = T;
};
template <typename T>
struct SumAccumulator<T, std::enable_if_t<std::is_floating_point_v<T>>> {
  using type = double;
};
template <typename T>
struct SumAccumulator<T, std::enable_if_t<std::is_integral_v<T> && std::is_signed_v<T>>> {
  using type = std::make_unsigned_t<T>;
};
}  // namespace

template <typename T>
void sum_to_shape(const std::vector<int64_t>& x_shape, const T* x,
                  const std::vector<int64_t>& out_shape, T* y) {
  const int64_t rank = static_cast<int64_t>(x_shape.size());
  int64_t n_out = 1, n_in = 1;
  for (int64_t d : out_shape) n_out *= d;
  for (int64_t d : x_shape) n_in *= d;
  // Strides into y for each dim of x (0 where y is broadcast).
  std::vector<int64_t> sy(rank, 0);
  int64_t k = 1;
  for (int64_t i = rank - 1; i >= 0; --i) {
    int64_t io = i - (rank - static_cast<int64_t>(out_shape.size()));
    int64_t d = io >= 0 ? out_shape[io] : 1;
    sy[i] = d == 1 ? 0 : k;
    k *= d;
  }
  using Acc = typename SumAccumulator<T>::type;
  std::vector<Acc> acc(static_cast<size_t>(n_out), Acc(0));
  // Leading reduced dims ([R, n_out] layout) are common: sum rows in parallel over columns.
  bool leading_only = n_out > 0 && n_in % n_out == 0;
  if (leading_only) {
    int64_t suffix = 1;
    for (int64_t i = rank - 1; i >= 0 && suffix < n_out; --i) {
      if (sy[i] == 0 && x_shape[i] != 1) {
        leading_only = false;
        break;
      }
      suffix *= x_shape[i];
    }
    leading_only = leading_only && suffix == n_out;
  }
  const int64_t rows = leading_only ? n_in / n_out : 0;
  // float32 rows sum on the vector kernels, in double lanes (the same bits).
  const auto vec_sum = std::is_same_v<T, float> ? vec_kernels().sum_rows_f64 : nullptr;
  // Row blocks of a fixed size (not one per thread) keep the summation order, and so the
  // result, independent of the thread count.
  constexpr int64_t kRowBlock = 64;
  const int64_t blocks = (rows + kRowBlock - 1) / kRowBlock;
  if (leading_only && n_out < 16384 && blocks > 1) {
    // Few columns ([B*S, N] -> [N], a bias gradient): parallel over row blocks, each
    // summing its rows into its own partial row; the partials are added in block order.
    std::vector<Acc> partial(static_cast<size_t>(blocks * n_out), Acc(0));
    parallel_for(0, blocks, 1, [&](int64_t b0, int64_t b1) {
      for (int64_t blk = b0; blk < b1; ++blk) {
        Acc* p = partial.data() + blk * n_out;
        const int64_t r_end = std::min(rows, (blk + 1) * kRowBlock);
        if constexpr (std::is_same_v<T, float>) {
          if (vec_sum) {
            vec_sum(r_end - blk * kRowBlock, n_out, x + blk * kRowBlock * n_out, n_out, p);
            continue;
          }
        }
        for (int64_t r = blk * kRowBlock; r < r_end; ++r) {
          const T* xr = x + r * n_out;
          for (int64_t c = 0; c < n_out; ++c) p[c] += xr[c];
        }
      }
    });
    for (int64_t blk = 0; blk < blocks; ++blk) {
      const Acc* p = partial.data() + blk * n_out;
      for (int64_t c = 0; c < n_out; ++c) acc[c] += p[c];
    }
  } else if (leading_only) {
    parallel_for(0, n_out, 1024, [&](int64_t c0, int64_t c1) {
      if constexpr (std::is_same_v<T, float>) {
        if (vec_sum) return vec_sum(rows, c1 - c0, x + c0, n_out, acc.data() + c0);
      }
      for (int64_t r = 0; r < rows; ++r) {
        const T* xr = x + r * n_out;
        for (int64_t c = c0; c < c1; ++c) acc[c] += xr[c];
      }
    });
  } else if (n_in > 0) {
    // Innermost run of dims that are all reduced or all kept (extent-1 dims fit
    // either): contiguous in x, so each outer position costs one index computation.
    int64_t split = rank, inner = 1, last = rank - 1;
    while (last > 0 && x_shape[last] == 1) --last;
    const bool inner_reduced = rank > 0 && sy[last] == 0;
    while (split > 0) {
      const int64_t d = split - 1;
      const bool reduced = sy[d] == 0;
      if (x_shape[d] != 1 && reduced != inner_reduced) break;
      inner *= x_shape[d];
      --split;
    }
    const int64_t outer = n_in / inner;
    auto sum_rows = [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        int64_t rem = r, o = 0;
        for (int64_t d = split - 1; d >= 0; --d) {
          o += (rem % x_shape[d]) * sy[d];
          rem /= x_shape[d];
        }
        const T* xr = x + r * inner;
        if (inner_reduced) {
          // Four running sums: one would wait on each add's latency.
          Acc s[4] = {0, 0, 0, 0};
          int64_t c = 0;
          for (; c + 4 <= inner; c += 4)
            for (int k = 0; k < 4; ++k) s[k] += xr[c + k];
          for (; c < inner; ++c) s[0] += xr[c];
          acc[o] += (s[0] + s[1]) + (s[2] + s[3]);
        } else {
          Acc* ar = acc.data() + o;
          for (int64_t c = 0; c < inner; ++c) ar[c] += xr[c];
        }
      }
    };
    // Rows with distinct outputs (only the innermost dims reduced, as ReduceSum over the
    // last axis) can be summed on several threads; otherwise rows share outputs.
    bool rows_distinct = inner_reduced;
    for (int64_t d = 0; d < split; ++d)
      if (sy[d] == 0 && x_shape[d] != 1) rows_distinct = false;
    if (rows_distinct) {
      parallel_for(0, outer, std::max<int64_t>(1, 32768 / inner), sum_rows);
    } else {
      sum_rows(0, outer);
    }
  }
  for (int64_t i = 0; i < n_out; ++i) y[i] = static_cast<T>(acc[i]);
}

template void sum_to_shape<float>(const std::vector<int64_t>&, const float*,
                                  const std::vector<int64_t>&, float*);
template void sum_to_shape<double>(const std::vector<int64_t>&, const double*,
                                   const std::vector<int64_t>&, double*);
template void sum_to_shape<int64_t>(const std::vector<int64_t>&, const int64_t*,
                                    const std::vector<int64_t>&, int64_t*);
template void sum_to_shape<int32_t>(const std::vector<int64_t>&, const int32_t*,
                                    const std::vector<int64_t>&, int32_t*);
template void sum_to_shape<uint8_t>(const std::vector<int64_t>&, const uint8_t*,
                                    const std::vector<int64_t>&, uint8_t*);
template void sum_to_shape<int8_t>(const std::vector<int64_t>&, const int8_t*,
                                   const std::vector<int64_t>&, int8_t*);
template void sum_to_shape<int16_t>(const std::vector<int64_t>&, const int16_t*,
                                    const std::vector<int64_t>&, int16_t*);
template void sum_to_shape<uint16_t>(const std::vector<int64_t>&, const uint16_t*,
                                     const std::vector<int64_t>&, uint16_t*);
template void sum_to_shape<uint32_t>(const std::vector<int64_t>&, const uint32_t*,
                                     const std::vector<int64_t>&, uint32_t*);
template void sum_to_shape<uint64_t>(const std::vector<int64_t>&, const uint64_t*,
                                     const std::vector<int64_t>&, uint64_t*);

}  // namespace ortmodule
