// Pooling kernels against direct-loop references (float and double) and, in double, the
// backward kernels against central finite differences of the forward.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/pool.h"

namespace ortmodule {
namespace {

struct PoolCase {
  std::string name;
  Pool2dParams p;
  bool ceil_mode;
};

// Output size as PyTorch computes it, including ceil_mode's rule that the last window must start
// inside the input or the top/left padding.
int64_t pooled_size(int64_t in, int64_t k, int64_t s, int64_t pad0, int64_t pad1, int64_t d,
                    bool ceil_mode) {
  const int64_t span = in + pad0 + pad1 - d * (k - 1) - 1;
  int64_t out = (ceil_mode ? (span + s - 1) / s : span / s) + 1;
  if (ceil_mode && (out - 1) * s >= in + pad0) --out;
  return out;
}

PoolCase make_pool(std::string name, int64_t N, int64_t C, int64_t H, int64_t W, int64_t kH,
                   int64_t kW, int64_t sh, int64_t sw, int64_t pt, int64_t pl, int64_t pb,
                   int64_t pr, int64_t dh, int64_t dw, bool ceil_mode) {
  Pool2dParams p;
  p.N = N, p.C = C, p.H = H, p.W = W, p.kH = kH, p.kW = kW;
  p.stride_h = sh, p.stride_w = sw, p.pad_top = pt, p.pad_left = pl, p.dil_h = dh, p.dil_w = dw;
  p.pad_bottom = pb, p.pad_right = pr;
  p.outH = pooled_size(H, kH, sh, pt, pb, dh, ceil_mode);
  p.outW = pooled_size(W, kW, sw, pl, pr, dw, ceil_mode);
  p.count_include_pad = false;
  return {std::move(name), p, ceil_mode};
}

std::vector<PoolCase> pool_cases() {
  return {
      make_pool("2x2_stride2", 2, 3, 6, 6, 2, 2, 2, 2, 0, 0, 0, 0, 1, 1, false),
      make_pool("3x3_stride2_pad1", 2, 2, 7, 7, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, false),
      make_pool("overlapping", 1, 2, 5, 6, 3, 3, 1, 1, 0, 0, 0, 0, 1, 1, false),
      make_pool("ceil_mode", 2, 2, 7, 8, 3, 2, 2, 2, 0, 0, 0, 0, 1, 1, true),
      make_pool("ceil_mode_pad", 1, 2, 6, 6, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, true),
      make_pool("ceil_past_input", 1, 2, 5, 5, 2, 2, 2, 2, 0, 0, 0, 0, 1, 1, true),
      make_pool("dilated_pad", 1, 2, 9, 8, 3, 2, 1, 1, 1, 1, 1, 1, 2, 3, false),
      make_pool("asym_pads", 2, 1, 5, 5, 2, 2, 2, 2, 0, 1, 1, 0, 1, 1, false),
      make_pool("pool1d", 2, 3, 1, 10, 1, 3, 1, 2, 0, 1, 0, 1, 1, 1, false),
      make_pool("many_planes", 4, 16, 32, 32, 2, 2, 2, 2, 0, 0, 0, 0, 1, 1, false),
      // Rows of 35 outputs: two full 16-wide vector groups and a masked tail; with a pad,
      // the inside windows start at column 1.
      make_pool("wide_rows", 1, 2, 4, 71, 2, 2, 2, 2, 0, 0, 0, 0, 1, 1, false),
      make_pool("wide_pad", 1, 1, 5, 69, 2, 2, 2, 2, 1, 1, 0, 0, 1, 1, false),
      // 3x3 windows, stride 2: 33 outputs per row, the last window ending at the last column
      // (the third column's masked loads must stop there); then ResNet's padded stem pool.
      make_pool("wide_3x3", 1, 2, 7, 67, 3, 3, 2, 2, 0, 0, 0, 0, 1, 1, false),
      make_pool("wide_3x3_pad", 2, 3, 8, 70, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, false),
  };
}

int64_t in_size(const Pool2dParams& p) { return p.N * p.C * p.H * p.W; }
int64_t out_size(const Pool2dParams& p) { return p.N * p.C * p.outH * p.outW; }

std::vector<double> random_values(int64_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  std::vector<double> v(n);
  for (auto& e : v) e = dist(gen);
  return v;
}

template <typename T>
std::vector<T> cast_to(const std::vector<double>& v) {
  return std::vector<T>(v.begin(), v.end());
}

// Calls fn(out_index, window_cells) with the flat input indices of the in-bounds cells of every
// window, in (kh, kw) order, checking bounds tap by tap.
void for_each_window(const Pool2dParams& p,
                     const std::function<void(int64_t, const std::vector<int64_t>&)>& fn) {
  std::vector<int64_t> cells;
  for (int64_t b = 0; b < p.N * p.C; ++b)
    for (int64_t oh = 0; oh < p.outH; ++oh)
      for (int64_t ow = 0; ow < p.outW; ++ow) {
        cells.clear();
        for (int64_t kh = 0; kh < p.kH; ++kh)
          for (int64_t kw = 0; kw < p.kW; ++kw) {
            const int64_t ih = oh * p.stride_h - p.pad_top + kh * p.dil_h;
            const int64_t iw = ow * p.stride_w - p.pad_left + kw * p.dil_w;
            if (ih >= 0 && ih < p.H && iw >= 0 && iw < p.W)
              cells.push_back((b * p.H + ih) * p.W + iw);
          }
        fn((b * p.outH + oh) * p.outW + ow, cells);
      }
}

void ref_maxpool(const Pool2dParams& p, const std::vector<double>& x, std::vector<double>& y,
                 std::vector<int64_t>& idx) {
  y.assign(out_size(p), 0.0);
  idx.assign(out_size(p), -1);
  for_each_window(p, [&](int64_t o, const std::vector<int64_t>& cells) {
    double best = -std::numeric_limits<double>::infinity();
    for (int64_t c : cells) {
      if (idx[o] < 0 || x[c] > best || std::isnan(x[c])) best = x[c], idx[o] = c;
    }
    y[o] = best;
  });
}

// count_include_pad counts the taps of output o's window inside the padded input, as
// PyTorch's avg_pool2d: a ceil_mode window past the bottom/right padding counts fewer.
double ref_divisor(const Pool2dParams& p, int64_t o, const std::vector<int64_t>& cells) {
  if (p.divisor_override > 0) return static_cast<double>(p.divisor_override);
  if (!p.count_include_pad) return static_cast<double>(cells.size());
  const int64_t oh = (o / p.outW) % p.outH, ow = o % p.outW;
  int64_t rows = 0, cols = 0;
  for (int64_t kh = 0; kh < p.kH; ++kh) {
    const int64_t ih = oh * p.stride_h - p.pad_top + kh * p.dil_h;
    rows += ih >= -p.pad_top && ih < p.H + p.pad_bottom;
  }
  for (int64_t kw = 0; kw < p.kW; ++kw) {
    const int64_t iw = ow * p.stride_w - p.pad_left + kw * p.dil_w;
    cols += iw >= -p.pad_left && iw < p.W + p.pad_right;
  }
  return static_cast<double>(rows * cols);
}

std::vector<double> ref_avgpool(const Pool2dParams& p, const std::vector<double>& x) {
  std::vector<double> y(out_size(p), 0.0);
  for_each_window(p, [&](int64_t o, const std::vector<int64_t>& cells) {
    for (int64_t c : cells) y[o] += x[c] / ref_divisor(p, o, cells);
  });
  return y;
}

std::vector<double> ref_avgpool_backward(const Pool2dParams& p, const std::vector<double>& dy) {
  std::vector<double> dx(in_size(p), 0.0);
  for_each_window(p, [&](int64_t o, const std::vector<int64_t>& cells) {
    for (int64_t c : cells) dx[c] += dy[o] / ref_divisor(p, o, cells);
  });
  return dx;
}

template <typename T>
void expect_close(const std::vector<T>& actual, const std::vector<double>& expected,
                  const char* what) {
  const double tol = std::is_same<T, float>::value ? 1e-5 : 1e-12;
  ASSERT_EQ(actual.size(), expected.size()) << what;
  for (size_t i = 0; i < expected.size(); ++i) {
    if (std::isinf(expected[i])) {
      ASSERT_EQ(actual[i], static_cast<T>(expected[i])) << what << "[" << i << "]";
      continue;
    }
    ASSERT_NEAR(actual[i], expected[i], tol * (1.0 + std::fabs(expected[i])))
        << what << "[" << i << "]";
  }
}

// Central differences of L(x) = sum(forward(x) * r) against the backward's dx for dy = r.
void check_finite_differences(std::vector<double> x, const std::vector<double>& r,
                              const std::function<void(const double*, double*)>& forward,
                              const std::vector<double>& dx) {
  constexpr double kEps = 1e-6, kTol = 1e-6;
  std::vector<double> y(r.size());
  auto loss = [&] {
    forward(x.data(), y.data());
    double l = 0;
    for (size_t i = 0; i < y.size(); ++i) l += y[i] * r[i];
    return l;
  };
  for (size_t i = 0; i < x.size(); ++i) {
    const double saved = x[i];
    x[i] = saved + kEps;
    const double up = loss();
    x[i] = saved - kEps;
    const double down = loss();
    x[i] = saved;
    const double fd = (up - down) / (2 * kEps);
    ASSERT_NEAR(dx[i], fd, kTol * (1.0 + std::fabs(fd))) << "dx[" << i << "]";
  }
}

template <typename T>
class PoolKernelTest : public ::testing::Test {};
using FloatTypes = ::testing::Types<float, double>;
TYPED_TEST_SUITE(PoolKernelTest, FloatTypes);

template <typename T>
void check_maxpool_cases() {
  for (const auto& tc : pool_cases()) {
    SCOPED_TRACE(tc.name);
    const Pool2dParams& p = tc.p;
    // Small integers make ties common, so the first-maximum rule is exercised.
    for (bool ties : {false, true}) {
      auto x = random_values(in_size(p), 11);
      if (ties)
        for (auto& v : x) v = std::round(v * 2);
      std::vector<double> ref_y;
      std::vector<int64_t> ref_idx;
      ref_maxpool(p, x, ref_y, ref_idx);
      const auto xt = cast_to<T>(x);
      std::vector<T> y(out_size(p), std::numeric_limits<T>::quiet_NaN());
      std::vector<int64_t> idx(out_size(p), -7);
      maxpool2d_forward<T>(p, xt.data(), y.data(), idx.data());
      expect_close(y, ref_y, "y");
      EXPECT_EQ(idx, ref_idx);
      std::vector<T> y_noidx(out_size(p));
      maxpool2d_forward<T>(p, xt.data(), y_noidx.data(), nullptr);
      EXPECT_EQ(y_noidx, y);

      const auto dy = random_values(out_size(p), 12);
      std::vector<double> ref_dx(in_size(p), 0.0);
      for (int64_t o = 0; o < out_size(p); ++o) ref_dx[ref_idx[o]] += dy[o];
      const auto dyt = cast_to<T>(dy);
      std::vector<T> dx(in_size(p), std::numeric_limits<T>::quiet_NaN());
      maxpool2d_backward<T>(p, dyt.data(), idx.data(), dx.data());
      expect_close(dx, ref_dx, "dx");
    }
  }
}

// Every instruction set this CPU runs (the AVX-512 build has a vector 2x2 stride-2 row).
std::vector<CpuIsa> supported_isas() {
  std::vector<CpuIsa> isas;
  for (CpuIsa isa : {CpuIsa::kBaseline, CpuIsa::kAvx2, CpuIsa::kAvx512})
    if (cpu_isa_supported(isa)) isas.push_back(isa);
  return isas;
}

TYPED_TEST(PoolKernelTest, MaxPoolMatchesReference) {
  using T = TypeParam;
  const CpuIsa saved = active_cpu_isa();
  for (CpuIsa isa : supported_isas()) {
    set_cpu_isa(isa);
    SCOPED_TRACE(cpu_isa_name(isa));
    check_maxpool_cases<T>();
  }
  set_cpu_isa(saved);
}

TYPED_TEST(PoolKernelTest, MaxPoolPropagatesNaNAndHandlesEmptyWindows) {
  using T = TypeParam;
  // Padding 1 with a 1x1 kernel: the border outputs see only padding.
  Pool2dParams p = make_pool("empty", 1, 1, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, false).p;
  std::vector<T> x = {1, std::numeric_limits<T>::quiet_NaN(), 3, 4};
  std::vector<T> y(out_size(p));
  std::vector<int64_t> idx(out_size(p));
  maxpool2d_forward<T>(p, x.data(), y.data(), idx.data());
  ASSERT_EQ(p.outH, 4);
  EXPECT_EQ(y[0], -std::numeric_limits<T>::infinity());
  EXPECT_EQ(idx[0], -1);
  EXPECT_TRUE(std::isnan(y[1 * 4 + 2]));
  EXPECT_EQ(idx[1 * 4 + 2], 1);
  EXPECT_EQ(idx[2 * 4 + 2], 3);
  std::vector<T> dy(out_size(p), T(1)), dx(in_size(p), T(-5));
  maxpool2d_backward<T>(p, dy.data(), idx.data(), dx.data());
  EXPECT_EQ(dx, std::vector<T>(4, T(1)));

  // Without count_include_pad an empty window averages to zero and passes no gradient.
  avgpool2d_forward<T>(p, x.data(), y.data());
  EXPECT_EQ(y[0], T(0));
  EXPECT_EQ(y[2 * 4 + 2], T(4));
  avgpool2d_backward<T>(p, dy.data(), dx.data());
  EXPECT_EQ(dx, std::vector<T>(4, T(1)));
}

// The unrolled 2x2 path must keep the general rule: the first maximum wins ties, NaN wins
// (the last NaN of a window when there are several), and -inf is a value like any other.
TYPED_TEST(PoolKernelTest, MaxPool2x2KeepsTieAndNaNRules) {
  using T = TypeParam;
  const T nan = std::numeric_limits<T>::quiet_NaN(), inf = std::numeric_limits<T>::infinity();
  Pool2dParams p = make_pool("2x2", 1, 1, 2, 10, 2, 2, 2, 2, 0, 0, 0, 0, 1, 1, false).p;
  // Five windows, columns (2k, 2k + 1) of both rows: row 0 holds taps 0, 1; row 1 taps 2, 3.
  std::vector<T> x = {nan, 1, 5, 5,   -inf, -inf, 0, nan, nan, 2,  //
                      1,   2, 5, nan, -inf, -inf, 3, 7,   4,   nan};
  std::vector<T> y(out_size(p));
  std::vector<int64_t> idx(out_size(p));
  maxpool2d_forward<T>(p, x.data(), y.data(), idx.data());
  EXPECT_TRUE(std::isnan(y[0]));
  EXPECT_EQ(idx[0], 0);
  EXPECT_TRUE(std::isnan(y[1]));
  EXPECT_EQ(idx[1], 13);
  EXPECT_EQ(y[2], -inf);
  EXPECT_EQ(idx[2], 4);
  EXPECT_TRUE(std::isnan(y[3]));
  EXPECT_EQ(idx[3], 7);
  EXPECT_TRUE(std::isnan(y[4]));
  EXPECT_EQ(idx[4], 19);
}

TYPED_TEST(PoolKernelTest, AvgPoolMatchesReference) {
  using T = TypeParam;
  for (const auto& tc : pool_cases()) {
    for (int mode = 0; mode < 3; ++mode) {
      // Without and with count_include_pad (ceil_mode windows past the padded input count
      // only their taps inside it), then a divisor_override.
      const bool include_pad = mode == 1;
      SCOPED_TRACE(tc.name + (mode == 1 ? "_include_pad" : mode == 2 ? "_divisor_override" : ""));
      Pool2dParams p = tc.p;
      p.count_include_pad = include_pad;
      if (mode == 2) p.divisor_override = 3;
      const auto x = random_values(in_size(p), 13), dy = random_values(out_size(p), 14);
      const auto xt = cast_to<T>(x), dyt = cast_to<T>(dy);
      std::vector<T> y(out_size(p), std::numeric_limits<T>::quiet_NaN());
      avgpool2d_forward<T>(p, xt.data(), y.data());
      expect_close(y, ref_avgpool(p, x), "y");
      std::vector<T> dx(in_size(p), std::numeric_limits<T>::quiet_NaN());
      avgpool2d_backward<T>(p, dyt.data(), dx.data());
      expect_close(dx, ref_avgpool_backward(p, dy), "dx");
    }
  }
}

TYPED_TEST(PoolKernelTest, GlobalAvgPoolMatchesReference) {
  using T = TypeParam;
  for (int64_t S : {1, 7, 64}) {
    SCOPED_TRACE(S);
    const int64_t N = 3, C = 5;
    const auto x = random_values(N * C * S, 15), dy = random_values(N * C, 16);
    std::vector<double> ref_y(N * C, 0.0), ref_dx(N * C * S);
    for (int64_t i = 0; i < N * C * S; ++i) {
      ref_y[i / S] += x[i] / static_cast<double>(S);
      ref_dx[i] = dy[i / S] / static_cast<double>(S);
    }
    const auto xt = cast_to<T>(x), dyt = cast_to<T>(dy);
    std::vector<T> y(N * C), dx(N * C * S, std::numeric_limits<T>::quiet_NaN());
    global_avgpool_forward<T>(N, C, S, xt.data(), y.data());
    expect_close(y, ref_y, "y");
    global_avgpool_backward<T>(N, C, S, dyt.data(), dx.data());
    expect_close(dx, ref_dx, "dx");
  }
}

TEST(PoolKernelGradCheck, BackwardMatchesFiniteDifferences) {
  for (const auto& tc : pool_cases()) {
    if (in_size(tc.p) > 400) continue;
    SCOPED_TRACE(tc.name);
    const auto x = random_values(in_size(tc.p), 17), r = random_values(out_size(tc.p), 18);
    {
      SCOPED_TRACE("maxpool");
      const Pool2dParams& p = tc.p;
      std::vector<int64_t> idx(out_size(p));
      std::vector<double> y(out_size(p)), dx(in_size(p));
      maxpool2d_forward<double>(p, x.data(), y.data(), idx.data());
      maxpool2d_backward<double>(p, r.data(), idx.data(), dx.data());
      check_finite_differences(
          x, r,
          [&](const double* xs, double* ys) { maxpool2d_forward<double>(p, xs, ys, nullptr); }, dx);
    }
    for (bool include_pad : {false, true}) {
      SCOPED_TRACE(include_pad ? "avgpool_include_pad" : "avgpool");
      Pool2dParams p = tc.p;
      p.count_include_pad = include_pad;
      std::vector<double> dx(in_size(p));
      avgpool2d_backward<double>(p, r.data(), dx.data());
      check_finite_differences(
          x, r, [&](const double* xs, double* ys) { avgpool2d_forward<double>(p, xs, ys); }, dx);
    }
  }
  const int64_t N = 2, C = 3, S = 5;
  const auto x = random_values(N * C * S, 19), r = random_values(N * C, 20);
  std::vector<double> dx(N * C * S);
  global_avgpool_backward<double>(N, C, S, r.data(), dx.data());
  check_finite_differences(
      x, r, [&](const double* xs, double* ys) { global_avgpool_forward<double>(N, C, S, xs, ys); },
      dx);
}

}  // namespace
}  // namespace ortmodule
