#include "runtime/zero_gradients.h"

#include <string>
#include <unordered_map>

#include "ops/op_utils.h"

namespace ortmodule {
namespace {

enum class Rule {
  kAnyFactor,       // a product: zero when any of inputs 0 and 1 is
  kGradientInput0,  // a gradient op: zero when its incoming gradient (input 0) is
  kGradientInput2,  // GatherGrad(shape, indices, dY)
  kAllInputs,       // linear in every input: zero when all present inputs are
  kInput0,          // linear in input 0, the others being shapes or axes
  kGemm,            // A * B + C: zero when a factor is and C is absent or zero
};

const std::unordered_map<std::string, Rule>& rules() {
  static const std::unordered_map<std::string, Rule> table = {
      {"MatMul", Rule::kAnyFactor},
      {"FusedMatMul", Rule::kAnyFactor},
      {"FusedMatMulSumToShape", Rule::kAnyFactor},
      {"Mul", Rule::kAnyFactor},
      {"Gemm", Rule::kGemm},
      {"Div", Rule::kGradientInput0},
      {"GeluGrad", Rule::kGradientInput0},
      {"FastGeluGrad", Rule::kGradientInput0},
      {"ReluGrad", Rule::kGradientInput0},
      {"DropoutGrad", Rule::kGradientInput0},
      {"SoftmaxGrad_13", Rule::kGradientInput0},
      {"LogSoftmaxGrad_13", Rule::kGradientInput0},
      {"LayerNormalizationGrad", Rule::kGradientInput0},
      {"SimplifiedLayerNormalizationGrad", Rule::kGradientInput0},
      {"SoftmaxCrossEntropyLossGrad", Rule::kGradientInput0},
      {"NegativeLogLikelihoodLossGrad", Rule::kGradientInput0},
      {"SumToShape", Rule::kGradientInput0},
      {"GatherGrad", Rule::kGradientInput2},
      {"Add", Rule::kAllInputs},
      {"Sub", Rule::kAllInputs},
      {"Sum", Rule::kAllInputs},
      {"Neg", Rule::kAllInputs},
      {"Identity", Rule::kAllInputs},
      {"Cast", Rule::kAllInputs},
      {"Transpose", Rule::kAllInputs},
      {"CastLike", Rule::kInput0},
      {"Reshape", Rule::kInput0},
      {"Squeeze", Rule::kInput0},
      {"Unsqueeze", Rule::kInput0},
      {"Flatten", Rule::kInput0},
      {"Expand", Rule::kInput0},
      {"ReduceSum", Rule::kInput0},
  };
  return table;
}

bool is(const std::vector<bool>& zero, size_t i) { return i < zero.size() && zero[i]; }

bool adds_its_inputs(const Node& node) {
  return node.domain.empty() && (node.op_type == "Sum" || node.op_type == "Add");
}

}  // namespace

bool outputs_are_zero(const Node& node, const std::vector<bool>& zero) {
  const bool known =
      node.domain.empty() || node.domain == "com.microsoft" || node.domain == "ai.ortmodule";
  auto it = rules().find(node.op_type);
  if (!known || it == rules().end()) return false;
  switch (it->second) {
    case Rule::kAnyFactor:
      return is(zero, 0) || is(zero, 1);
    case Rule::kGradientInput0:
      // The engine's GeluGrad may also write Gelu's output (output 1), which is not zero.
      if (node.op_type == "GeluGrad" && node.output(1)) return false;
      return is(zero, 0);
    case Rule::kInput0:
      return is(zero, 0);
    case Rule::kGradientInput2:
      return is(zero, 2);
    case Rule::kGemm:
      return (is(zero, 0) || is(zero, 1)) && (!node.input(2) || is(zero, 2));
    case Rule::kAllInputs:
      for (size_t i = 0; i < node.inputs.size(); ++i)
        if (node.inputs[i] && !is(zero, i)) return false;
      return !node.inputs.empty();
  }
  return false;
}

const Tensor* leave_out_zero_addends(OpContext& ctx, const std::vector<bool>* zero_inputs,
                                     const std::vector<OutputInfo>& infos, Device device) {
  if (!zero_inputs || !adds_its_inputs(ctx.node) || infos.size() != 1 || infos[0].alias_of != -1)
    return nullptr;
  std::vector<const Tensor*> live;
  bool any_zero = false;
  for (size_t k = 0; k < ctx.inputs.size(); ++k) {
    if (!ctx.inputs[k]) continue;
    if (k < zero_inputs->size() && (*zero_inputs)[k])
      any_zero = true;
    else
      live.push_back(ctx.inputs[k]);
  }
  if (!any_zero || live.empty()) return nullptr;
  Shape shape = live[0]->shape();
  for (size_t k = 1; k < live.size(); ++k) shape = broadcast_shapes(ctx, shape, live[k]->shape());
  if (shape != infos[0].shape) return nullptr;
  if (live.size() == 1)
    return live[0]->dtype() == infos[0].dtype && live[0]->device() == device ? live[0] : nullptr;
  if (ctx.node.op_type == "Sum") ctx.inputs = std::move(live);
  return nullptr;
}

}  // namespace ortmodule
