// Optimizer updates over raw float buffers (see optimizers.h for the op schemas).
//
// Every element update is written as the same sequence of float operations as the
// reference kernels (including where a product is grouped), with an exact sqrt where the
// reference's vectorized code approximates it. Without fused multiply-add contraction
// (x86-64 baseline) SGD and the AdamW moments match the reference bit for bit. Updates are
// element-wise, so splitting them over threads does not change any result.
#include "optim/optimizers.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "kernels/parallel.h"

namespace ortmodule {

namespace {

constexpr int64_t kOptimGrain = 16384;
// Added to the total norm before dividing max_norm by it (the reference's constant).
constexpr float kClipEpsilon = 1e-6f;

void check_size(const char* op, int64_t n) {
  if (n < 0) {
    throw std::invalid_argument(std::string(op) + ": element count must be >= 0, got " +
                                std::to_string(n));
  }
}

// 1 - base^step, with the power taken in double and rounded to float once.
float bias_correction(float base, int64_t step) {
  return 1.f - static_cast<float>(std::pow(static_cast<double>(base), static_cast<double>(step)));
}

}  // namespace

void validate_adamw_config(const AdamWConfig& c) {
  if (c.adam_mode != 0 && c.adam_mode != 1) {
    throw std::invalid_argument("AdamWOptimizer: attribute adam_mode must be 0 or 1, got " +
                                std::to_string(c.adam_mode));
  }
  if (c.adam_mode == 0 && !c.correct_bias) {
    throw std::invalid_argument(
        "AdamWOptimizer: attribute correct_bias must be 1 with adam_mode 0 (PyTorch AdamW always "
        "corrects the bias), got 0");
  }
}

void adamw_update(const AdamWConfig& c, float lr, int64_t step, float* p, const float* g, float* m,
                  float* v, int64_t n) {
  validate_adamw_config(c);
  check_size("AdamWOptimizer", n);
  if (c.correct_bias && step < 1) {
    throw std::invalid_argument(
        "AdamWOptimizer: input step must be >= 1 with correct_bias (the bias corrections are 1 - "
        "beta^step), got " +
        std::to_string(step));
  }
  const float alpha = c.alpha, beta = c.beta, eps = c.epsilon, wd = c.weight_decay;
  const float one_minus_alpha = 1.f - alpha, one_minus_beta = 1.f - beta;
  float alpha_correction = 1.f, beta_correction = 1.f, lr_corrected = lr;
  if (c.correct_bias) {
    alpha_correction = bias_correction(alpha, step);
    beta_correction = bias_correction(beta, step);
    lr_corrected *= std::sqrt(beta_correction) / alpha_correction;
  }

  if (c.adam_mode == 0) {
    // PyTorch AdamW: decoupled decay first, bias corrections on m and v separately.
    parallel_for(0, n, kOptimGrain, [&](int64_t b, int64_t e) {
      // Distinct buffers: restrict lets the loop vectorize (same IEEE operations per element).
      float* __restrict p_ = p;
      float* __restrict m_ = m;
      float* __restrict v_ = v;
      const float* __restrict g_ = g;
      const float a = alpha, a1 = one_minus_alpha, bt = beta, b1 = one_minus_beta;
      const float lr_ = lr, wd_ = wd, eps_ = eps, ac = alpha_correction, bc = beta_correction;
      for (int64_t i = b; i < e; ++i) {
        float w = p_[i];
        w = w - w * lr_ * wd_;
        const float mi = a * m_[i] + a1 * g_[i];
        const float vi = bt * v_[i] + b1 * g_[i] * g_[i];
        const float denom = std::sqrt(vi / bc) + eps_;
        p_[i] = w - (lr_ * mi) / (ac * denom);
        m_[i] = mi;
        v_[i] = vi;
      }
    });
  } else {
    // Hugging Face AdamW: bias corrections folded into the step size, decay after.
    const float lr_wd = lr * wd;
    parallel_for(0, n, kOptimGrain, [&](int64_t b, int64_t e) {
      float* __restrict p_ = p;
      float* __restrict m_ = m;
      float* __restrict v_ = v;
      const float* __restrict g_ = g;
      const float a = alpha, a1 = one_minus_alpha, bt = beta, b1 = one_minus_beta;
      const float eps_ = eps, lrc = lr_corrected, lw = lr_wd;
      for (int64_t i = b; i < e; ++i) {
        const float mi = a * m_[i] + a1 * g_[i];
        const float vi = bt * v_[i] + b1 * g_[i] * g_[i];
        const float denom = std::sqrt(vi) + eps_;
        float w = p_[i] - lrc * mi / denom;
        p_[i] = w - lw * w;
        m_[i] = mi;
        v_[i] = vi;
      }
    });
  }
}

void sgd_update(float lr, float* p, const float* g, int64_t n) {
  check_size("SGDOptimizerV2", n);
  const float neg_lr = -lr;
  parallel_for(0, n, kOptimGrain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) p[i] = p[i] + neg_lr * g[i];
  });
}

float clip_grad_norm(const std::vector<std::pair<float*, int64_t>>& grads, float max_norm) {
  double sum_sq = 0.0;
  for (size_t t = 0; t < grads.size(); ++t) {
    const float* g = grads[t].first;
    const int64_t n = grads[t].second;
    if (n < 0 || (n > 0 && g == nullptr)) {
      throw std::invalid_argument("InplaceClipGradNorm: gradient " + std::to_string(t) +
                                  " has element count " + std::to_string(n) +
                                  (g == nullptr ? " and no data" : ""));
    }
    // Per-chunk partial sums in double, added in chunk order: deterministic for a
    // given thread count and far more accurate than the float sum it stands for.
    const int64_t chunks = std::max<int64_t>(1, (n + kOptimGrain - 1) / kOptimGrain);
    std::vector<double> partial(static_cast<size_t>(chunks), 0.0);
    parallel_for(0, chunks, 1, [&](int64_t cb, int64_t ce) {
      for (int64_t c = cb; c < ce; ++c) {
        const int64_t lo = c * kOptimGrain, hi = std::min(n, lo + kOptimGrain);
        double s = 0.0;
        for (int64_t i = lo; i < hi; ++i) s += static_cast<double>(g[i]) * g[i];
        partial[static_cast<size_t>(c)] = s;
      }
    });
    for (double s : partial) sum_sq += s;
  }
  const float total_norm = static_cast<float>(std::sqrt(sum_sq));
  const float coef = std::min(max_norm / (total_norm + kClipEpsilon), 1.0f);
  for (const auto& [g, n] : grads) {
    parallel_for(0, n, kOptimGrain, [&, g = g](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) g[i] *= coef;
    });
  }
  return total_norm;
}

float linear_lr(int64_t step, int64_t warmup_step_count, int64_t total_step_count,
                float initial_lr) {
  float factor;
  if (step < warmup_step_count) {
    factor = static_cast<float>(step) / std::max(1.0f, static_cast<float>(warmup_step_count));
  } else {
    const int64_t remaining = total_step_count - step;
    const int64_t post_warmup = total_step_count - warmup_step_count;
    factor = std::max(
        0.f, static_cast<float>(remaining) / std::max(1.f, static_cast<float>(post_warmup)));
  }
  return initial_lr * factor;
}

}  // namespace ortmodule
