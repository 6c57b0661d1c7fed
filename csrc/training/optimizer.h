// The optimizer of training artifacts (AdamWOptimizer or SGDOptimizerV2, optionally after
// InplaceClipGradNorm) and the linear learning-rate scheduler, as ONNX Runtime Training runs
// them: parameters and moments are updated in place, the step counter lives in the
// checkpoint's optimizer group "group0".
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "training/model_proto.h"
#include "training/module.h"

namespace ortmodule {

class TrainingOptimizer {
 public:
  static constexpr float kDefaultLearningRate = 0.001f;
  TrainingOptimizer(const std::string& optimizer_model, std::shared_ptr<TrainingModule> module);

  void step();
  float learning_rate() const { return lr_; }
  void set_learning_rate(float lr);
  float initial_learning_rate() const;
  void set_initial_learning_rate(float lr);
  int64_t step_count() const;
  const OptimizerModelInfo& info() const { return info_; }

 private:
  OptimizerGroupState& group();
  void ensure_moments();

  std::shared_ptr<TrainingModule> module_;
  OptimizerModelInfo info_;
  float lr_ = kDefaultLearningRate;
};

class LinearLRScheduler {
 public:
  // Sets the optimizer's initial learning rate and its learning rate for the current step.
  LinearLRScheduler(std::shared_ptr<TrainingOptimizer> optimizer, int64_t warmup_step_count,
                    int64_t total_step_count, float initial_lr);
  // The learning rate for the optimizer's current step count.
  void step();

 private:
  std::shared_ptr<TrainingOptimizer> optimizer_;
  int64_t warmup_, total_;
  float initial_lr_;
};

}  // namespace ortmodule
