#include "kernels/cpu/reduce.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <numeric>

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

template <typename T>
void reduce_accumulate_forward(const std::vector<int64_t>& x_shape, const T* x,
                               const std::vector<int64_t>& keep_shape, T* y,
                               math::Accumulation kind) {
  using A = math::AccumulatorOf<T>;
  const ReduceIndex idx = index_reduction(x_shape, keep_shape);
  const int64_t n_out = static_cast<int64_t>(idx.bases.size());
  const int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(1, idx.members.size()));
  parallel_for(0, n_out, grain, [&](int64_t o0, int64_t o1) {
    for (int64_t o = o0; o < o1; ++o) {
      const T* base = x + idx.bases[o];
      A shift = A(0);
      if (kind == math::Accumulation::LogSumExp) {
        A m = std::numeric_limits<A>::has_infinity ? -std::numeric_limits<A>::infinity()
                                                   : std::numeric_limits<A>::lowest();
        for (int64_t off : idx.members)
          m = math::extreme_update(m, static_cast<A>(base[off]), true);
        shift = math::logsumexp_shift(m);
      }
      A a = math::accumulation_identity<A>(kind);
      for (int64_t off : idx.members)
        a = math::accumulate(kind, a, static_cast<A>(base[off]), shift);
      y[o] = static_cast<T>(math::accumulate_finish(kind, a, shift));
    }
  });
}

template <typename T>
void reduce_prod_backward(const std::vector<int64_t>& x_shape, const T* x,
                          const std::vector<int64_t>& keep_shape, const T* y, const T* dy, T* dx) {
  const ReduceIndex idx = index_reduction(x_shape, keep_shape);
  const int64_t n_out = static_cast<int64_t>(idx.bases.size());
  const int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(1, idx.members.size()));
  parallel_for(0, n_out, grain, [&](int64_t o0, int64_t o1) {
    for (int64_t o = o0; o < o1; ++o) {
      const int64_t b = idx.bases[o];
      long long zeros = 0;
      double nonzero_prod = 1.0;
      for (int64_t off : idx.members) {
        const T v = x[b + off];
        if (v == T(0)) {
          ++zeros;
        } else {
          nonzero_prod *= static_cast<double>(v);
        }
      }
      const T others = static_cast<T>(nonzero_prod);
      for (int64_t off : idx.members)
        dx[b + off] = math::prod_grad(x[b + off], y[o], dy[o], zeros, others);
    }
  });
}

template <typename T>
void topk_forward(int64_t outer, int64_t dim, int64_t inner, int64_t k, const T* x, T* values,
                  int64_t* indices, bool largest) {
  parallel_for(0, outer * inner, std::max<int64_t>(1, 4096 / std::max<int64_t>(1, dim)),
               [&](int64_t c0, int64_t c1) {
                 std::vector<int64_t> order(static_cast<size_t>(dim));
                 for (int64_t c = c0; c < c1; ++c) {
                   const int64_t o = c / inner, i = c % inner;
                   const T* col = x + o * dim * inner + i;
                   std::iota(order.begin(), order.end(), int64_t(0));
                   auto before = [&](int64_t a, int64_t b) {
                     return math::topk_before(col[a * inner], col[b * inner], largest);
                   };
                   // Stable: equal elements keep their index order.
                   if (k < dim) {
                     std::partial_sort(order.begin(), order.begin() + k, order.end(),
                                       [&](int64_t a, int64_t b) {
                                         return before(a, b) || (!before(b, a) && a < b);
                                       });
                   } else {
                     std::stable_sort(order.begin(), order.end(), before);
                   }
                   for (int64_t j = 0; j < k; ++j) {
                     const int64_t at = o * k * inner + j * inner + i;
                     indices[at] = order[static_cast<size_t>(j)];
                     values[at] = col[order[static_cast<size_t>(j)] * inner];
                   }
                 }
               });
}

template void reduce_accumulate_forward<float>(const std::vector<int64_t>&, const float*,
                                               const std::vector<int64_t>&, float*,
                                               math::Accumulation);
template void reduce_accumulate_forward<double>(const std::vector<int64_t>&, const double*,
                                                const std::vector<int64_t>&, double*,
                                                math::Accumulation);
#define ORTM_INSTANTIATE_INTEGER_PRODUCT(T)                                         \
  template void reduce_accumulate_forward<T>(const std::vector<int64_t>&, const T*, \
                                             const std::vector<int64_t>&, T*, math::Accumulation);
ORTM_INSTANTIATE_INTEGER_PRODUCT(int64_t)
ORTM_INSTANTIATE_INTEGER_PRODUCT(int32_t)
ORTM_INSTANTIATE_INTEGER_PRODUCT(int16_t)
ORTM_INSTANTIATE_INTEGER_PRODUCT(int8_t)
ORTM_INSTANTIATE_INTEGER_PRODUCT(uint64_t)
ORTM_INSTANTIATE_INTEGER_PRODUCT(uint32_t)
ORTM_INSTANTIATE_INTEGER_PRODUCT(uint16_t)
ORTM_INSTANTIATE_INTEGER_PRODUCT(uint8_t)
#undef ORTM_INSTANTIATE_INTEGER_PRODUCT
template void reduce_prod_backward<float>(const std::vector<int64_t>&, const float*,
                                          const std::vector<int64_t>&, const float*, const float*,
                                          float*);
template void reduce_prod_backward<double>(const std::vector<int64_t>&, const double*,
                                           const std::vector<int64_t>&, const double*,
                                           const double*, double*);
#define ORTM_INSTANTIATE_TOPK(T) \
  template void topk_forward<T>(int64_t, int64_t, int64_t, int64_t, const T*, T*, int64_t*, bool);
ORTM_INSTANTIATE_TOPK(float)
ORTM_INSTANTIATE_TOPK(double)
ORTM_INSTANTIATE_TOPK(int64_t)
ORTM_INSTANTIATE_TOPK(int32_t)
ORTM_INSTANTIATE_TOPK(int16_t)
ORTM_INSTANTIATE_TOPK(int8_t)
ORTM_INSTANTIATE_TOPK(uint64_t)
ORTM_INSTANTIATE_TOPK(uint32_t)
ORTM_INSTANTIATE_TOPK(uint16_t)
ORTM_INSTANTIATE_TOPK(uint8_t)
#undef ORTM_INSTANTIATE_TOPK

}  // namespace ortmodule
