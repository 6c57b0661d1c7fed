// Element-wise loops: unary maps and numpy-broadcast binary maps over contiguous
// row-major tensors. The per-element function is a template parameter so each op
// compiles to its own tight loop.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/parallel.h"

namespace ortmodule {

constexpr int64_t kElementwiseGrain = 32768;

// x: [n] -> y: [n]
template <typename T, typename U, typename F>
void unary_map(int64_t n, const T* x, U* y, F f) {
  parallel_for(0, n, kElementwiseGrain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) y[i] = f(x[i]);
  });
}

// x[0..k), each [n], k >= 2 -> y: [n] = f(...f(f(x0, x1), x2)..., x(k-1)), folded in input
// order in blocks that stay in L1 (one pass over memory). y may be x[0].
template <typename T, typename F>
void fold_map(int64_t n, const std::vector<const T*>& x, T* y, F f) {
  constexpr int64_t kBlock = 2048;
  parallel_for(0, n, kElementwiseGrain, [&](int64_t b, int64_t e) {
    for (int64_t b0 = b; b0 < e; b0 += kBlock) {
      const int64_t b1 = e < b0 + kBlock ? e : b0 + kBlock;
      for (int64_t i = b0; i < b1; ++i) y[i] = f(x[0][i], x[1][i]);
      for (size_t k = 2; k < x.size(); ++k)
        for (int64_t i = b0; i < b1; ++i) y[i] = f(y[i], x[k][i]);
    }
  });
}

// a: a_shape, b: b_shape -> y: out_shape (numpy broadcasting; shapes right-aligned).
template <typename T, typename U, typename F>
void binary_map(const std::vector<int64_t>& a_shape, const T* a,
                const std::vector<int64_t>& b_shape, const T* b,
                const std::vector<int64_t>& out_shape, U* y, F f) {
  const int64_t rank = static_cast<int64_t>(out_shape.size());
  int64_t n = 1;
  for (int64_t d : out_shape) n *= d;
  if (n == 0) return;  // an empty operand has no element 0 to read
  auto numel = [](const std::vector<int64_t>& s) {
    int64_t k = 1;
    for (int64_t d : s) k *= d;
    return k;
  };
  const int64_t na = numel(a_shape), nb = numel(b_shape);
  if (na == n && nb == n) {
    parallel_for(0, n, kElementwiseGrain, [&](int64_t s, int64_t e) {
      for (int64_t i = s; i < e; ++i) y[i] = f(a[i], b[i]);
    });
    return;
  }
  if (nb == 1 && na == n) {
    const T bv = b[0];
    parallel_for(0, n, kElementwiseGrain, [&](int64_t s, int64_t e) {
      for (int64_t i = s; i < e; ++i) y[i] = f(a[i], bv);
    });
    return;
  }
  if (na == 1 && nb == n) {
    const T av = a[0];
    parallel_for(0, n, kElementwiseGrain, [&](int64_t s, int64_t e) {
      for (int64_t i = s; i < e; ++i) y[i] = f(av, b[i]);
    });
    return;
  }
  // Broadcast strides: 0 along dims where the operand has extent 1.
  std::vector<int64_t> sa(rank, 0), sb(rank, 0);
  int64_t ka = 1, kb = 1;
  for (int64_t i = rank - 1; i >= 0; --i) {
    int64_t ia = i - (rank - static_cast<int64_t>(a_shape.size()));
    int64_t ib = i - (rank - static_cast<int64_t>(b_shape.size()));
    int64_t da = ia >= 0 ? a_shape[ia] : 1;
    int64_t db = ib >= 0 ? b_shape[ib] : 1;
    sa[i] = da == 1 ? 0 : ka;
    sb[i] = db == 1 ? 0 : kb;
    ka *= da;
    kb *= db;
  }
  const int64_t inner = rank ? out_shape[rank - 1] : 1;
  const int64_t rows = inner ? n / inner : 0;
  const int64_t ia_inner = rank ? sa[rank - 1] : 0, ib_inner = rank ? sb[rank - 1] : 0;
  parallel_for(0, rows, std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(inner, 1)),
               [&](int64_t r0, int64_t r1) {
                 for (int64_t r = r0; r < r1; ++r) {
                   int64_t oa = 0, ob = 0, rem = r;
                   for (int64_t d = rank - 2; d >= 0; --d) {
                     int64_t idx = rem % out_shape[d];
                     rem /= out_shape[d];
                     oa += idx * sa[d];
                     ob += idx * sb[d];
                   }
                   U* yr = y + r * inner;
                   const T* ar = a + oa;
                   const T* br = b + ob;
                   // The common patterns ([.., N] op [N] bias, [.., N] op [.., 1]) get
                   // loops with unit or zero strides, which the compiler vectorizes.
                   if (ia_inner == 1 && ib_inner == 1) {
                     for (int64_t j = 0; j < inner; ++j) yr[j] = f(ar[j], br[j]);
                   } else if (ia_inner == 1 && ib_inner == 0) {
                     const T bv = br[0];
                     for (int64_t j = 0; j < inner; ++j) yr[j] = f(ar[j], bv);
                   } else if (ia_inner == 0 && ib_inner == 1) {
                     const T av = ar[0];
                     for (int64_t j = 0; j < inner; ++j) yr[j] = f(av, br[j]);
                   } else {
                     for (int64_t j = 0; j < inner; ++j)
                       yr[j] = f(ar[j * ia_inner], br[j * ib_inner]);
                   }
                 }
               });
}

// Sums x (x_shape) down to out_shape, which broadcasts to x_shape (undoing broadcast).
template <typename T>
void sum_to_shape(const std::vector<int64_t>& x_shape, const T* x,
                  const std::vector<int64_t>& out_shape, T* y);

}  // namespace ortmodule
