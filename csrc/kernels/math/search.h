// Binary search over a sorted row, shared by SearchSorted's CPU loop (ops/sort_search_ops.cpp)
// and its CUDA kernel (backends/cuda/sort_search.cu).
#pragma once

#include <cstdint>

#include "kernels/math/host_device.h"

namespace ortmodule {
namespace math {

// The insertion point of `v` in row[0..m) (ascending): the first position whose element is
// >= v (right: > v), with torch.searchsorted's comparisons, !(row[mid] >= v) moving right, so
// that a NaN value lands after every element and NaN elements (sorted last) count as larger
// than every number.
template <typename T>
ORTM_HOST_DEVICE int64_t search_sorted(const T* row, int64_t m, T v, bool right) {
  int64_t start = 0, end = m;
  while (start < end) {
    const int64_t mid = start + ((end - start) >> 1);
    const bool go_right = right ? !(row[mid] > v) : !(row[mid] >= v);
    if (go_right) {
      start = mid + 1;
    } else {
      end = mid;
    }
  }
  return start;
}

}  // namespace math
}  // namespace ortmodule
