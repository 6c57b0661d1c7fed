// Per-element steps of the extreme-value reductions (ReduceMax / ReduceMin, ArgMax / ArgMin),
// shared by the CPU loops (kernels/cpu/reduce.cpp) and the CUDA kernels (reduce_axes.cu).
#pragma once

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

}  // namespace math
}  // namespace ortmodule
