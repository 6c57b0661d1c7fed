// conv2d_forward / conv2d_backward against direct-loop references (float and double) and, in
// double, the backward against central finite differences of the forward.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/cpu/conv.h"
#include "kernels/cpu/cpu_isa.h"

namespace ortmodule {
namespace {

struct ConvCase {
  std::string name;
  Conv2dParams p;
};

// pad_bottom / pad_right only shape the output, as they do for the caller.
Conv2dParams make_conv(int64_t N, int64_t C, int64_t H, int64_t W, int64_t M, int64_t kH,
                       int64_t kW, int64_t group, int64_t sh, int64_t sw, int64_t pt, int64_t pl,
                       int64_t pb, int64_t pr, int64_t dh, int64_t dw) {
  Conv2dParams p;
  p.N = N, p.C = C, p.H = H, p.W = W, p.M = M, p.kH = kH, p.kW = kW, p.group = group;
  p.stride_h = sh, p.stride_w = sw, p.pad_top = pt, p.pad_left = pl, p.dil_h = dh, p.dil_w = dw;
  p.outH = (H + pt + pb - dh * (kH - 1) - 1) / sh + 1;
  p.outW = (W + pl + pr - dw * (kW - 1) - 1) / sw + 1;
  return p;
}

std::vector<ConvCase> conv_cases() {
  return {
      {"basic_3x3_pad1", make_conv(2, 3, 7, 6, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1)},
      {"strided_asym_pad", make_conv(2, 2, 9, 8, 3, 3, 2, 1, 2, 3, 1, 2, 0, 1, 1, 1)},
      {"dilated", make_conv(1, 2, 8, 9, 2, 3, 3, 1, 1, 1, 2, 2, 2, 2, 2, 3)},
      {"grouped", make_conv(3, 4, 5, 5, 6, 3, 3, 2, 1, 1, 1, 1, 1, 1, 1, 1)},
      {"depthwise_strided", make_conv(2, 3, 6, 5, 3, 3, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1)},
      {"pointwise", make_conv(3, 5, 4, 3, 2, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1)},
      {"pointwise_strided", make_conv(2, 3, 7, 7, 4, 1, 1, 1, 2, 2, 0, 0, 0, 0, 1, 1)},
      {"conv1d", make_conv(2, 3, 1, 11, 2, 1, 3, 1, 1, 2, 0, 1, 0, 1, 1, 2)},
      {"pad_beyond_kernel", make_conv(1, 2, 3, 3, 2, 2, 2, 1, 1, 1, 3, 3, 3, 3, 1, 1)},
      {"even_kernel_odd_stride", make_conv(5, 2, 6, 7, 3, 2, 4, 1, 3, 2, 0, 1, 2, 0, 1, 1)},
      {"wide_single_image", make_conv(1, 64, 16, 16, 8, 3, 3, 2, 1, 1, 1, 1, 1, 1, 1, 1)},
      // Enough column-buffer work that images are split into several gemm chunks, the last
      // one a single image.
      {"chunked_images", make_conv(8, 32, 16, 16, 8, 3, 3, 2, 1, 1, 1, 1, 1, 1, 1, 1)},
      {"chunked_pointwise", make_conv(9, 96, 24, 24, 6, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1)},
      // Winograd F(2x2, 3x3) for all three (conv2d_winograd_applies: 16+ channels, 8x8+
      // outputs): odd outputs (zero-padded edge tiles), then asymmetric pads of 0 to 2.
      {"winograd_odd_outputs", make_conv(3, 16, 11, 9, 20, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1)},
      {"winograd_asym_pads", make_conv(2, 16, 10, 12, 16, 3, 3, 1, 1, 1, 0, 2, 2, 1, 1, 1)},
      // Rows of more than 16 tiles (the vector transforms' registers), odd on both sides, and
      // the smallest Winograd outputs, 8x8: one register of 16 tiles per image.
      {"winograd_wide_rows", make_conv(2, 16, 37, 35, 17, 3, 3, 1, 1, 1, 1, 2, 1, 0, 1, 1)},
      {"winograd_8x8", make_conv(5, 16, 8, 8, 24, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1)},
      // Stride 2 with output rows of 20 (im2col's vector stride-2 rows: a full register and
      // a masked tail).
      {"strided_wide_rows", make_conv(2, 3, 41, 39, 4, 3, 3, 1, 2, 2, 1, 1, 1, 1, 1, 1)},
  };
}

int64_t x_size(const Conv2dParams& p) { return p.N * p.C * p.H * p.W; }
int64_t w_size(const Conv2dParams& p) { return p.M * (p.C / p.group) * p.kH * p.kW; }
int64_t y_size(const Conv2dParams& p) { return p.N * p.M * p.outH * p.outW; }

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

// Calls fn(y_index, x_index, w_index) for every (output, tap) pair that reads an input cell,
// testing bounds tap by tap; padding taps contribute nothing.
template <typename Fn>
void for_each_product(const Conv2dParams& p, Fn fn) {
  const int64_t Cg = p.C / p.group, Mg = p.M / p.group;
  for (int64_t n = 0; n < p.N; ++n)
    for (int64_t m = 0; m < p.M; ++m)
      for (int64_t oh = 0; oh < p.outH; ++oh)
        for (int64_t ow = 0; ow < p.outW; ++ow)
          for (int64_t cg = 0; cg < Cg; ++cg)
            for (int64_t kh = 0; kh < p.kH; ++kh)
              for (int64_t kw = 0; kw < p.kW; ++kw) {
                const int64_t ih = oh * p.stride_h - p.pad_top + kh * p.dil_h;
                const int64_t iw = ow * p.stride_w - p.pad_left + kw * p.dil_w;
                if (ih < 0 || ih >= p.H || iw < 0 || iw >= p.W) continue;
                const int64_t c = (m / Mg) * Cg + cg;
                fn(((n * p.M + m) * p.outH + oh) * p.outW + ow,
                   ((n * p.C + c) * p.H + ih) * p.W + iw, ((m * Cg + cg) * p.kH + kh) * p.kW + kw);
              }
}

std::vector<double> ref_forward(const Conv2dParams& p, const std::vector<double>& x,
                                const std::vector<double>& w, const std::vector<double>* bias) {
  std::vector<double> y(y_size(p), 0.0);
  const int64_t P = p.outH * p.outW;
  if (bias != nullptr)
    for (int64_t i = 0; i < y_size(p); ++i) y[i] = (*bias)[(i / P) % p.M];
  for_each_product(p, [&](int64_t yi, int64_t xi, int64_t wi) { y[yi] += x[xi] * w[wi]; });
  return y;
}

struct Grads {
  std::vector<double> dx, dw, dbias;
};

Grads ref_backward(const Conv2dParams& p, const std::vector<double>& x,
                   const std::vector<double>& w, const std::vector<double>& dy) {
  Grads g{std::vector<double>(x_size(p), 0.0), std::vector<double>(w_size(p), 0.0),
          std::vector<double>(p.M, 0.0)};
  const int64_t P = p.outH * p.outW;
  for (int64_t i = 0; i < y_size(p); ++i) g.dbias[(i / P) % p.M] += dy[i];
  for_each_product(p, [&](int64_t yi, int64_t xi, int64_t wi) {
    g.dx[xi] += w[wi] * dy[yi];
    g.dw[wi] += x[xi] * dy[yi];
  });
  return g;
}

template <typename T>
double tolerance() {
  return std::is_same<T, float>::value ? 1e-4 : 1e-11;
}

template <typename T>
void expect_close(const std::vector<T>& actual, const std::vector<double>& expected,
                  const char* what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  for (size_t i = 0; i < expected.size(); ++i) {
    ASSERT_NEAR(actual[i], expected[i], tolerance<T>() * (1.0 + std::fabs(expected[i])))
        << what << "[" << i << "]";
  }
}

template <typename T>
class ConvKernelTest : public ::testing::Test {};
using FloatTypes = ::testing::Types<float, double>;
TYPED_TEST_SUITE(ConvKernelTest, FloatTypes);

// Every instruction set this CPU runs: with AVX-512 the float Winograd transforms are vector
// kernels (vec_winograd.inl).
template <typename Fn>
void for_each_isa(const Fn& fn) {
  const CpuIsa saved = active_cpu_isa();
  for (CpuIsa isa : {CpuIsa::kBaseline, CpuIsa::kAvx2, CpuIsa::kAvx512}) {
    if (!cpu_isa_supported(isa)) continue;
    set_cpu_isa(isa);
    SCOPED_TRACE(cpu_isa_name(isa));
    fn();
  }
  set_cpu_isa(saved);
}

template <typename T>
void check_forward_cases() {
  for (const auto& tc : conv_cases()) {
    SCOPED_TRACE(tc.name);
    const Conv2dParams& p = tc.p;
    const auto x = random_values(x_size(p), 1), w = random_values(w_size(p), 2);
    const auto b = random_values(p.M, 3);
    const auto xt = cast_to<T>(x), wt = cast_to<T>(w), bt = cast_to<T>(b);
    std::vector<T> y(y_size(p), std::numeric_limits<T>::quiet_NaN());
    conv2d_forward<T>(p, xt.data(), wt.data(), bt.data(), y.data());
    expect_close(y, ref_forward(p, x, w, &b), "y");
    std::fill(y.begin(), y.end(), std::numeric_limits<T>::quiet_NaN());
    conv2d_forward<T>(p, xt.data(), wt.data(), nullptr, y.data());
    expect_close(y, ref_forward(p, x, w, nullptr), "y_nobias");
  }
}

TYPED_TEST(ConvKernelTest, ForwardMatchesReference) {
  for_each_isa([] { check_forward_cases<TypeParam>(); });
}

template <typename T>
void check_backward_cases() {
  const T nan = std::numeric_limits<T>::quiet_NaN();
  for (const auto& tc : conv_cases()) {
    SCOPED_TRACE(tc.name);
    const Conv2dParams& p = tc.p;
    const auto x = random_values(x_size(p), 4), w = random_values(w_size(p), 5);
    const auto dy = random_values(y_size(p), 6);
    const auto xt = cast_to<T>(x), wt = cast_to<T>(w), dyt = cast_to<T>(dy);
    const Grads ref = ref_backward(p, x, w, dy);
    // NaN prefill proves every output is overwritten rather than accumulated into.
    std::vector<T> dx(x_size(p), nan), dw(w_size(p), nan), db(p.M, nan);
    conv2d_backward<T>(p, xt.data(), wt.data(), dyt.data(), dx.data(), dw.data(), db.data());
    expect_close(dx, ref.dx, "dx");
    expect_close(dw, ref.dw, "dw");
    expect_close(db, ref.dbias, "dbias");

    // Each output alone: the skipped ones must stay untouched.
    std::vector<T> only(x_size(p), nan);
    conv2d_backward<T>(p, xt.data(), wt.data(), dyt.data(), only.data(), nullptr, nullptr);
    expect_close(only, ref.dx, "dx_only");
    only.assign(w_size(p), nan);
    conv2d_backward<T>(p, xt.data(), wt.data(), dyt.data(), nullptr, only.data(), nullptr);
    expect_close(only, ref.dw, "dw_only");
    only.assign(p.M, nan);
    conv2d_backward<T>(p, xt.data(), wt.data(), dyt.data(), nullptr, nullptr, only.data());
    expect_close(only, ref.dbias, "dbias_only");
  }
}

TYPED_TEST(ConvKernelTest, BackwardMatchesReference) {
  for_each_isa([] { check_backward_cases<TypeParam>(); });
}

// Central differences of L = sum(conv(x, w, b) * r): its gradients are the backward's outputs
// for dy = r.
TEST(ConvKernelGradCheck, BackwardMatchesFiniteDifferences) {
  constexpr double kEps = 1e-6, kTol = 1e-6;
  for (const auto& tc : conv_cases()) {
    const Conv2dParams& p = tc.p;
    if (x_size(p) + w_size(p) > 1000) continue;
    SCOPED_TRACE(tc.name);
    auto x = random_values(x_size(p), 7), w = random_values(w_size(p), 8);
    auto b = random_values(p.M, 9);
    const auto r = random_values(y_size(p), 10);
    std::vector<double> y(y_size(p));
    auto loss = [&] {
      conv2d_forward<double>(p, x.data(), w.data(), b.data(), y.data());
      double l = 0;
      for (int64_t i = 0; i < y_size(p); ++i) l += y[i] * r[i];
      return l;
    };
    std::vector<double> dx(x_size(p)), dw(w_size(p)), db(p.M);
    conv2d_backward<double>(p, x.data(), w.data(), r.data(), dx.data(), dw.data(), db.data());
    auto check = [&](std::vector<double>& param, const std::vector<double>& grad,
                     const char* what) {
      for (size_t i = 0; i < param.size(); ++i) {
        const double saved = param[i];
        param[i] = saved + kEps;
        const double up = loss();
        param[i] = saved - kEps;
        const double down = loss();
        param[i] = saved;
        const double fd = (up - down) / (2 * kEps);
        ASSERT_NEAR(grad[i], fd, kTol * (1.0 + std::fabs(fd))) << what << "[" << i << "]";
      }
    };
    check(x, dx, "dx");
    check(w, dw, "dw");
    check(b, db, "dbias");
  }
}

// ---- 3-D ----

Conv3dParams make_conv3d(int64_t N, int64_t C, int64_t M, int64_t group, std::vector<int64_t> in,
                         std::vector<int64_t> k, std::vector<int64_t> stride,
                         std::vector<int64_t> pads, std::vector<int64_t> dil) {
  Conv3dParams p{};
  p.N = N, p.C = C, p.M = M, p.group = group;
  for (int i = 0; i < 3; ++i) {
    p.in[i] = in[i], p.kernel[i] = k[i], p.stride[i] = stride[i], p.pad_begin[i] = pads[i];
    p.dilation[i] = dil[i];
    p.out[i] = (in[i] + pads[i] + pads[i + 3] - dil[i] * (k[i] - 1) - 1) / stride[i] + 1;
  }
  return p;
}

// Direct loops over every (output, tap) pair: y, dx, dw, dbias.
struct Conv3dRef {
  std::vector<double> y, dx, dw, dbias;
};

Conv3dRef ref_conv3d(const Conv3dParams& p, const std::vector<double>& x,
                     const std::vector<double>& w, const std::vector<double>& b,
                     const std::vector<double>& dy) {
  const int64_t Cg = p.C / p.group, Mg = p.M / p.group;
  const int64_t P = p.out[0] * p.out[1] * p.out[2], X = p.in[0] * p.in[1] * p.in[2];
  const int64_t K = p.kernel[0] * p.kernel[1] * p.kernel[2];
  Conv3dRef r{std::vector<double>(p.N * p.M * P), std::vector<double>(x.size(), 0.0),
              std::vector<double>(w.size(), 0.0), std::vector<double>(p.M, 0.0)};
  for (int64_t n = 0; n < p.N; ++n)
    for (int64_t m = 0; m < p.M; ++m)
      for (int64_t o = 0; o < P; ++o) {
        const int64_t yi = (n * p.M + m) * P + o;
        const int64_t od = o / (p.out[1] * p.out[2]), oh = o / p.out[2] % p.out[1],
                      ow = o % p.out[2];
        double acc = b[m];
        r.dbias[m] += dy[yi];
        for (int64_t cg = 0; cg < Cg; ++cg)
          for (int64_t t = 0; t < K; ++t) {
            const int64_t kd = t / (p.kernel[1] * p.kernel[2]), kh = t / p.kernel[2] % p.kernel[1],
                          kw = t % p.kernel[2];
            const int64_t id = od * p.stride[0] - p.pad_begin[0] + kd * p.dilation[0];
            const int64_t ih = oh * p.stride[1] - p.pad_begin[1] + kh * p.dilation[1];
            const int64_t iw = ow * p.stride[2] - p.pad_begin[2] + kw * p.dilation[2];
            if (id < 0 || id >= p.in[0] || ih < 0 || ih >= p.in[1] || iw < 0 || iw >= p.in[2])
              continue;
            const int64_t xi =
                (n * p.C + (m / Mg) * Cg + cg) * X + (id * p.in[1] + ih) * p.in[2] + iw;
            const int64_t wi = (m * Cg + cg) * K + t;
            acc += x[xi] * w[wi];
            r.dx[xi] += w[wi] * dy[yi];
            r.dw[wi] += x[xi] * dy[yi];
          }
        r.y[yi] = acc;
      }
  return r;
}

TYPED_TEST(ConvKernelTest, Conv3dMatchesReference) {
  using T = TypeParam;
  const std::vector<Conv3dParams> cases = {
      make_conv3d(2, 2, 3, 1, {4, 5, 4}, {2, 3, 2}, {1, 2, 1}, {1, 0, 1, 0, 1, 1}, {2, 1, 1}),
      make_conv3d(2, 4, 6, 2, {3, 4, 5}, {2, 2, 3}, {1, 1, 2}, {0, 1, 1, 1, 0, 1}, {1, 1, 1}),
      make_conv3d(1, 3, 3, 3, {3, 3, 3}, {2, 2, 2}, {1, 1, 1}, {3, 3, 3, 3, 3, 3}, {1, 1, 1}),
  };
  for (const Conv3dParams& p : cases) {
    const int64_t xs = p.N * p.C * p.in[0] * p.in[1] * p.in[2];
    const int64_t ws = p.M * (p.C / p.group) * p.kernel[0] * p.kernel[1] * p.kernel[2];
    const int64_t ys = p.N * p.M * p.out[0] * p.out[1] * p.out[2];
    const auto x = random_values(xs, 11), w = random_values(ws, 12), b = random_values(p.M, 13),
               dy = random_values(ys, 14);
    const Conv3dRef r = ref_conv3d(p, x, w, b, dy);
    const auto xt = cast_to<T>(x), wt = cast_to<T>(w), bt = cast_to<T>(b), dyt = cast_to<T>(dy);
    std::vector<T> y(ys), dx(xs), dw(ws), db(p.M);
    conv3d_forward<T>(p, xt.data(), wt.data(), bt.data(), y.data());
    expect_close(y, r.y, "y");
    conv3d_backward<T>(p, xt.data(), wt.data(), dyt.data(), dx.data(), dw.data(), db.data());
    expect_close(dx, r.dx, "dx");
    expect_close(dw, r.dw, "dw");
    expect_close(db, r.dbias, "dbias");
  }
}

}  // namespace
}  // namespace ortmodule
