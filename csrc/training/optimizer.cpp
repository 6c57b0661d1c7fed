#include "training/optimizer.h"

#include <cstdint>
#include <stdexcept>
#include <utility>
#include <vector>

#include "optim/optimizers.h"

namespace ortmodule {

namespace {
const char* kGroup = "group0";
}  // namespace

TrainingOptimizer::TrainingOptimizer(const std::string& optimizer_model,
                                     std::shared_ptr<TrainingModule> module)
    : module_(std::move(module)), info_(parse_optimizer_model(optimizer_model)) {
  if (!module_) throw std::invalid_argument("the optimizer needs a training module");
  TrainingState& s = *module_->state();
  for (const auto& kv : s.data.optimizer_groups)
    if (kv.first != kGroup)
      throw std::invalid_argument("the checkpoint holds optimizer group '" + kv.first +
                                  "'; only one group ('group0') is supported");
  for (const std::string& name : module_->trainable_parameters())
    if (s.data.trainable.at(name).dtype() != DType::Float32)
      throw std::invalid_argument("parameter '" + name + "' is " +
                                  dtype_name(s.data.trainable.at(name).dtype()) +
                                  "; the optimizer updates float32 parameters");
  OptimizerGroupState& g = group();
  if (g.initial_learning_rate == 0.f) g.initial_learning_rate = kDefaultLearningRate;
  // Moments are created at the first step when the parameters are still nominal.
  if (!s.data.is_nominal) ensure_moments();
}

OptimizerGroupState& TrainingOptimizer::group() {
  return module_->state()->data.optimizer_groups[kGroup];
}

float TrainingOptimizer::initial_learning_rate() const {
  return module_->state()->data.optimizer_groups.at(kGroup).initial_learning_rate;
}

void TrainingOptimizer::set_initial_learning_rate(float lr) { group().initial_learning_rate = lr; }

int64_t TrainingOptimizer::step_count() const {
  return module_->state()->data.optimizer_groups.at(kGroup).step;
}

void TrainingOptimizer::set_learning_rate(float lr) {
  if (!(lr >= 0.f))
    throw std::invalid_argument("the learning rate must be >= 0, got " + std::to_string(lr));
  lr_ = lr;
}

void TrainingOptimizer::ensure_moments() {
  TrainingState& s = *module_->state();
  OptimizerGroupState& g = group();
  const int moments = info_.kind == OptimizerModelInfo::Kind::AdamW ? 2 : 1;
  for (const std::string& name : module_->trainable_parameters()) {
    const Tensor& p = s.data.trainable.at(name);
    auto& st = g.param_states[name];
    for (int k = 0; k < moments; ++k) {
      const std::string key = "momentum" + std::to_string(k);
      auto it = st.find(key);
      if (it == st.end()) {
        st[key] = Tensor::zeros(p.dtype(), p.shape());
      } else if (it->second.shape() != p.shape() || it->second.dtype() != p.dtype() ||
                 (!it->second.raw() && p.numel() > 0)) {
        throw std::invalid_argument("the checkpoint's " + key + " of '" + name + "' is " +
                                    dtype_name(it->second.dtype()) + " " +
                                    shape_str(it->second.shape()) + "; the parameter is " +
                                    dtype_name(p.dtype()) + " " + shape_str(p.shape()));
      }
    }
  }
}

void TrainingOptimizer::step() {
  module_->require_parameters("optimizer step");
  ensure_moments();
  TrainingState& s = *module_->state();
  OptimizerGroupState& g = group();
  const std::vector<std::string>& names = module_->trainable_parameters();
  if (info_.clip_grad_norm) {
    std::vector<std::pair<float*, int64_t>> grads;
    for (const std::string& name : names) {
      Tensor& grad = s.gradients.at(name);
      grads.push_back({grad.data<float>(), grad.numel()});
    }
    clip_grad_norm(grads, info_.max_norm);
  }
  const int64_t step = g.step + 1;
  for (const std::string& name : names) {
    Tensor& p = s.data.trainable.at(name);
    const Tensor& grad = s.gradients.at(name);
    auto& st = g.param_states.at(name);
    if (info_.kind == OptimizerModelInfo::Kind::AdamW) {
      AdamWConfig c;
      c.alpha = info_.alpha;
      c.beta = info_.beta;
      c.epsilon = info_.epsilon;
      c.weight_decay = info_.weight_decay;
      c.correct_bias = info_.correct_bias;
      c.adam_mode = info_.adam_mode;
      validate_adamw_config(c);
      adamw_update(c, lr_, step, p.data<float>(), grad.data<float>(),
                   st.at("momentum0").data<float>(), st.at("momentum1").data<float>(), p.numel());
    } else {
      sgd_update(lr_, p.data<float>(), grad.data<float>(), p.numel());
    }
  }
  g.step = step;
}

LinearLRScheduler::LinearLRScheduler(std::shared_ptr<TrainingOptimizer> optimizer,
                                     int64_t warmup_step_count, int64_t total_step_count,
                                     float initial_lr)
    : optimizer_(std::move(optimizer)),
      warmup_(warmup_step_count),
      total_(total_step_count),
      initial_lr_(initial_lr) {
  if (!optimizer_) throw std::invalid_argument("the scheduler needs an optimizer");
  if (warmup_ < 0 || total_ < 0)
    throw std::invalid_argument("LinearLRScheduler: warmup_step_count (" + std::to_string(warmup_) +
                                ") and total_step_count (" + std::to_string(total_) +
                                ") must be >= 0");
  if (!(initial_lr >= 0.f))
    throw std::invalid_argument("LinearLRScheduler: initial_lr must be >= 0, got " +
                                std::to_string(initial_lr));
  optimizer_->set_initial_learning_rate(initial_lr);
  step();
}

void LinearLRScheduler::step() {
  optimizer_->set_learning_rate(linear_lr(optimizer_->step_count(), warmup_, total_, initial_lr_));
}

}  // namespace ortmodule
