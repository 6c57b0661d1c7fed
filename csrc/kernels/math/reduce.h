// Per-element steps of the extreme-value reductions (ReduceMax / ReduceMin, ArgMax / ArgMin),
// the accumulating ones (ReduceProd, ReduceL1, ReduceL2, ReduceLogSumExp) and TopK's order,
// shared by the CPU loops (kernels/cpu/reduce.cpp) and the CUDA kernels (reduce_axes.cu,
// reduce_accumulate.cu, topk.cu).
#pragma once

#include <cmath>
#include <type_traits>

#include "kernels/math/host_device.h"

namespace ortmodule {
namespace math {

template <typename T>
ORTM_HOST_DEVICE bool is_nan(T v) {
  return v != v;  // false for integers
}

// The running extreme after seeing v: NaN propagates (the first NaN stays), else the larger
// (is_max) or smaller value.
template <typename T>
ORTM_HOST_DEVICE T extreme_update(T best, T v, bool is_max) {
  if (is_nan(best)) return best;
  return is_nan(v) || (is_max ? v > best : v < best) ? v : best;
}

// Whether an arg-extreme scan over increasing indices moves from the current best b to a
// later value v: NaN counts as the extreme (the first one, or the last with select_last);
// ties go to the first index unless select_last.
template <typename T>
ORTM_HOST_DEVICE bool arg_extreme_takes(T v, T b, bool is_max, bool select_last) {
  if (is_nan(b)) return select_last && is_nan(v);
  if (is_nan(v)) return true;
  return (is_max ? v > b : v < b) || (select_last && v == b);
}

// ---- ReduceProd, ReduceL1, ReduceL2, ReduceLogSumExp ----

enum class Accumulation : int { Prod = 0, L1 = 1, L2 = 2, LogSumExp = 3 };

// The accumulator of T: double for floating types, 64-bit integers otherwise (integers take
// only the product, which wraps as the type's own multiplication does).
template <typename T>
using AccumulatorOf =
    std::conditional_t<std::is_floating_point<T>::value, double,
                       std::conditional_t<std::is_signed<T>::value, long long, unsigned long long>>;

template <typename A>
ORTM_HOST_DEVICE A accumulation_identity(Accumulation k) {
  return k == Accumulation::Prod ? A(1) : A(0);
}

// LogSumExp's shift: the slice's maximum m, or 0 where m is infinite (every element -inf
// gives log(0) = -inf, an inf gives inf, as torch.logsumexp); NaN stays NaN.
template <typename A>
ORTM_HOST_DEVICE A logsumexp_shift(A m) {
  if constexpr (std::is_floating_point<A>::value) {
    return std::isinf(m) ? A(0) : m;
  } else {
    return m;
  }
}

template <typename A>
ORTM_HOST_DEVICE A accumulate(Accumulation k, A a, A x, A shift) {
  if constexpr (std::is_floating_point<A>::value) {
    switch (k) {
      case Accumulation::Prod:
        return a * x;
      case Accumulation::L1:
        return a + std::fabs(x);
      case Accumulation::L2:
        return a + x * x;
      default:
        return a + std::exp(x - shift);
    }
  } else {
    (void)k;
    (void)shift;
    return a * x;
  }
}

// Two partial accumulations of the same slice (blocks of the CUDA kernels).
template <typename A>
ORTM_HOST_DEVICE A accumulate_combine(Accumulation k, A a, A b) {
  return k == Accumulation::Prod ? a * b : a + b;
}

template <typename A>
ORTM_HOST_DEVICE A accumulate_finish(Accumulation k, A a, A shift) {
  if constexpr (std::is_floating_point<A>::value) {
    if (k == Accumulation::L2) return std::sqrt(a);
    if (k == Accumulation::LogSumExp) return std::log(a) + shift;
  }
  (void)k;
  (void)shift;
  return a;
}

// ReduceProd's gradient at one element of a slice with `zeros` zero elements, product y and
// product of its non-zero elements `nonzero_prod` (as torch.prod's backward): no zero:
// dy * (y / x); one zero: dy times the product of the others at the zero, 0 elsewhere; more
// zeros: 0.
template <typename T>
ORTM_HOST_DEVICE T prod_grad(T x, T y, T dy, long long zeros, T nonzero_prod) {
  if (zeros == 0) return dy * (y / x);
  if (zeros == 1 && x == T(0)) return dy * nonzero_prod;
  return T(0);
}

// ---- TopK ----

// Whether a comes before b in TopK's order (largest first, or smallest first): NaN counts as
// larger than every number, as torch.topk and torch.sort treat it. Equal elements keep the
// order of their indices (the callers' tie-break), as ONNX TopK and torch.sort(stable=True).
template <typename T>
ORTM_HOST_DEVICE bool topk_before(T a, T b, bool largest) {
  if (largest) return is_nan(a) ? !is_nan(b) : (!is_nan(b) && a > b);
  return is_nan(b) ? !is_nan(a) : (!is_nan(a) && a < b);
}

}  // namespace math
}  // namespace ortmodule
