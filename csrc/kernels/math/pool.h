// Pooling window arithmetic shared by the CPU loops and the CUDA kernels.
#pragma once

#include <cstdint>

#include "kernels/math/host_device.h"

namespace ortmodule {

// Kernel taps k in [*lo, *hi) whose input position start + k * dilation lies in [0, size),
// where start = out * stride - pad. Iterating only these taps keeps bounds checks out of the
// inner loop and makes padding cells invisible (they never win a max, never count in a mean).
ORTM_HOST_DEVICE void pool_tap_range(int64_t start, int64_t dilation, int64_t size, int64_t kernel,
                                     int64_t* lo, int64_t* hi) {
  int64_t first = start < 0 ? (-start + dilation - 1) / dilation : 0;
  int64_t last = size - start <= 0 ? 0 : (size - start + dilation - 1) / dilation;
  if (first > kernel) first = kernel;
  if (last > kernel) last = kernel;
  *lo = first;
  *hi = last < first ? first : last;
}

// Taps of a window that fall inside the padded input (pad_begin + size + pad_end cells), for
// AveragePool's count_include_pad divisor: taps past the end padding (ceil_mode) do not count.
ORTM_HOST_DEVICE int64_t pool_padded_taps(int64_t start, int64_t dilation, int64_t size,
                                          int64_t pad_begin, int64_t pad_end, int64_t kernel) {
  int64_t lo, hi;
  pool_tap_range(start + pad_begin, dilation, size + pad_begin + pad_end, kernel, &lo, &hi);
  return hi - lo;
}

// MaxPool storage_order=1: the position `rem` within a plane of `rank` spatial dims `spatial`,
// counted row-major (the last axis fastest), recounted column-major (the first axis fastest),
// or back when !to_column.
ORTM_HOST_DEVICE int64_t pool_storage_order_position(int64_t rem, const int64_t* spatial, int rank,
                                                     bool to_column) {
  int64_t plane = 1;
  for (int d = 0; d < rank; ++d) plane *= spatial[d];
  int64_t out = 0, scale = plane;
  if (to_column) {
    // row-major: rem = ((i0 * S1) + i1) * S2 + i2 ...; column-major: i0 + S0 * (i1 + S1 * i2)
    for (int d = rank - 1; d >= 0; --d) {
      scale /= spatial[d];
      out += (rem % spatial[d]) * scale;
      rem /= spatial[d];
    }
  } else {
    for (int d = 0; d < rank; ++d) {
      scale /= spatial[d];
      out += (rem % spatial[d]) * scale;
      rem /= spatial[d];
    }
  }
  return out;
}

// Strictly greater keeps the first maximum on ties; NaN wins so it propagates, as in PyTorch
// (candidate != candidate is the NaN test that needs no host/device-specific isnan). Both
// comparisons are always evaluated (an integer | rather than ||) so callers can select without
// a branch: on random data a branch per tap mispredicts about half the time.
template <typename T>
ORTM_HOST_DEVICE bool pool_max_replaces(T candidate, T best) {
  return (static_cast<int>(candidate > best) | static_cast<int>(candidate != candidate)) != 0;
}

}  // namespace ortmodule
