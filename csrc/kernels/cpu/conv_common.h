// Small loops shared by the 2-D (conv.cpp) and 3-D (conv3d.cpp) convolution kernels.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>

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

// Images per chunk for a range of n images: at most `chunk`, spread evenly over the range's
// chunks, so that no range ends with a sliver of a chunk (a thin, slow gemm).
inline int64_t balanced_chunk(int64_t chunk, int64_t n) {
  const int64_t chunks = (n + chunk - 1) / chunk;
  return std::max<int64_t>(1, (n + chunks - 1) / std::max<int64_t>(1, chunks));
}

// Uninitialised scratch memory: every use writes before it reads, and zero-filling megabytes
// of column buffer per call (as std::vector would) costs a measurable share of a small conv.
template <typename T>
class Scratch {
 public:
  explicit Scratch(int64_t n = 0) : data_(n > 0 ? new T[n] : nullptr) {}
  T* data() { return data_.get(); }

 private:
  std::unique_ptr<T[]> data_;
};

}  // namespace conv_detail
}  // namespace ortmodule
