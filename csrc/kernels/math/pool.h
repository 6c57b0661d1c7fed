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

// Strictly greater keeps the first maximum on ties; NaN wins so it propagates, as in PyTorch
// (candidate != candidate is the NaN test that needs no host/device-specific isnan). Both
// comparisons are always evaluated (an integer | rather than ||) so callers can select without
// a branch: on random data a branch per tap mispredicts about half the time.
template <typename T>
ORTM_HOST_DEVICE bool pool_max_replaces(T candidate, T best) {
  return (static_cast<int>(candidate > best) | static_cast<int>(candidate != candidate)) != 0;
}

}  // namespace ortmodule
