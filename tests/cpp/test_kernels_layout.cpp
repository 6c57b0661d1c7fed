// Transpose (row copies and the tiled path) against a naive index mapping, and
// sum_to_shape's reductions (row-block and column paths) against double sums written here.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/transpose.h"

namespace ortmodule {
namespace {

std::string shape_label(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? "," : "") + std::to_string(s[i]);
  return out + "]";
}

// y[idx] = x[idx permuted back], with every index computed from scratch.
template <typename E>
std::vector<E> naive_transpose(const std::vector<int64_t>& x_shape,
                               const std::vector<int64_t>& perm, const std::vector<E>& x) {
  const size_t rank = x_shape.size();
  std::vector<int64_t> x_strides(rank, 1), y_shape(rank);
  for (size_t i = rank - 1; i-- > 0;) x_strides[i] = x_strides[i + 1] * x_shape[i + 1];
  for (size_t i = 0; i < rank; ++i) y_shape[i] = x_shape[perm[i]];
  std::vector<E> y(x.size());
  for (int64_t flat = 0; flat < static_cast<int64_t>(x.size()); ++flat) {
    int64_t rem = flat, src = 0;
    for (size_t d = rank; d-- > 0;) {
      src += (rem % y_shape[d]) * x_strides[perm[d]];
      rem /= y_shape[d];
    }
    y[flat] = x[src];
  }
  return y;
}

TEST(TransposeKernel, EveryPathMatchesTheIndexMapping) {
  const std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> cases = {
      {{4, 96, 4, 64}, {0, 2, 1, 3}},   // heads out of [B, S, H, D]: row copies
      {{4, 4, 100, 72}, {0, 1, 3, 2}},  // K^T: tiles, ragged edges
      {{300, 257}, {1, 0}},             // matrix: tiles
      {{64, 32, 48}, {2, 0, 1}},        // input's last dim first
      {{5, 1, 40, 3}, {3, 1, 2, 0}},    // extent-1 dims
      {{7, 9}, {1, 0}},                 // smaller than a tile
      {{2, 33, 1, 31}, {0, 3, 2, 1}},
  };
  for (const auto& [shape, perm] : cases) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    std::vector<int32_t> x(n);
    std::iota(x.begin(), x.end(), 0);
    std::vector<int32_t> y(n, -1);
    transpose(shape, perm, x.data(), y.data(), sizeof(int32_t));
    EXPECT_EQ(y, naive_transpose(shape, perm, x))
        << shape_label(shape) << " perm " << shape_label(perm);
    std::vector<double> xd(x.begin(), x.end()), yd(n, -1);
    transpose(shape, perm, xd.data(), yd.data(), sizeof(double));
    EXPECT_EQ(yd, naive_transpose(shape, perm, xd)) << "double " << shape_label(shape);
  }
}

TEST(SumToShape, LeadingAndInnerReductionsMatchDoubleSums) {
  std::mt19937 gen(3);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  const std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> cases = {
      {{1024, 256}, {256}},         // bias gradient: row blocks
      {{8, 128, 256}, {256}},       // the same over two leading dims
      {{100, 7}, {1, 7}},           // ragged last block
      {{8, 256, 256}, {256, 256}},  // many columns: the column path
      {{64, 1}, {1}},               // one column
      {{16, 32, 5}, {16, 1, 5}},    // a middle dim
      {{16, 32, 5}, {16, 32, 1}},   // the last dim
  };
  for (const auto& [x_shape, out_shape] : cases) {
    int64_t n_in = 1, n_out = 1;
    for (int64_t d : x_shape) n_in *= d;
    for (int64_t d : out_shape) n_out *= d;
    std::vector<float> x(n_in);
    for (float& v : x) v = dist(gen);
    // Reference: map each x index to its y index through broadcasting.
    const size_t rank = x_shape.size();
    std::vector<double> want(n_out, 0.0);
    for (int64_t flat = 0; flat < n_in; ++flat) {
      int64_t rem = flat, o = 0, stride = 1;
      for (size_t d = rank; d-- > 0;) {
        const int64_t idx = rem % x_shape[d];
        rem /= x_shape[d];
        const int64_t od = static_cast<int64_t>(d) - static_cast<int64_t>(rank - out_shape.size());
        const int64_t extent = od >= 0 ? out_shape[od] : 1;
        if (extent != 1) o += idx * stride;
        stride *= extent;
      }
      want[o] += x[flat];
    }
    std::vector<float> y(n_out, -7.0f);
    sum_to_shape(x_shape, x.data(), out_shape, y.data());
    for (int64_t i = 0; i < n_out; ++i)
      ASSERT_NEAR(y[i], want[i], 1e-6 * (1.0 + std::abs(want[i])))
          << shape_label(x_shape) << " -> " << shape_label(out_shape) << " at " << i;
  }
}

}  // namespace
}  // namespace ortmodule
