// Batch-normalization kernels against direct-loop references (float and double) and, in double,
// the training backward against central finite differences of the training forward.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <type_traits>
#include <vector>

#include "kernels/cpu/batchnorm.h"

namespace ortmodule {
namespace {

struct BnShape {
  int64_t N, C, S;
};

std::vector<BnShape> bn_shapes() {
  return {{3, 4, 5}, {2, 3, 1}, {1, 2, 7}, {5, 1, 3}, {4, 64, 300}};
}

constexpr double kEpsilon = 1e-5;
constexpr double kMomentum = 0.9;

// Values already rounded to T, so references in double see exactly what the kernel sees.
template <typename T>
std::vector<double> random_values(int64_t n, unsigned seed, double lo = -1.0, double hi = 1.0) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> v(n);
  for (auto& e : v) e = static_cast<double>(static_cast<T>(dist(gen)));
  return v;
}

template <typename T>
std::vector<T> cast_to(const std::vector<double>& v) {
  return std::vector<T>(v.begin(), v.end());
}

struct RefTrain {
  std::vector<double> y, mean, inv_std, running_mean, running_var;
};

RefTrain ref_train_forward(const BnShape& s, const std::vector<double>& x,
                           const std::vector<double>& scale, const std::vector<double>& bias,
                           const std::vector<double>& rmean, const std::vector<double>& rvar) {
  RefTrain r{std::vector<double>(x.size()), {}, {}, {}, {}};
  const double count = static_cast<double>(s.N * s.S);
  for (int64_t c = 0; c < s.C; ++c) {
    double sum = 0, sq = 0;
    for (int64_t n = 0; n < s.N; ++n)
      for (int64_t k = 0; k < s.S; ++k) sum += x[(n * s.C + c) * s.S + k];
    const double mean = sum / count;
    for (int64_t n = 0; n < s.N; ++n)
      for (int64_t k = 0; k < s.S; ++k) sq += std::pow(x[(n * s.C + c) * s.S + k] - mean, 2);
    const double var = sq / count;
    const double inv_std = 1.0 / std::sqrt(var + kEpsilon);
    for (int64_t n = 0; n < s.N; ++n)
      for (int64_t k = 0; k < s.S; ++k) {
        const int64_t i = (n * s.C + c) * s.S + k;
        r.y[i] = (x[i] - mean) * inv_std * scale[c] + bias[c];
      }
    r.mean.push_back(mean);
    r.inv_std.push_back(inv_std);
    r.running_mean.push_back(kMomentum * rmean[c] + (1 - kMomentum) * mean);
    r.running_var.push_back(kMomentum * rvar[c] + (1 - kMomentum) * var * count / (count - 1));
  }
  return r;
}

template <typename T>
void expect_close(const std::vector<T>& actual, const std::vector<double>& expected,
                  const char* what) {
  const double tol = std::is_same<T, float>::value ? 1e-5 : 1e-12;
  ASSERT_EQ(actual.size(), expected.size()) << what;
  for (size_t i = 0; i < expected.size(); ++i) {
    ASSERT_NEAR(actual[i], expected[i], tol * (1.0 + std::fabs(expected[i])))
        << what << "[" << i << "]";
  }
}

template <typename T>
class BatchNormKernelTest : public ::testing::Test {};
using FloatTypes = ::testing::Types<float, double>;
TYPED_TEST_SUITE(BatchNormKernelTest, FloatTypes);

TYPED_TEST(BatchNormKernelTest, TrainForwardMatchesReference) {
  using T = TypeParam;
  for (const auto& s : bn_shapes()) {
    SCOPED_TRACE(::testing::Message() << s.N << "x" << s.C << "x" << s.S);
    // An offset mean makes a one-pass variance lose digits; the two-pass kernel must not.
    const auto x = random_values<T>(s.N * s.C * s.S, 1, 2.0, 4.0);
    const auto scale = random_values<T>(s.C, 2), bias = random_values<T>(s.C, 3);
    const auto rmean = random_values<T>(s.C, 4), rvar = random_values<T>(s.C, 5, 0.5, 2.0);
    const RefTrain ref = ref_train_forward(s, x, scale, bias, rmean, rvar);
    const auto xt = cast_to<T>(x), st = cast_to<T>(scale), bt = cast_to<T>(bias);
    std::vector<T> y(x.size()), mean(s.C), inv_std(s.C);
    // running_*_in aliases running_*_out, as the runtime passes them.
    std::vector<T> rm = cast_to<T>(rmean), rv = cast_to<T>(rvar);
    batchnorm_train_forward<T>(s.N, s.C, s.S, kEpsilon, kMomentum, true, xt.data(), st.data(),
                               bt.data(), rm.data(), rv.data(), y.data(), rm.data(), rv.data(),
                               mean.data(), inv_std.data());
    expect_close(y, ref.y, "y");
    expect_close(mean, ref.mean, "saved_mean");
    expect_close(inv_std, ref.inv_std, "saved_inv_std");
    expect_close(rm, ref.running_mean, "running_mean");
    expect_close(rv, ref.running_var, "running_var");

    // Separate in/out buffers leave the inputs untouched.
    const auto rm_in = cast_to<T>(rmean), rv_in = cast_to<T>(rvar);
    std::vector<T> rm_out(s.C), rv_out(s.C);
    batchnorm_train_forward<T>(s.N, s.C, s.S, kEpsilon, kMomentum, true, xt.data(), st.data(),
                               bt.data(), rm_in.data(), rv_in.data(), y.data(), rm_out.data(),
                               rv_out.data(), mean.data(), inv_std.data());
    expect_close(rm_out, ref.running_mean, "running_mean_out");
    expect_close(rv_out, ref.running_var, "running_var_out");
    expect_close(rm_in, rmean, "running_mean_in");
  }
}

// The statistics take one pass; summing about a shift must keep a mean a thousand standard
// deviations from zero from cancelling the variance (E[x^2] - E[x]^2 would lose six digits).
// The reference sums x - 1000, which is exact here, so that its own mean is not the weak link.
TYPED_TEST(BatchNormKernelTest, TrainForwardKeepsVarianceOfOffsetData) {
  using T = TypeParam;
  const int64_t N = 8, C = 3, S = 700;
  const double count = static_cast<double>(N * S);
  const auto x = random_values<T>(N * C * S, 11, 999.0, 1001.0);
  const auto scale = random_values<T>(C, 12), bias = random_values<T>(C, 13);
  std::vector<double> ref_y(x.size()), ref_inv_std(C);
  for (int64_t c = 0; c < C; ++c) {
    double sum = 0, sq = 0;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t k = 0; k < S; ++k) sum += x[(n * C + c) * S + k] - 1000.0;
    const double mean = 1000.0 + sum / count;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t k = 0; k < S; ++k) sq += std::pow(x[(n * C + c) * S + k] - mean, 2);
    ref_inv_std[c] = 1.0 / std::sqrt(sq / count + kEpsilon);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t k = 0; k < S; ++k) {
        const int64_t i = (n * C + c) * S + k;
        ref_y[i] = (x[i] - mean) * ref_inv_std[c] * scale[c] + bias[c];
      }
  }
  const auto xt = cast_to<T>(x), st = cast_to<T>(scale), bt = cast_to<T>(bias);
  std::vector<T> y(x.size()), rm(C, T(0)), rv(C, T(1)), mean(C), inv_std(C);
  batchnorm_train_forward<T>(N, C, S, kEpsilon, kMomentum, true, xt.data(), st.data(), bt.data(),
                             rm.data(), rv.data(), y.data(), rm.data(), rv.data(), mean.data(),
                             inv_std.data());
  expect_close(inv_std, ref_inv_std, "saved_inv_std");
  expect_close(y, ref_y, "y");
}

TYPED_TEST(BatchNormKernelTest, InferForwardMatchesReference) {
  using T = TypeParam;
  for (const auto& s : bn_shapes()) {
    SCOPED_TRACE(::testing::Message() << s.N << "x" << s.C << "x" << s.S);
    const auto x = random_values<T>(s.N * s.C * s.S, 6);
    const auto scale = random_values<T>(s.C, 7), bias = random_values<T>(s.C, 8);
    const auto mean = random_values<T>(s.C, 9), var = random_values<T>(s.C, 10, 0.1, 2.0);
    std::vector<double> ref(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      const int64_t c = (static_cast<int64_t>(i) / s.S) % s.C;
      ref[i] = (x[i] - mean[c]) / std::sqrt(var[c] + kEpsilon) * scale[c] + bias[c];
    }
    const auto xt = cast_to<T>(x), st = cast_to<T>(scale), bt = cast_to<T>(bias);
    const auto mt = cast_to<T>(mean), vt = cast_to<T>(var);
    std::vector<T> y(x.size(), std::numeric_limits<T>::quiet_NaN());
    batchnorm_infer_forward<T>(s.N, s.C, s.S, kEpsilon, xt.data(), st.data(), bt.data(), mt.data(),
                               vt.data(), y.data());
    expect_close(y, ref, "y");
  }
}

TYPED_TEST(BatchNormKernelTest, TrainBackwardMatchesReference) {
  using T = TypeParam;
  const T nan = std::numeric_limits<T>::quiet_NaN();
  for (const auto& s : bn_shapes()) {
    SCOPED_TRACE(::testing::Message() << s.N << "x" << s.C << "x" << s.S);
    const int64_t size = s.N * s.C * s.S;
    const auto x = random_values<T>(size, 11), dy = random_values<T>(size, 12);
    const auto scale = random_values<T>(s.C, 13);
    // Saved statistics as the forward produced them (rounded to T).
    std::vector<double> mean(s.C, 0.0), inv_std(s.C, 0.0);
    std::vector<double> ref_dx(size), ref_dscale(s.C, 0.0), ref_dbias(s.C, 0.0);
    const double count = static_cast<double>(s.N * s.S);
    auto at = [&](int64_t n, int64_t c, int64_t k) { return (n * s.C + c) * s.S + k; };
    for (int64_t c = 0; c < s.C; ++c) {
      double sum = 0, sq = 0;
      for (int64_t n = 0; n < s.N; ++n)
        for (int64_t k = 0; k < s.S; ++k) sum += x[at(n, c, k)];
      mean[c] = static_cast<T>(sum / count);
      for (int64_t n = 0; n < s.N; ++n)
        for (int64_t k = 0; k < s.S; ++k) sq += std::pow(x[at(n, c, k)] - mean[c], 2);
      inv_std[c] = static_cast<T>(1.0 / std::sqrt(sq / count + kEpsilon));
      for (int64_t n = 0; n < s.N; ++n)
        for (int64_t k = 0; k < s.S; ++k) {
          const double xhat = (x[at(n, c, k)] - mean[c]) * inv_std[c];
          ref_dbias[c] += dy[at(n, c, k)];
          ref_dscale[c] += dy[at(n, c, k)] * xhat;
        }
      for (int64_t n = 0; n < s.N; ++n)
        for (int64_t k = 0; k < s.S; ++k) {
          const double xhat = (x[at(n, c, k)] - mean[c]) * inv_std[c];
          ref_dx[at(n, c, k)] = scale[c] * inv_std[c] / count *
                                (count * dy[at(n, c, k)] - ref_dbias[c] - xhat * ref_dscale[c]);
        }
    }
    const auto xt = cast_to<T>(x), dyt = cast_to<T>(dy), st = cast_to<T>(scale);
    const auto mt = cast_to<T>(mean), it = cast_to<T>(inv_std);
    std::vector<T> dx(size, nan), dscale(s.C, nan), dbias(s.C, nan);
    batchnorm_train_backward<T>(s.N, s.C, s.S, xt.data(), dyt.data(), st.data(), mt.data(),
                                it.data(), dx.data(), dscale.data(), dbias.data());
    expect_close(dx, ref_dx, "dx");
    expect_close(dscale, ref_dscale, "dscale");
    expect_close(dbias, ref_dbias, "dbias");

    std::vector<T> only(size, nan);
    batchnorm_train_backward<T>(s.N, s.C, s.S, xt.data(), dyt.data(), st.data(), mt.data(),
                                it.data(), only.data(), nullptr, nullptr);
    expect_close(only, ref_dx, "dx_only");
    only.assign(s.C, nan);
    batchnorm_train_backward<T>(s.N, s.C, s.S, xt.data(), dyt.data(), st.data(), mt.data(),
                                it.data(), nullptr, only.data(), nullptr);
    expect_close(only, ref_dscale, "dscale_only");
    only.assign(s.C, nan);
    batchnorm_train_backward<T>(s.N, s.C, s.S, xt.data(), dyt.data(), st.data(), mt.data(),
                                it.data(), nullptr, nullptr, only.data());
    expect_close(only, ref_dbias, "dbias_only");
  }
}

// Central differences of L = sum(train_forward(x, scale, bias) * r), which sees the batch
// statistics move with x, against the backward's outputs for dy = r.
TEST(BatchNormKernelGradCheck, TrainBackwardMatchesFiniteDifferences) {
  constexpr double kStep = 1e-6, kTol = 1e-6;
  for (const auto& s : bn_shapes()) {
    const int64_t size = s.N * s.C * s.S;
    if (size > 200) continue;
    SCOPED_TRACE(::testing::Message() << s.N << "x" << s.C << "x" << s.S);
    auto x = random_values<double>(size, 14), scale = random_values<double>(s.C, 15);
    auto bias = random_values<double>(s.C, 16);
    const auto r = random_values<double>(size, 17);
    std::vector<double> y(size), rm(s.C, 0.0), rv(s.C, 1.0), mean(s.C), inv_std(s.C);
    auto loss = [&] {
      batchnorm_train_forward<double>(s.N, s.C, s.S, kEpsilon, kMomentum, true, x.data(),
                                      scale.data(), bias.data(), rm.data(), rv.data(), y.data(),
                                      rm.data(), rv.data(), mean.data(), inv_std.data());
      double l = 0;
      for (int64_t i = 0; i < size; ++i) l += y[i] * r[i];
      return l;
    };
    loss();
    std::vector<double> dx(size), dscale(s.C), dbias(s.C);
    batchnorm_train_backward<double>(s.N, s.C, s.S, x.data(), r.data(), scale.data(), mean.data(),
                                     inv_std.data(), dx.data(), dscale.data(), dbias.data());
    auto check = [&](std::vector<double>& param, const std::vector<double>& grad,
                     const char* what) {
      for (size_t i = 0; i < param.size(); ++i) {
        const double saved = param[i];
        param[i] = saved + kStep;
        const double up = loss();
        param[i] = saved - kStep;
        const double down = loss();
        param[i] = saved;
        const double fd = (up - down) / (2 * kStep);
        ASSERT_NEAR(grad[i], fd, kTol * (1.0 + std::fabs(fd))) << what << "[" << i << "]";
      }
    };
    check(x, dx, "dx");
    check(scale, dscale, "dscale");
    check(bias, dbias, "dbias");
  }
}

}  // namespace
}  // namespace ortmodule
