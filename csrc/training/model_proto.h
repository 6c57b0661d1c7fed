// Work on ONNX models at the protobuf level, where the engine's Graph would lose what the
// files must keep (node names, value infos, metadata, the exact initializers).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "ir/tensor.h"

namespace ortmodule {

struct ModelSummary {
  int64_t opset = -1;  // of the default ONNX domain
  std::vector<std::string> inputs, outputs, initializers;
};
// `what` names the model in errors ("training model", a path).
ModelSummary summarize_onnx_model(const std::string& bytes, const std::string& what);

// The inference model of ExportModelForInferencing: the eval model with `output_names` as
// its outputs, nodes that do not lead to them removed, parameter inputs replaced by
// initializers holding `parameters`, and inputs no node reads (labels) removed.
std::string export_inference_model(const std::string& eval_model_bytes,
                                   const std::vector<std::string>& output_names,
                                   const std::map<std::string, Tensor>& parameters);

// The optimizer model of training artifacts: one com.microsoft AdamWOptimizer or
// SGDOptimizerV2 node, optionally fed by InplaceClipGradNorm on the gradients.
struct OptimizerModelInfo {
  enum class Kind { AdamW, SGD } kind = Kind::AdamW;
  float alpha = 0.9f, beta = 0.999f, epsilon = 1e-6f, weight_decay = 0.f;  // AdamW
  bool correct_bias = true;
  int64_t adam_mode = 1;
  bool clip_grad_norm = false;
  float max_norm = 1.f;
};
OptimizerModelInfo parse_optimizer_model(const std::string& bytes);

}  // namespace ortmodule
