// Softmax, log-softmax, NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss CPU
// kernels against naive double-precision references written here with direct
// loops, and every backward against central finite differences of its forward.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <functional>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/cpu/loss.h"
#include "kernels/cpu/softmax.h"

namespace ortmodule {
namespace {

using Vec = std::vector<double>;

Vec random_vec(int64_t n, uint32_t seed, double lo = -3.0, double hi = 3.0) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  Vec v(n);
  for (double& x : v) x = dist(gen);
  return v;
}

template <typename T, typename U>
std::vector<T> cast(const std::vector<U>& v) {
  return std::vector<T>(v.begin(), v.end());
}

template <typename T>
double tolerance() {
  return std::is_same<T, float>::value ? 2e-5 : 1e-12;
}

template <typename T>
void expect_close(const std::vector<T>& got, const Vec& want, double tol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < want.size(); ++i) {
    if (std::isnan(want[i])) {
      EXPECT_TRUE(std::isnan(got[i])) << what << " at " << i;
    } else {
      EXPECT_NEAR(got[i], want[i], tol * (1.0 + std::fabs(want[i]))) << what << " at " << i;
    }
  }
}

// Central differences of a scalar function f at x, step 1e-6.
Vec finite_difference(Vec x, const std::function<double(const Vec&)>& f) {
  const double eps = 1e-6;
  Vec grad(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double saved = x[i];
    x[i] = saved + eps;
    const double up = f(x);
    x[i] = saved - eps;
    const double down = f(x);
    x[i] = saved;
    grad[i] = (up - down) / (2 * eps);
  }
  return grad;
}

double dot(const Vec& a, const Vec& b) {
  return std::inner_product(a.begin(), a.end(), b.begin(), 0.0);
}

// ---------------------------------------------------------------- naive references

Vec naive_softmax(int64_t outer, int64_t dim, int64_t inner, const Vec& x, bool log) {
  Vec y(x.size());
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < inner; ++i) {
      auto at = [&](int64_t d) { return (o * dim + d) * inner + i; };
      double max = -INFINITY;
      for (int64_t d = 0; d < dim; ++d) max = std::max(max, x[at(d)]);
      double sum = 0;
      for (int64_t d = 0; d < dim; ++d) sum += std::exp(x[at(d)] - max);
      for (int64_t d = 0; d < dim; ++d) {
        y[at(d)] = log ? x[at(d)] - max - std::log(sum) : std::exp(x[at(d)] - max) / sum;
      }
    }
  }
  return y;
}

Vec naive_softmax_backward(int64_t outer, int64_t dim, int64_t inner, const Vec& dy, const Vec& y,
                           bool log) {
  Vec dx(y.size());
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < inner; ++i) {
      auto at = [&](int64_t d) { return (o * dim + d) * inner + i; };
      double s = 0;
      for (int64_t d = 0; d < dim; ++d) s += log ? dy[at(d)] : dy[at(d)] * y[at(d)];
      for (int64_t d = 0; d < dim; ++d) {
        dx[at(d)] = log ? dy[at(d)] - std::exp(y[at(d)]) * s : y[at(d)] * (dy[at(d)] - s);
      }
    }
  }
  return dx;
}

struct LossCase {
  int64_t N, C, D;
  Reduction reduction;
  bool use_weight;
  bool has_ignore;
  int64_t ignore_index;
  std::vector<int64_t> target;  // [N, D]
  Vec weight;                   // [C] or empty
  int64_t loss_size() const { return reduction == Reduction::None ? N * D : 1; }
  const double* w() const { return use_weight ? weight.data() : nullptr; }
  bool ignored(int64_t k) const { return has_ignore && target[k] == ignore_index; }
  double wt(int64_t label) const { return use_weight ? weight[label] : 1.0; }
};

Vec naive_nll(const LossCase& c, const Vec& input) {
  Vec per(c.N * c.D, 0.0);
  double sum = 0, weight_sum = 0;
  for (int64_t n = 0; n < c.N; ++n) {
    for (int64_t d = 0; d < c.D; ++d) {
      const int64_t k = n * c.D + d;
      if (c.ignored(k)) continue;
      const int64_t t = c.target[k];
      per[k] = -input[(n * c.C + t) * c.D + d] * c.wt(t);
      sum += per[k];
      weight_sum += c.wt(t);
    }
  }
  if (c.reduction == Reduction::None) return per;
  return {c.reduction == Reduction::Sum ? sum : sum / weight_sum};
}

// Gradient of the per-entry coefficient g[k] that multiplies -w * onehot.
Vec naive_entry_scale(const LossCase& c, const Vec& dloss) {
  double weight_sum = 0;
  for (int64_t k = 0; k < c.N * c.D; ++k) {
    if (!c.ignored(k)) weight_sum += c.wt(c.target[k]);
  }
  Vec g(c.N * c.D, 0.0);
  for (int64_t k = 0; k < c.N * c.D; ++k) {
    if (c.ignored(k)) continue;
    const double upstream = c.reduction == Reduction::None ? dloss[k] : dloss[0];
    g[k] = (c.reduction == Reduction::Mean ? upstream / weight_sum : upstream) * c.wt(c.target[k]);
  }
  return g;
}

Vec naive_nll_backward(const LossCase& c, const Vec& dloss) {
  const Vec g = naive_entry_scale(c, dloss);
  Vec dx(c.N * c.C * c.D, 0.0);
  for (int64_t k = 0; k < c.N * c.D; ++k) {
    if (!c.ignored(k)) dx[((k / c.D) * c.C + c.target[k]) * c.D + k % c.D] = -g[k];
  }
  return dx;
}

Vec naive_sce_backward(const LossCase& c, const Vec& dloss, const Vec& scores) {
  const Vec g = naive_entry_scale(c, dloss);
  const Vec p = naive_softmax(c.N, c.C, c.D, scores, /*log=*/false);
  Vec dx(p.size(), 0.0);
  for (int64_t n = 0; n < c.N; ++n) {
    for (int64_t j = 0; j < c.C; ++j) {
      for (int64_t d = 0; d < c.D; ++d) {
        const int64_t k = n * c.D + d;
        if (c.ignored(k)) continue;
        const int64_t at = (n * c.C + j) * c.D + d;
        dx[at] = (p[at] - (j == c.target[k] ? 1.0 : 0.0)) * g[k];
      }
    }
  }
  return dx;
}

// ---------------------------------------------------------------- softmax

struct Shape {
  int64_t outer, dim, inner;
  int64_t size() const { return outer * dim * inner; }
};

// Odd sizes, inner == 1 and > 1, inner wider than one tile, and sizes large enough
// that parallel chunks start in the middle of an outer index.
const std::vector<Shape> kSoftmaxShapes = {{1, 1, 1},     {1, 7, 1},    {5, 13, 1},
                                           {20000, 3, 1}, {1, 1000, 1}, {3, 1, 4},
                                           {2, 5, 3},     {4, 9, 70},   {3, 5, 7000}};
// Small enough for finite differences.
const std::vector<Shape> kGradShapes = {{1, 1, 1}, {3, 6, 1}, {2, 5, 3}, {2, 3, 67}};

template <typename T>
class SoftmaxTest : public ::testing::Test {};
using FloatTypes = ::testing::Types<float, double>;
TYPED_TEST_SUITE(SoftmaxTest, FloatTypes);

TYPED_TEST(SoftmaxTest, ForwardMatchesNaive) {
  using T = TypeParam;
  for (const Shape& s : kSoftmaxShapes) {
    for (bool log : {false, true}) {
      const Vec x = random_vec(s.size(), 1);
      std::vector<T> y(x.size());
      const std::vector<T> xt = cast<T>(x);
      softmax_forward(s.outer, s.dim, s.inner, xt.data(), y.data(), log);
      expect_close(y, naive_softmax(s.outer, s.dim, s.inner, cast<double>(xt), log), tolerance<T>(),
                   "log=" + std::to_string(log) + " dim=" + std::to_string(s.dim));
    }
  }
}

TYPED_TEST(SoftmaxTest, ForwardIsStableForLargeInputs) {
  using T = TypeParam;
  const Vec x = {1000, 1001, 1002, -1000, -1001, -1002, 88, 89, 90, 1e4, 0, -1e4};
  const std::vector<T> xt = cast<T>(x);
  for (bool log : {false, true}) {
    std::vector<T> y(x.size());
    softmax_forward<T>(4, 3, 1, xt.data(), y.data(), log);
    expect_close(y, naive_softmax(4, 3, 1, x, log), tolerance<T>(), "rows");
    softmax_forward<T>(1, 3, 4, xt.data(), y.data(), log);
    expect_close(y, naive_softmax(1, 3, 4, x, log), tolerance<T>(), "strided");
  }
}

TYPED_TEST(SoftmaxTest, BackwardMatchesNaive) {
  using T = TypeParam;
  for (const Shape& s : kSoftmaxShapes) {
    for (bool log : {false, true}) {
      const std::vector<T> x = cast<T>(random_vec(s.size(), 2));
      const std::vector<T> dy = cast<T>(random_vec(s.size(), 3));
      std::vector<T> y(x.size()), dx(x.size());
      softmax_forward(s.outer, s.dim, s.inner, x.data(), y.data(), log);
      softmax_backward(s.outer, s.dim, s.inner, dy.data(), y.data(), dx.data(), log);
      const Vec want =
          naive_softmax_backward(s.outer, s.dim, s.inner, cast<double>(dy), cast<double>(y), log);
      expect_close(dx, want, 10 * tolerance<T>(), "log=" + std::to_string(log));
    }
  }
}

TYPED_TEST(SoftmaxTest, InPlace) {
  using T = TypeParam;
  for (const Shape& s : {Shape{3, 7, 1}, Shape{2, 5, 9}}) {
    for (bool log : {false, true}) {
      const std::vector<T> x = cast<T>(random_vec(s.size(), 4));
      const std::vector<T> dy = cast<T>(random_vec(s.size(), 5));
      std::vector<T> y(x.size()), dx(x.size());
      softmax_forward(s.outer, s.dim, s.inner, x.data(), y.data(), log);
      softmax_backward(s.outer, s.dim, s.inner, dy.data(), y.data(), dx.data(), log);
      std::vector<T> inplace = x;
      softmax_forward(s.outer, s.dim, s.inner, inplace.data(), inplace.data(), log);
      EXPECT_EQ(inplace, y);
      inplace = dy;
      softmax_backward(s.outer, s.dim, s.inner, inplace.data(), y.data(), inplace.data(), log);
      EXPECT_EQ(inplace, dx);
    }
  }
}

TEST(SoftmaxGradCheck, BackwardMatchesFiniteDifferences) {
  for (const Shape& s : kGradShapes) {
    for (bool log : {false, true}) {
      const Vec x = random_vec(s.size(), 6);
      const Vec r = random_vec(s.size(), 7);  // L(x) = sum(r * softmax(x))
      auto loss = [&](const Vec& xv) {
        Vec y(xv.size());
        softmax_forward(s.outer, s.dim, s.inner, xv.data(), y.data(), log);
        return dot(r, y);
      };
      Vec y(x.size()), dx(x.size());
      softmax_forward(s.outer, s.dim, s.inner, x.data(), y.data(), log);
      softmax_backward(s.outer, s.dim, s.inner, r.data(), y.data(), dx.data(), log);
      expect_close(dx, finite_difference(x, loss), 1e-7, "log=" + std::to_string(log));
    }
  }
}

// ---------------------------------------------------------------- losses

LossCase make_case(int64_t N, int64_t C, int64_t D, Reduction reduction, bool use_weight,
                   bool has_ignore, int64_t ignore_index, uint32_t seed) {
  LossCase c{N, C, D, reduction, use_weight, has_ignore, ignore_index, {}, {}};
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int64_t> label(0, C - 1);
  std::bernoulli_distribution drop(0.25);
  c.target.resize(N * D);
  for (int64_t& t : c.target) t = has_ignore && drop(gen) ? ignore_index : label(gen);
  if (use_weight) c.weight = random_vec(C, seed + 1, 0.1, 2.0);
  return c;
}

// Every reduction, with and without weight and ignore_index (out of range and in
// range), D == 1 and D > 1; `big` adds sizes spanning several sum blocks and chunks.
std::vector<LossCase> all_cases(bool big) {
  std::vector<LossCase> cases;
  uint32_t seed = 10;
  std::vector<std::array<int64_t, 3>> shapes = {{5, 4, 1}, {3, 3, 5}, {1, 7, 2}};
  if (big) shapes = {{5, 4, 1}, {3, 3, 5}, {1, 7, 2}, {9000, 5, 1}, {3, 4, 7000}};
  for (const auto& shape : shapes) {
    for (Reduction r : {Reduction::None, Reduction::Sum, Reduction::Mean}) {
      for (bool use_weight : {false, true}) {
        for (int64_t ignore : {int64_t{-1}, int64_t{1}}) {
          for (bool has_ignore : {false, true}) {
            if (!has_ignore && ignore == 1) continue;
            cases.push_back(
                make_case(shape[0], shape[1], shape[2], r, use_weight, has_ignore, ignore, seed++));
          }
        }
      }
    }
  }
  return cases;
}

std::string describe(const LossCase& c) {
  return "N=" + std::to_string(c.N) + " C=" + std::to_string(c.C) + " D=" + std::to_string(c.D) +
         " reduction=" + std::to_string(static_cast<int>(c.reduction)) +
         " weight=" + std::to_string(c.use_weight) + " ignore=" + std::to_string(c.has_ignore) +
         "/" + std::to_string(c.ignore_index);
}

template <typename T>
class LossTest : public ::testing::Test {};
TYPED_TEST_SUITE(LossTest, FloatTypes);

TYPED_TEST(LossTest, NllMatchesNaive) {
  using T = TypeParam;
  for (const LossCase& c : all_cases(/*big=*/true)) {
    const std::vector<T> input = cast<T>(random_vec(c.N * c.C * c.D, 20));
    const std::vector<T> weight = cast<T>(c.weight);
    const T* w = c.use_weight ? weight.data() : nullptr;
    std::vector<T> loss(c.loss_size());
    nll_loss_forward(c.N, c.C, c.D, input.data(), c.target.data(), w, c.reduction, c.ignore_index,
                     c.has_ignore, loss.data());
    LossCase ct = c;
    ct.weight = cast<double>(weight);
    expect_close(loss, naive_nll(ct, cast<double>(input)), tolerance<T>(), describe(c));

    const std::vector<T> dloss = cast<T>(random_vec(c.loss_size(), 21));
    std::vector<T> d_input(input.size(), T(7));  // garbage: every element must be written
    nll_loss_backward(c.N, c.C, c.D, dloss.data(), c.target.data(), w, c.reduction, c.ignore_index,
                      c.has_ignore, d_input.data());
    expect_close(d_input, naive_nll_backward(ct, cast<double>(dloss)), tolerance<T>(), describe(c));
  }
}

TYPED_TEST(LossTest, SoftmaxCrossEntropyMatchesNaive) {
  using T = TypeParam;
  for (const LossCase& c : all_cases(/*big=*/true)) {
    const std::vector<T> scores = cast<T>(random_vec(c.N * c.C * c.D, 30));
    const std::vector<T> weight = cast<T>(c.weight);
    const T* w = c.use_weight ? weight.data() : nullptr;
    std::vector<T> loss(c.loss_size()), log_prob(scores.size());
    softmax_cross_entropy_forward(c.N, c.C, c.D, scores.data(), c.target.data(), w, c.reduction,
                                  c.ignore_index, c.has_ignore, loss.data(), log_prob.data());
    LossCase ct = c;
    ct.weight = cast<double>(weight);
    const Vec want_log_prob = naive_softmax(c.N, c.C, c.D, cast<double>(scores), /*log=*/true);
    expect_close(log_prob, want_log_prob, tolerance<T>(), describe(c));
    expect_close(loss, naive_nll(ct, want_log_prob), tolerance<T>(), describe(c));

    const std::vector<T> dloss = cast<T>(random_vec(c.loss_size(), 31));
    std::vector<T> d_scores(scores.size(), T(7));
    softmax_cross_entropy_backward(c.N, c.C, c.D, dloss.data(), log_prob.data(), c.target.data(), w,
                                   c.reduction, c.ignore_index, c.has_ignore, d_scores.data());
    expect_close(d_scores, naive_sce_backward(ct, cast<double>(dloss), cast<double>(scores)),
                 10 * tolerance<T>(), describe(c));
  }
}

TEST(LossGradCheck, NllBackwardMatchesFiniteDifferences) {
  for (const LossCase& c : all_cases(/*big=*/false)) {
    const Vec input = random_vec(c.N * c.C * c.D, 40);
    const Vec r = random_vec(c.loss_size(), 41);  // L(input) = sum(r * loss(input))
    auto objective = [&](const Vec& x) {
      Vec loss(c.loss_size());
      nll_loss_forward(c.N, c.C, c.D, x.data(), c.target.data(), c.w(), c.reduction, c.ignore_index,
                       c.has_ignore, loss.data());
      return dot(r, loss);
    };
    Vec d_input(input.size());
    nll_loss_backward(c.N, c.C, c.D, r.data(), c.target.data(), c.w(), c.reduction, c.ignore_index,
                      c.has_ignore, d_input.data());
    expect_close(d_input, finite_difference(input, objective), 1e-7, describe(c));
  }
}

TEST(LossGradCheck, SoftmaxCrossEntropyBackwardMatchesFiniteDifferences) {
  for (const LossCase& c : all_cases(/*big=*/false)) {
    const Vec scores = random_vec(c.N * c.C * c.D, 50);
    const Vec r = random_vec(c.loss_size(), 51);
    Vec log_prob(scores.size());
    auto objective = [&](const Vec& x) {
      Vec loss(c.loss_size());
      softmax_cross_entropy_forward(c.N, c.C, c.D, x.data(), c.target.data(), c.w(), c.reduction,
                                    c.ignore_index, c.has_ignore, loss.data(), log_prob.data());
      return dot(r, loss);
    };
    objective(scores);
    Vec d_scores(scores.size());
    softmax_cross_entropy_backward(c.N, c.C, c.D, r.data(), log_prob.data(), c.target.data(), c.w(),
                                   c.reduction, c.ignore_index, c.has_ignore, d_scores.data());
    expect_close(d_scores, finite_difference(scores, objective), 1e-7, describe(c));
  }
}

TYPED_TEST(LossTest, WeightedMeanDividesBySumOfKeptWeights) {
  using T = TypeParam;
  // input [3, 2], target {0, 1, ignored}, weight {2, 3}: (1*2 + 4*3) / (2 + 3).
  const std::vector<T> input = {-1, -2, -3, -4, -5, -6};
  const std::vector<int64_t> target = {0, 1, -100};
  const std::vector<T> weight = {2, 3};
  T loss = 0;
  nll_loss_forward<T>(3, 2, 1, input.data(), target.data(), weight.data(), Reduction::Mean, -100,
                      true, &loss);
  EXPECT_NEAR(loss, 2.8, tolerance<T>());
}

TYPED_TEST(LossTest, MatchesPyTorchCrossEntropy) {
  using T = TypeParam;
  // Recorded from torch 2.x: F.cross_entropy(s, t, weight=w, ignore_index=-1), s: [2, 3, 2].
  const std::vector<T> scores = {0.5, -1.0, 2.0, 0.25, -0.75, 1.5, 1.0, 0.0, -2.0, 3.0, 0.5, 0.5};
  const std::vector<int64_t> labels = {2, 1, 0, -1};
  const std::vector<T> weight = {0.5, 2.0, 1.5};
  const Vec want_grad = {0.06501168452962316,  0.029988897657557134,
                         0.2913621560006784,   -0.39532846225890156,
                         -0.3563738405303016,  0.36533956460134437,
                         -0.04953138798142177, 0.0,
                         0.003757360946196753, 0.0,
                         0.04577402703522503,  0.0};
  T loss = 0;
  std::vector<T> log_prob(12), d_scores(12);
  softmax_cross_entropy_forward<T>(2, 3, 2, scores.data(), labels.data(), weight.data(),
                                   Reduction::Mean, -1, true, &loss, log_prob.data());
  EXPECT_NEAR(loss, 1.970849673299848, tolerance<T>());
  const T one = 1;
  softmax_cross_entropy_backward<T>(2, 3, 2, &one, log_prob.data(), labels.data(), weight.data(),
                                    Reduction::Mean, -1, true, d_scores.data());
  expect_close(d_scores, want_grad, tolerance<T>(), "grad");
}

// Mean is 0/0 = NaN like PyTorch; None and Sum are sums of nothing.
template <typename T>
void expect_empty_reduction(const std::vector<T>& loss, Reduction r) {
  for (T v : loss) {
    if (r == Reduction::Mean) {
      EXPECT_TRUE(std::isnan(v));
    } else {
      EXPECT_EQ(v, T(0));
    }
  }
}

TYPED_TEST(LossTest, AllIgnored) {
  using T = TypeParam;
  const std::vector<T> x = cast<T>(random_vec(2 * 3 * 2, 60));
  const std::vector<int64_t> target(4, -100);
  std::vector<T> log_prob(x.size()), grad(x.size(), T(7));
  for (Reduction r : {Reduction::None, Reduction::Sum, Reduction::Mean}) {
    std::vector<T> loss(r == Reduction::None ? 4 : 1, T(7));
    nll_loss_forward<T>(2, 3, 2, x.data(), target.data(), nullptr, r, -100, true, loss.data());
    expect_empty_reduction(loss, r);
    std::fill(loss.begin(), loss.end(), T(7));
    softmax_cross_entropy_forward<T>(2, 3, 2, x.data(), target.data(), nullptr, r, -100, true,
                                     loss.data(), log_prob.data());
    expect_empty_reduction(loss, r);

    const std::vector<T> dloss(loss.size(), T(1));
    nll_loss_backward<T>(2, 3, 2, dloss.data(), target.data(), nullptr, r, -100, true, grad.data());
    for (T v : grad) EXPECT_EQ(v, T(0));
    std::fill(grad.begin(), grad.end(), T(7));
    softmax_cross_entropy_backward<T>(2, 3, 2, dloss.data(), log_prob.data(), target.data(),
                                      nullptr, r, -100, true, grad.data());
    for (T v : grad) EXPECT_EQ(v, T(0));
  }
}

TEST(LossLabels, OutOfRangeLabelThrowsWithValuePositionAndClasses) {
  const std::vector<double> x(2 * 3 * 4, 0.0);
  std::vector<double> loss(8), grad(x.size());
  std::vector<int64_t> target = {0, 1, 2, 0, 1, 2, 7, 0};  // [2, 4]: 7 at n=1, d=2
  auto expect_message = [](const std::function<void()>& call) {
    try {
      call();
      ADD_FAILURE() << "no exception";
    } catch (const std::invalid_argument& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("label 7"), std::string::npos) << msg;
      EXPECT_NE(msg.find("n=1, d=2"), std::string::npos) << msg;
      EXPECT_NE(msg.find("C = 3"), std::string::npos) << msg;
    }
  };
  expect_message([&] {
    nll_loss_forward<double>(2, 3, 4, x.data(), target.data(), nullptr, Reduction::None, -100, true,
                             loss.data());
  });
  expect_message([&] {
    nll_loss_backward<double>(2, 3, 4, loss.data(), target.data(), nullptr, Reduction::None, -100,
                              true, grad.data());
  });
  expect_message([&] {
    softmax_cross_entropy_forward<double>(2, 3, 4, x.data(), target.data(), nullptr, Reduction::Sum,
                                          0, false, loss.data(), grad.data());
  });
  expect_message([&] {
    softmax_cross_entropy_backward<double>(2, 3, 4, loss.data(), x.data(), target.data(), nullptr,
                                           Reduction::Sum, 0, false, grad.data());
  });
  // A negative label is valid only when it is the ignore_index in use.
  target[6] = -100;
  EXPECT_NO_THROW(nll_loss_forward<double>(2, 3, 4, x.data(), target.data(), nullptr,
                                           Reduction::Sum, -100, true, loss.data()));
  EXPECT_THROW(nll_loss_forward<double>(2, 3, 4, x.data(), target.data(), nullptr, Reduction::Sum,
                                        -100, false, loss.data()),
               std::invalid_argument);
}

}  // namespace
}  // namespace ortmodule
