// runtime/aten_conv.h (the CUDA Conv kernels' path to torch's convolution, cuDNN there) run on
// the CPU: which geometries it takes, and that its forward and gradients equal the engine's
// own convolution kernels (conv3d_forward / conv3d_backward, themselves checked against
// direct loops and finite differences in test_kernels_conv.cpp) for 1-D, 2-D and 3-D
// geometries with strides, dilations, groups and pads, in float64 and float32; and the
// transposed convolution of each (ConvTranspose's 16-bit CUDA path) against conv3d_backward.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cpu/conv.h"
#include "runtime/aten_conv.h"

namespace ortmodule {
namespace {

struct Axis {
  int64_t in, k, stride = 1, pad_begin = 0, pad_end = 0, dil = 1;
};

// A convolution of spatial rank axes.size() in the 3-D form (leading unit axes).
AtenConv make_conv(int64_t N, int64_t C, int64_t M, int64_t group, std::vector<Axis> axes,
                   DType dtype) {
  AtenConv c;
  c.spatial_rank = static_cast<int>(axes.size());
  c.dtype = dtype;
  Conv3dParams& p = c.p;
  p.N = N, p.C = C, p.M = M, p.group = group;
  while (axes.size() < 3) axes.insert(axes.begin(), Axis{1, 1});
  for (int i = 0; i < 3; ++i) {
    const Axis& a = axes[i];
    p.in[i] = a.in, p.kernel[i] = a.k, p.stride[i] = a.stride, p.pad_begin[i] = a.pad_begin;
    p.dilation[i] = a.dil;
    p.out[i] = (a.in + a.pad_begin + a.pad_end - a.dil * (a.k - 1) - 1) / a.stride + 1;
  }
  return c;
}

int64_t volume(const int64_t* dims) { return dims[0] * dims[1] * dims[2]; }

template <typename T>
std::vector<T> random_values(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  std::vector<T> v(n);
  for (T& x : v) x = static_cast<T>(dist(gen));
  return v;
}

template <typename T>
double max_rel_diff(const std::vector<T>& got, const std::vector<T>& want) {
  double scale = 1e-30, diff = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    scale = std::max(scale, std::abs(static_cast<double>(want[i])));
    diff = std::max(diff, std::abs(static_cast<double>(got[i]) - static_cast<double>(want[i])));
  }
  return diff / scale;
}

// Forward with and without bias, then every gradient, against the engine's kernels.
template <typename T>
void expect_matches_engine(const AtenConv& c, double tolerance) {
  const Conv3dParams& p = c.p;
  const size_t nx = p.N * p.C * volume(p.in), nw = p.M * (p.C / p.group) * volume(p.kernel);
  const size_t ny = p.N * p.M * volume(p.out);
  const auto x = random_values<T>(nx, 1), w = random_values<T>(nw, 2);
  const auto bias = random_values<T>(p.M, 3), dy = random_values<T>(ny, 4);

  for (const bool with_bias : {true, false}) {
    std::vector<T> got(ny), want(ny);
    const T* b = with_bias ? bias.data() : nullptr;
    aten_conv_forward(c, x.data(), w.data(), b, got.data());
    conv3d_forward<T>(p, x.data(), w.data(), b, want.data());
    EXPECT_LE(max_rel_diff(got, want), tolerance) << "forward, bias " << with_bias;
  }

  std::vector<T> dx(nx), dw(nw), db(p.M), want_dx(nx), want_dw(nw), want_db(p.M);
  aten_conv_backward(c, dy.data(), x.data(), w.data(), dx.data(), dw.data(), db.data());
  conv3d_backward<T>(p, x.data(), w.data(), dy.data(), want_dx.data(), want_dw.data(),
                     want_db.data());
  EXPECT_LE(max_rel_diff(dx, want_dx), tolerance) << "dx";
  EXPECT_LE(max_rel_diff(dw, want_dw), tolerance) << "dw";
  EXPECT_LE(max_rel_diff(db, want_db), tolerance) << "dbias";

  // One gradient alone.
  std::vector<T> only_dw(nw, T(7));
  aten_conv_backward(c, dy.data(), x.data(), w.data(), nullptr, only_dw.data(), nullptr);
  EXPECT_LE(max_rel_diff(only_dw, want_dw), tolerance) << "dw alone";
  std::vector<T> only_dx(nx);
  aten_conv_backward(c, dy.data(), x.data(), w.data(), only_dx.data(), nullptr, nullptr);
  EXPECT_LE(max_rel_diff(only_dx, want_dx), tolerance) << "dx alone";
  // dx without x (ConvTranspose's forward on CUDA): torch reads only x's sizes.
  std::vector<T> dx_without_x(nx);
  aten_conv_backward(c, dy.data(), nullptr, w.data(), dx_without_x.data(), nullptr, nullptr);
  EXPECT_LE(max_rel_diff(dx_without_x, want_dx), tolerance) << "dx without x";
  EXPECT_THROW(
      aten_conv_backward(c, dy.data(), nullptr, w.data(), nullptr, only_dw.data(), nullptr),
      std::invalid_argument);

  // The transposed convolution of the pair: dx for dy := the input, plus a bias over C.
  const auto bias_c = random_values<T>(p.C, 5);
  const int64_t plane = volume(p.in);
  for (const bool with_bias : {true, false}) {
    std::vector<T> got(nx), want(want_dx);
    aten_conv_transpose_forward(c, dy.data(), w.data(), with_bias ? bias_c.data() : nullptr,
                                got.data());
    for (size_t i = 0; with_bias && i < nx; ++i) want[i] += bias_c[(i / plane) % p.C];
    EXPECT_LE(max_rel_diff(got, want), tolerance) << "transposed, bias " << with_bias;
  }
}

struct Case {
  std::string name;
  int64_t N, C, M, group;
  std::vector<Axis> axes;
};

std::vector<Case> cases() {
  return {
      {"conv1d_strided_dilated", 2, 3, 4, 1, {{11, 3, 2, 2, 2, 2}}},
      {"conv2d_3x3_pad1", 2, 3, 4, 1, {{7, 3, 1, 1, 1}, {6, 3, 1, 1, 1}}},
      {"conv2d_grouped_strided", 3, 4, 6, 2, {{9, 3, 2, 1, 1}, {8, 2, 3, 0, 0}}},
      {"conv2d_depthwise", 2, 3, 3, 3, {{6, 3, 2, 1, 1}, {5, 3, 2, 1, 1}}},
      {"conv2d_dilated", 1, 2, 2, 1, {{8, 3, 1, 2, 2, 2}, {9, 3, 1, 2, 2, 3}}},
      {"conv2d_pointwise", 3, 5, 2, 1, {{4, 1}, {3, 1}}},
      // The pad after the last window is never read: the same output as symmetric pads.
      {"conv2d_unread_end_pad", 2, 2, 3, 1, {{7, 3, 2, 1, 2}, {8, 2, 2, 0, 1}}},
      {"conv3d_mixed", 2, 4, 6, 2, {{4, 2, 1, 1, 1, 2}, {5, 3, 2, 1, 1}, {6, 2, 1, 0, 0, 1}}},
  };
}

TEST(AtenConv, MatchesEngineKernelsFloat64) {
  for (const Case& k : cases()) {
    SCOPED_TRACE(k.name);
    const AtenConv c = make_conv(k.N, k.C, k.M, k.group, k.axes, DType::Float64);
    ASSERT_TRUE(aten_conv_fits(c.p));
    expect_matches_engine<double>(c, 1e-12);
  }
}

TEST(AtenConv, MatchesEngineKernelsFloat32) {
  for (const Case& k : cases()) {
    SCOPED_TRACE(k.name);
    const AtenConv c = make_conv(k.N, k.C, k.M, k.group, k.axes, DType::Float32);
    expect_matches_engine<float>(c, 1e-5);
  }
}

TEST(AtenConv, FitsOnlyWhereBothEndsPadAlike) {
  // Pads that differ and change the output: torch cannot compute them.
  EXPECT_FALSE(aten_conv_fits(make_conv(1, 1, 1, 1, {{5, 3, 1, 0, 2}}, DType::Float32).p));
  EXPECT_FALSE(aten_conv_fits(make_conv(1, 1, 1, 1, {{5, 3, 1, 1, 0}}, DType::Float32).p));
  EXPECT_FALSE(aten_conv_fits(
      make_conv(1, 1, 1, 1, {{4, 2, 1, 1, 0, 2}, {5, 3}, {6, 2}}, DType::Float32).p));
  // Symmetric, or a larger end pad no window reaches.
  EXPECT_TRUE(aten_conv_fits(make_conv(1, 1, 1, 1, {{5, 3, 1, 1, 1}}, DType::Float32).p));
  EXPECT_TRUE(aten_conv_fits(make_conv(1, 1, 1, 1, {{7, 3, 2, 1, 2}}, DType::Float32).p));
  // Empty batches and channels are the callers' (they write zeros or nothing).
  EXPECT_FALSE(aten_conv_fits(make_conv(0, 1, 1, 1, {{5, 3}}, DType::Float32).p));
  EXPECT_FALSE(aten_conv_fits(make_conv(1, 1, 0, 1, {{5, 3}}, DType::Float32).p));
}

TEST(AtenConv, RefusesWhatItCannotCompute) {
  const AtenConv asymmetric = make_conv(1, 1, 1, 1, {{5, 3, 1, 0, 2}}, DType::Float32);
  std::vector<float> x(5), w(3), y(5);
  EXPECT_THROW(aten_conv_forward(asymmetric, x.data(), w.data(), nullptr, y.data()),
               std::invalid_argument);
  AtenConv integers = make_conv(1, 1, 1, 1, {{5, 3, 1, 1, 1}}, DType::Int64);
  EXPECT_THROW(aten_conv_forward(integers, x.data(), w.data(), nullptr, y.data()),
               std::invalid_argument);
}

}  // namespace
}  // namespace ortmodule
