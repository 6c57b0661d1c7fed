// Optimizer arithmetic (csrc/optim) against double-precision formulas written here
// directly from the update rules, over several steps, plus the error cases.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <utility>
#include <vector>

#include "optim/optimizers.h"

namespace ortmodule {
namespace {

std::vector<float> random_floats(int64_t n, uint32_t seed, float lo = -2.f, float hi = 2.f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(gen);
  return v;
}

struct DoubleAdamW {
  std::vector<double> p, m, v;
};

// One AdamW step in double: mode 0 as torch.optim.AdamW, mode 1 as transformers' AdamW.
void adamw_double(const AdamWConfig& c, double lr, int64_t t, DoubleAdamW& s,
                  const std::vector<float>& g) {
  const double b1 = c.alpha, b2 = c.beta, eps = c.epsilon, wd = c.weight_decay;
  const double bc1 = c.correct_bias ? 1.0 - std::pow(b1, static_cast<double>(t)) : 1.0;
  const double bc2 = c.correct_bias ? 1.0 - std::pow(b2, static_cast<double>(t)) : 1.0;
  for (size_t i = 0; i < s.p.size(); ++i) {
    if (c.adam_mode == 0) s.p[i] *= 1.0 - lr * wd;
    s.m[i] = b1 * s.m[i] + (1.0 - b1) * g[i];
    s.v[i] = b2 * s.v[i] + (1.0 - b2) * g[i] * g[i];
    if (c.adam_mode == 0) {
      const double m_hat = s.m[i] / bc1;
      const double denom = std::sqrt(s.v[i] / bc2) + eps;
      s.p[i] -= lr * m_hat / denom;
    } else {
      const double step_size = lr * std::sqrt(bc2) / bc1;
      s.p[i] -= step_size * s.m[i] / (std::sqrt(s.v[i]) + eps);
      s.p[i] -= lr * wd * s.p[i];
    }
  }
}

void expect_close(const std::vector<float>& got, const std::vector<double>& want, double rtol,
                  double atol, const char* what, int step) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_NEAR(got[i], want[i], atol + rtol * std::fabs(want[i]))
        << what << "[" << i << "] after step " << step;
  }
}

void run_adamw_case(const AdamWConfig& c, float lr, int64_t n, int steps) {
  std::vector<float> p = random_floats(n, 1), m(n, 0.f), v(n, 0.f);
  DoubleAdamW ref{std::vector<double>(p.begin(), p.end()), std::vector<double>(n, 0.0),
                  std::vector<double>(n, 0.0)};
  for (int t = 1; t <= steps; ++t) {
    const std::vector<float> g = random_floats(n, 100 + t, -1.f, 1.f);
    adamw_update(c, lr, t, p.data(), g.data(), m.data(), v.data(), n);
    adamw_double(c, lr, t, ref, g);
    expect_close(p, ref.p, 2e-5, 1e-6, "param", t);
    expect_close(m, ref.m, 1e-5, 1e-7, "exp_avg", t);
    expect_close(v, ref.v, 1e-5, 1e-9, "exp_avg_sq", t);
  }
}

TEST(Optimizers, AdamWMode1DefaultsMatchDoubleFormula) {
  run_adamw_case(AdamWConfig{}, 1e-2f, 37, 6);
}

TEST(Optimizers, AdamWMode1WeightDecayNoBiasCorrection) {
  AdamWConfig c;
  c.weight_decay = 0.05f;
  c.correct_bias = false;
  c.alpha = 0.8f;
  c.beta = 0.95f;
  c.epsilon = 1e-4f;
  run_adamw_case(c, 3e-3f, 29, 5);
}

TEST(Optimizers, AdamWMode0MatchesPyTorchFormula) {
  AdamWConfig c;
  c.adam_mode = 0;
  c.weight_decay = 0.01f;
  c.epsilon = 1e-8f;
  run_adamw_case(c, 1e-2f, 41, 6);
}

TEST(Optimizers, AdamWFirstStepShowsWhereEachModeAddsEpsilon) {
  // With zero moments and bias correction, step 1 has m = (1-b1) g and v = (1-b2) g^2.
  // Mode 0 (PyTorch) adds eps to sqrt(v_hat) = |g|: the weight moves by lr g / (|g| + eps).
  // Mode 1 (transformers) adds eps to the uncorrected sqrt(v) = sqrt(1-b2) |g|: the weight
  // moves by lr g / (|g| + eps / sqrt(1-b2)), a 30x larger effective eps for b2 = 0.999.
  const int64_t n = 8;
  const std::vector<float> g = random_floats(n, 7, -1e-3f, 1e-3f);
  for (int64_t mode : {0, 1}) {
    AdamWConfig c;
    c.adam_mode = mode;
    c.epsilon = 1e-5f;
    std::vector<float> p(n, 0.5f), m(n, 0.f), v(n, 0.f);
    adamw_update(c, 0.1f, 1, p.data(), g.data(), m.data(), v.data(), n);
    const double eps_eff =
        mode == 0 ? c.epsilon : c.epsilon / std::sqrt(1.0 - static_cast<double>(c.beta));
    for (int64_t i = 0; i < n; ++i) {
      const double want = 0.5 - 0.1 * g[i] / (std::fabs(g[i]) + eps_eff);
      EXPECT_NEAR(p[i], want, 2e-6) << "mode " << mode << " element " << i;
    }
  }
}

TEST(Optimizers, AdamWLargeTensorEqualsElementByElement) {
  // Crosses the parallel grain: the split over threads must not change any bit.
  const int64_t n = 100003;
  AdamWConfig c;
  c.weight_decay = 0.1f;
  for (int64_t mode : {0, 1}) {
    c.adam_mode = mode;
    std::vector<float> p = random_floats(n, 3), m = random_floats(n, 4, -0.1f, 0.1f),
                       v = random_floats(n, 5, 0.f, 0.1f);
    const std::vector<float> g = random_floats(n, 6);
    std::vector<float> p1 = p, m1 = m, v1 = v;
    adamw_update(c, 1e-3f, 3, p.data(), g.data(), m.data(), v.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      adamw_update(c, 1e-3f, 3, &p1[i], &g[i], &m1[i], &v1[i], 1);
    }
    EXPECT_EQ(p, p1) << "mode " << mode;
    EXPECT_EQ(m, m1) << "mode " << mode;
    EXPECT_EQ(v, v1) << "mode " << mode;
  }
}

TEST(Optimizers, AdamWRejectsWhatTheReferenceKernelRejects) {
  std::vector<float> p(2, 1.f), g(2, 1.f), m(2, 0.f), v(2, 0.f);
  AdamWConfig bad_mode;
  bad_mode.adam_mode = 2;
  EXPECT_THROW(adamw_update(bad_mode, 0.1f, 1, p.data(), g.data(), m.data(), v.data(), 2),
               std::invalid_argument);
  AdamWConfig torch_no_bias;
  torch_no_bias.adam_mode = 0;
  torch_no_bias.correct_bias = false;
  EXPECT_THROW(validate_adamw_config(torch_no_bias), std::invalid_argument);
  try {
    adamw_update(AdamWConfig{}, 0.1f, 0, p.data(), g.data(), m.data(), v.data(), 2);
    FAIL() << "step 0 with bias correction must be refused";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("step"), std::string::npos) << e.what();
  }
  // Without bias correction step 0 is a valid input (it is not used).
  AdamWConfig no_bias;
  no_bias.correct_bias = false;
  EXPECT_NO_THROW(adamw_update(no_bias, 0.1f, 0, p.data(), g.data(), m.data(), v.data(), 2));
  EXPECT_TRUE(std::isfinite(p[0]));
}

TEST(Optimizers, SgdIsParamMinusLrTimesGrad) {
  const int64_t n = 50;
  std::vector<float> p = random_floats(n, 11);
  const std::vector<float> g = random_floats(n, 12);
  std::vector<double> want(p.begin(), p.end());
  for (int step = 1; step <= 3; ++step) {
    sgd_update(0.25f, p.data(), g.data(), n);
    for (int64_t i = 0; i < n; ++i) want[i] -= 0.25 * g[i];
    expect_close(p, want, 1e-6, 1e-6, "param", step);
  }
}

TEST(Optimizers, ClipGradNormScalesAllTensorsTogether) {
  std::vector<float> a = random_floats(13, 21), b = random_floats(70000, 22, -0.1f, 0.1f);
  std::vector<float> a0 = a, b0 = b;
  double sum_sq = 0.0;
  for (float x : a) sum_sq += static_cast<double>(x) * x;
  for (float x : b) sum_sq += static_cast<double>(x) * x;
  const double norm = std::sqrt(sum_sq);
  const float max_norm = 0.5f;
  const float got = clip_grad_norm({{a.data(), 13}, {b.data(), 70000}}, max_norm);
  EXPECT_NEAR(got, norm, 1e-6 * norm);
  const double coef = std::min(max_norm / (norm + 1e-6), 1.0);
  ASSERT_LT(coef, 1.0);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], a0[i] * coef, 1e-6 * std::fabs(a0[i]));
  for (size_t i = 0; i < b.size(); i += 97) {
    EXPECT_NEAR(b[i], b0[i] * coef, 1e-6 * std::fabs(b0[i]) + 1e-12);
  }
  double clipped_sq = 0.0;
  for (float x : a) clipped_sq += static_cast<double>(x) * x;
  for (float x : b) clipped_sq += static_cast<double>(x) * x;
  EXPECT_NEAR(std::sqrt(clipped_sq), max_norm, 1e-5);
}

TEST(Optimizers, ClipGradNormBelowMaxLeavesGradientsUnchanged) {
  std::vector<float> a = {0.3f, -0.4f};  // norm 0.5
  const std::vector<float> a0 = a;
  EXPECT_NEAR(clip_grad_norm({{a.data(), 2}}, 1.0f), 0.5, 1e-7);
  EXPECT_EQ(a, a0);
  // At exactly max_norm the epsilon keeps the factor just below 1.
  std::vector<float> c = {3.f, 4.f};
  EXPECT_FLOAT_EQ(clip_grad_norm({{c.data(), 2}}, 5.0f), 5.0f);
  EXPECT_LT(c[1], 4.f);
  EXPECT_NEAR(c[1], 4.0 * 5.0 / (5.0 + 1e-6), 1e-6);
  // No gradient at all: norm 0.
  EXPECT_EQ(clip_grad_norm({}, 1.0f), 0.f);
}

double linear_factor(int64_t s, int64_t warmup, int64_t total) {
  if (s < warmup) return static_cast<double>(s) / std::max<int64_t>(1, warmup);
  return std::max(0.0, static_cast<double>(total - s) / std::max<int64_t>(1, total - warmup));
}

TEST(Optimizers, LinearLRMatchesDocumentedSchedule) {
  const int64_t total = 100;
  const float lr0 = 0.1f;
  for (int64_t warmup : {0, 30, 70, 200}) {
    for (int64_t s = 0; s <= 100; ++s) {
      const double want = lr0 * linear_factor(s, warmup, total);
      EXPECT_NEAR(linear_lr(s, warmup, total, lr0), want, 1e-7)
          << "warmup " << warmup << " step " << s;
    }
  }
  // Landmarks of the schedule.
  EXPECT_EQ(linear_lr(0, 30, 100, 1.f), 0.f);
  EXPECT_FLOAT_EQ(linear_lr(15, 30, 100, 1.f), 0.5f);
  EXPECT_FLOAT_EQ(linear_lr(30, 30, 100, 1.f), 1.f);
  EXPECT_FLOAT_EQ(linear_lr(65, 30, 100, 1.f), 0.5f);
  EXPECT_EQ(linear_lr(100, 30, 100, 1.f), 0.f);
  EXPECT_EQ(linear_lr(150, 30, 100, 1.f), 0.f);
  EXPECT_FLOAT_EQ(linear_lr(0, 0, 100, 1.f), 1.f);
  EXPECT_FLOAT_EQ(linear_lr(100, 200, 100, 1.f), 0.5f);
}

}  // namespace
}  // namespace ortmodule
