// What a checkpoint state, a training module and its optimizer share: the checkpoint's
// contents (parameters, optimizer state, properties) plus the gradient buffers and the
// learning rate that live only while training runs.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "training/checkpoint.h"

namespace ortmodule {

struct TrainingState {
  CheckpointData data;
  // Accumulated gradient per trainable parameter, allocated by the module (and by
  // copy_buffer_to_parameters after a nominal checkpoint).
  std::map<std::string, Tensor> gradients;
  bool has_module = false;  // a module was created on this state
};

// The tensor of parameter `name` (trainable or frozen), or nullptr.
Tensor* find_parameter(TrainingState& state, const std::string& name);
bool is_trainable(const TrainingState& state, const std::string& name);

}  // namespace ortmodule
