// Optimizer arithmetic of the on-device training artifacts: the update rules that the
// com.microsoft optimizer ops of an optimizer model apply, over raw float buffers.
//
// The formulas follow ONNX Runtime Training 1.19.2's CPU kernels operation by operation
// (same float expressions, same evaluation order, bias-correction powers taken in double
// and rounded to float once). An SGD step and the AdamW moments come out bit for bit as
// the reference's. AdamW parameters agree to a few ulps: the reference's vectorized
// square root is Eigen's fast-math approximation (hardware rsqrt estimate plus one Newton
// step, so CPU-dependent), ours is the exact one. The gradient norm is accumulated in
// double; the reference sums squares in float.
//
// ---------------------------------------------------------------------------------------
// Schemas of the reference ops (domain com.microsoft, since_version 1):
//
// AdamWOptimizer
//   inputs : 0 lr            tensor(float)      learning rate, shape [1] in artifacts
//            1 step          tensor(int64)      update count, shape [1]; the runtime feeds
//                                               (optimizer state step) + 1, so 1 on the first
//                                               step
//            2 weights       seq(tensor(float16|float|double))
//            3 gradients     seq(tensor(float16|float|double))
//            4 momentums_1   seq(tensor(...))   first moments
//            5 momentums_2   seq(tensor(...))   second moments
//            6 update_signal tensor(bool), optional: false skips the update
//   outputs: 0 updated_flag        typed T2 (int64) by the schema, written as a bool by
//                                  the CPU kernel and declared bool [1] by the artifacts;
//                                  true when the update ran, false when skipped
//            1 updated_weights     seq, optional (aliases input 2)
//            2 updated_momentums_1 seq, optional (aliases input 4)
//            3 updated_momentums_2 seq, optional (aliases input 5)
//   attrs  : alpha float (schema default 0.9)    beta float (0.999)
//            epsilon float (schema 1e-8)          weight_decay float (schema 1e-2, but the
//                                                 CPU kernel reads a missing one as 0)
//            correct_bias int (1)                 adam_mode int (0)
//   The kernel rejects adam_mode outside {0, 1}, correct_bias outside {0, 1}, and
//   adam_mode 0 with correct_bias 0. generate_artifacts writes every attribute:
//   alpha 0.9, beta 0.999, epsilon 1e-6, weight_decay 0, correct_bias 1, adam_mode 1.
//   Only float tensors have a CPU kernel.
//
// SGDOptimizerV2
//   inputs : 0 lr tensor(float); 1 weights seq; 2 gradients seq;
//            3 update_signal tensor(bool), optional
//   outputs: 0 update_completed tensor(bool) (shape of lr);
//            1 updated_weights seq, optional (aliases input 1)
//   attrs  : none. The artifacts' SGD optimizer model still declares the inputs
//   learning_rate, step, params, gradients, first_order_moments (no second moments);
//   the node reads only (learning_rate, params, gradients).
//
// InplaceClipGradNorm
//   inputs : 0 gradients seq(tensor(float16|float|double))
//   outputs: 0 clipped_gradients seq (aliases input 0; the gradients are scaled in place)
//   attrs  : max_norm float (1.0); norm_type string ("fro", the only one supported)
//
// InPlaceAccumulatorV2
//   inputs : 0 accumulation_buffer tensor(float16|float|double|bfloat16)
//            1 value               tensor(same family, type T_GRAD)
//            2 overwrite_flag      tensor(bool), optional: true copies `value` into the
//                                  buffer (memcpy), false (or absent) adds it in place
//                                  (buffer = buffer + value, with Add's broadcasting)
//   outputs: 0 updated_flag            tensor(bool), shape [1]
//            1 accumulation_buffer_out tensor, optional (aliases input 0)
//   attrs  : none. The CPU kernel exists for float only. In the training model the flag
//   input is `lazy_reset_grad`, which the runtime feeds true on the first step after a
//   reset and false afterwards.
// ---------------------------------------------------------------------------------------
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

namespace ortmodule {

// Attributes of AdamWOptimizer; the defaults are the ones generate_artifacts writes.
struct AdamWConfig {
  float alpha = 0.9f;     // beta1
  float beta = 0.999f;    // beta2
  float epsilon = 1e-6f;  // added to sqrt(second moment)
  float weight_decay = 0.f;
  bool correct_bias = true;
  int64_t adam_mode = 1;  // 0: PyTorch AdamW, 1: Hugging Face transformers AdamW
};

// Throws std::invalid_argument when the reference kernel would refuse the attributes.
void validate_adamw_config(const AdamWConfig& c);

// One AdamWOptimizer update of a parameter tensor of n floats; p, m, v are updated in
// place. `step` is the value of the op's `step` input (1 on the first update). With
// correct_bias the bias corrections are 1 - alpha^step and 1 - beta^step, so step must
// be at least 1 (the reference divides by zero at step 0; here it is an error).
//   adam_mode 0: p -= p*lr*wd; m,v updated; p -= lr*m / ((1-alpha^t) * (sqrt(v/(1-beta^t)) + eps))
//   adam_mode 1: m,v updated; p -= (lr*sqrt(1-beta^t)/(1-alpha^t)) * m / (sqrt(v) + eps);
//                p -= lr*wd*p
//   m = alpha*m + (1-alpha)*g, v = beta*v + (1-beta)*g*g in both modes.
void adamw_update(const AdamWConfig& c, float lr, int64_t step, float* p, const float* g, float* m,
                  float* v, int64_t n);

// SGDOptimizerV2 on a parameter tensor of n floats: p += (-lr) * g.
void sgd_update(float lr, float* p, const float* g, int64_t n);

// InplaceClipGradNorm (norm_type "fro") over all gradient tensors together: computes
// total = sqrt(sum of g^2 over every element of every tensor), then scales every gradient
// in place by min(max_norm / (total + 1e-6), 1) (also when that factor is 1). Returns total.
float clip_grad_norm(const std::vector<std::pair<float*, int64_t>>& grads, float max_norm);

// LinearLRScheduler: initial_lr * f(step), with
//   f(s) = s / max(1, warmup)                                  while s < warmup,
//   f(s) = max(0, (total - s) / max(1, total - warmup))        otherwise,
// the factor evaluated in float as the reference does. `step` is the optimizer's step
// count (number of updates done so far).
float linear_lr(int64_t step, int64_t warmup_step_count, int64_t total_step_count,
                float initial_lr);

}  // namespace ortmodule
