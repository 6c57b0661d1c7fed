// Small loops shared by the 2-D (conv.cpp) and 3-D (conv3d.cpp) convolution kernels.
#pragma once

#include <cstdint>

namespace ortmodule {
namespace conv_detail {

// y[m, :] += bias[m] over rows of length P.
template <typename T>
void add_bias(const T* bias, int64_t rows, int64_t P, T* y) {
  for (int64_t m = 0; m < rows; ++m) {
    const T bm = bias[m];
    for (int64_t q = 0; q < P; ++q) y[m * P + q] += bm;
  }
}

// Sum of a row in double, over four independent partial sums so the adds need not wait on
// one another (the compiler may not reorder floating-point sums itself).
template <typename T>
double sum_row(const T* v, int64_t n) {
  double s[4] = {};
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    for (int k = 0; k < 4; ++k) s[k] += v[i + k];
  }
  for (; i < n; ++i) s[0] += v[i];
  return (s[0] + s[1]) + (s[2] + s[3]);
}

}  // namespace conv_detail
}  // namespace ortmodule
