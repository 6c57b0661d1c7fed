#include "kernels/cpu/reduce.h"

#include <cstdint>
#include <limits>

#include "kernels/math/reduce.h"
#include "kernels/parallel.h"

namespace ortmodule {

namespace {

// Offsets into x of the first element of every output (`bases`) and of every
// element within one reduction relative to that first one (`members`).
struct ReduceIndex {
  std::vector<int64_t> bases;
  std::vector<int64_t> members;
};

ReduceIndex index_reduction(const std::vector<int64_t>& x_shape,
                            const std::vector<int64_t>& keep_shape) {
  const size_t rank = x_shape.size();
  std::vector<int64_t> stride(rank, 1);
  for (size_t i = rank; i-- > 1;) stride[i - 1] = stride[i] * x_shape[i];
  ReduceIndex idx;
  idx.bases.assign(1, 0);
  idx.members.assign(1, 0);
  // Row-major enumeration: the last dim varies fastest, so grow from the first dim.
  for (size_t d = 0; d < rank; ++d) {
    bool reduced = keep_shape[d] == 1 && x_shape[d] != 1;
    std::vector<int64_t>& list = reduced ? idx.members : idx.bases;
    std::vector<int64_t> grown;
    grown.reserve(list.size() * static_cast<size_t>(x_shape[d]));
    for (int64_t off : list)
      for (int64_t j = 0; j < x_shape[d]; ++j) grown.push_back(off + j * stride[d]);
    list.swap(grown);
  }
  return idx;
}

}  // namespace

template <typename T>
void reduce_extreme_forward(const std::vector<int64_t>& x_shape, const T* x,
                            const std::vector<int64_t>& keep_shape, T* y, bool is_max) {
  const ReduceIndex idx = index_reduction(x_shape, keep_shape);
  const T empty =
      std::numeric_limits<T>::has_infinity
          ? (is_max ? -std::numeric_limits<T>::infinity() : std::numeric_limits<T>::infinity())
          : (is_max ? std::numeric_limits<T>::lowest() : std::numeric_limits<T>::max());
  const int64_t n_out = static_cast<int64_t>(idx.bases.size());
  const int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(1, idx.members.size()));
  parallel_for(0, n_out, grain, [&](int64_t o0, int64_t o1) {
    for (int64_t o = o0; o < o1; ++o) {
      const T* base = x + idx.bases[o];
      T best = empty;
      for (int64_t off : idx.members) {
        T v = base[off];
        if (math::is_nan(best)) break;
        best = math::extreme_update(best, v, is_max);
      }
      y[o] = best;
    }
  });
}

template <typename T>
void reduce_extreme_backward(const std::vector<int64_t>& x_shape, const T* x,
                             const std::vector<int64_t>& keep_shape, const T* y, const T* dy,
                             T* dx) {
  const ReduceIndex idx = index_reduction(x_shape, keep_shape);
  const int64_t n_out = static_cast<int64_t>(idx.bases.size());
  const int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(1, idx.members.size()));
  parallel_for(0, n_out, grain, [&](int64_t o0, int64_t o1) {
    for (int64_t o = o0; o < o1; ++o) {
      const int64_t b = idx.bases[o];
      int64_t ties = 0;
      for (int64_t off : idx.members) ties += x[b + off] == y[o];
      const T share = ties ? dy[o] / static_cast<T>(ties) : T(0);
      for (int64_t off : idx.members) dx[b + off] = x[b + off] == y[o] ? share : T(0);
    }
  });
}

template <typename T>
void arg_extreme_forward(int64_t outer, int64_t dim, int64_t inner, const T* x, int64_t* y,
                         bool is_max, bool select_last) {
  parallel_for(
      0, outer * inner, std::max<int64_t>(1, 32768 / std::max<int64_t>(1, dim)),
      [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
          const T* row = x + (r / inner) * dim * inner + r % inner;
          int64_t best = 0;
          for (int64_t j = 1; j < dim; ++j) {
            if (math::arg_extreme_takes(row[j * inner], row[best * inner], is_max, select_last))
              best = j;
          }
          y[r] = best;
        }
      });
}

#define ORTM_INSTANTIATE_EXTREME(T)                                               \
  template void reduce_extreme_forward<T>(const std::vector<int64_t>&, const T*,  \
                                          const std::vector<int64_t>&, T*, bool); \
  template void arg_extreme_forward<T>(int64_t, int64_t, int64_t, const T*, int64_t*, bool, bool);
ORTM_INSTANTIATE_EXTREME(float)
ORTM_INSTANTIATE_EXTREME(double)
ORTM_INSTANTIATE_EXTREME(int64_t)
ORTM_INSTANTIATE_EXTREME(int32_t)
ORTM_INSTANTIATE_EXTREME(uint8_t)
ORTM_INSTANTIATE_EXTREME(int8_t)
ORTM_INSTANTIATE_EXTREME(int16_t)
ORTM_INSTANTIATE_EXTREME(uint16_t)
ORTM_INSTANTIATE_EXTREME(uint32_t)
ORTM_INSTANTIATE_EXTREME(uint64_t)
#undef ORTM_INSTANTIATE_EXTREME
template void reduce_extreme_backward<float>(const std::vector<int64_t>&, const float*,
                                             const std::vector<int64_t>&, const float*,
                                             const float*, float*);
template void reduce_extreme_backward<double>(const std::vector<int64_t>&, const double*,
                                              const std::vector<int64_t>&, const double*,
                                              const double*, double*);

}  // namespace ortmodule
