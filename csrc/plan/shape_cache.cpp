#include "plan/shape_cache.h"

#include <algorithm>
#include <sstream>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "ops/op_table.h"

namespace ortmodule {

namespace {

// Per op: the inputs whose values determine the output shapes. An empty list means the
// output shapes follow from the input shapes (and attributes) alone. Ops missing here
// count as reading all their inputs that way, which can only cost reuse, never
// correctness; an op whose output shape depends on data (NonZero) must never be listed
// with fewer inputs than it reads.
const std::unordered_map<std::string, std::vector<int>>& shape_inputs_table() {
  static const std::unordered_map<std::string, std::vector<int>> table = [] {
    std::unordered_map<std::string, std::vector<int>> t;
    // Output shapes from input shapes only.
    std::istringstream shape_only(
        "Abs Add And ArgMax ArgMin AveragePool BatchNormalization Cast CastLike Ceil "
        "Clip Concat Constant Conv Cos CumSum Div Dropout Einsum Elu Equal Erf Exp "
        "Flatten Floor Gather GatherElements GatherND Gelu Gemm GlobalAveragePool "
        "GlobalMaxPool Greater GreaterOrEqual GroupNormalization HardSigmoid HardSwish "
        "Identity InstanceNormalization IsInf IsNaN LayerNormalization LeakyRelu Less "
        "LessOrEqual Log LogSoftmax MatMul Max MaxPool Mean Min Mish Mod Mul Neg "
        "NegativeLogLikelihoodLoss Not Or Pow Reciprocal Relu Round ScatterElements "
        "ScatterND Selu Shape Sigmoid Sign Sin Size Softmax SoftmaxCrossEntropyLoss "
        "Softplus Softsign Sqrt Sub Sum Tanh Transpose Trilu Where Xor");
    for (std::string op; shape_only >> op;) t[op] = {};
    t["com.microsoft:FusedMatMul"] = {};
    t["com.microsoft:BatchNormInternal"] = {};
    t["ai.ortmodule:BatchNormTorch"] = {};
    // Gradient ops: the output has input 0's shape, or follows from input shapes.
    std::istringstream ms_shape_only(
        "DropoutGrad FastGeluGrad GeluGrad LeakyReluGrad LogSoftmaxGrad LogSoftmaxGrad_13 "
        "ReluGrad SigmoidGrad SoftmaxGrad SoftmaxGrad_13 TanhGrad LayerNormalizationGrad Scale "
        "SoftmaxCrossEntropyLossGrad SimplifiedLayerNormalization "
        "SimplifiedLayerNormalizationGrad");
    for (std::string op; ms_shape_only >> op;) t["com.microsoft:" + op] = {};
    for (const char* op :
         {"ClipGrad", "ErfGrad", "GeluGrad", "ScalarLike", "ZerosLike", "StopGradient", "Embedding",
          "FusedLinearCrossEntropy", "FusedLinearCrossEntropyGrad"})
      t[std::string("ai.ortmodule:") + op] = {};
    // Gradient ops whose output shape is the value of a shape input.
    t["ai.ortmodule:SumToShape"] = {1};
    t["ai.ortmodule:ReduceGrad"] = {1, 2};
    t["ai.ortmodule:NegativeLogLikelihoodLossGrad"] = {1};
    t["ai.ortmodule:EmbeddingGrad"] = {0};
    t["com.microsoft:GatherGrad"] = {0};
    t["com.microsoft:BroadcastGradientArgs"] = {0, 1};
    // Output shapes read from input values.
    for (const char* op : {"Reshape", "Expand", "Squeeze", "Unsqueeze", "Tile", "TopK", "Split",
                           "Compress", "OneHot", "CenterCropPad"})
      t[op] = {1};
    for (const char* op :
         {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
          "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"})
      t[op] = {1};  // axes
    t["ConstantOfShape"] = {0};
    t["NonZero"] = {0};
    t["Unique"] = {0};
    t["Range"] = {0, 1, 2};
    t["Slice"] = {1, 2, 3, 4};
    t["Pad"] = {1, 3};
    t["Resize"] = {1, 2, 3};
    return t;
  }();
  return table;
}

bool is_shape_op(const Node& n) {
  return n.domain.empty() && (n.op_type == "Shape" || n.op_type == "Size");
}

}  // namespace

bool input_value_determines_shape(const Node& node, size_t input) {
  const auto& table = shape_inputs_table();
  auto it = table.find(node.domain.empty() ? node.op_type : node.domain + ":" + node.op_type);
  if (it == table.end()) return true;
  return std::find(it->second.begin(), it->second.end(), static_cast<int>(input)) !=
         it->second.end();
}

// Two facts propagate through the forward steps, per value:
//   shape_known: its SHAPE is a function of the fed inputs' shapes. True for fed
//     inputs and constants; for a step's outputs, true iff every input's shape is
//     known and every input whose value determines the output shapes (see
//     input_value_determines_shape) has a known value.
//   value_known: its VALUE is a function of the fed inputs' shapes. True for
//     constants, false for fed inputs; Shape/Size outputs are known iff their input's
//     shape is; other outputs iff every input's value is known, the op draws no random
//     numbers and writes no state back.
// A step is shape-cached iff all its outputs have known values and none of them is
// handed to the caller (graph outputs are returned without a copy and may be written
// to) or written back into an input.
//
// A step has a memoized shape (PlanStep::shape_memo) iff all its outputs have known
// shapes and it neither draws random numbers nor calls the host. The same propagation
// runs on through backward, where the output gradients count as known shapes: the
// executor keys backward's memo on their shapes too.
void mark_shape_cached_steps(const Graph& graph, Plan& plan) {
  std::vector<char> shape_known(plan.num_values, 0), value_known(plan.num_values, 0);
  for (int id : plan.inputs) shape_known[id] = 1;
  for (size_t id = 0; id < graph.num_values(); ++id) {
    if (graph.value_by_id(static_cast<int>(id))->initializer.defined() &&
        std::find(plan.inputs.begin(), plan.inputs.end(), static_cast<int>(id)) ==
            plan.inputs.end()) {
      shape_known[id] = value_known[id] = 1;
    }
  }
  std::unordered_set<int> handed_out(plan.outputs.begin(), plan.outputs.end());
  for (const auto& wb : plan.writebacks) handed_out.insert(wb.first);

  // Propagates both facts through one step; returns whether its outputs' values are known.
  auto propagate = [&](PlanStep& step) {
    const Node& n = *step.node;
    const bool opaque = step.def->random || step.def->host_call;
    bool shapes = true, values = !opaque && step.def->state_writeback.empty();
    for (size_t i = 0; i < step.inputs.size(); ++i) {
      int id = step.inputs[i];
      if (id < 0) continue;
      shapes = shapes && shape_known[id];
      values = values && value_known[id];
      if (input_value_determines_shape(n, i)) shapes = shapes && value_known[id];
    }
    if (is_shape_op(n))
      values = step.inputs.size() == 1 && step.inputs[0] >= 0 && shape_known[step.inputs[0]];
    values = values && shapes;
    for (int id : step.outputs) {
      if (id < 0) continue;
      shape_known[id] = shapes;
      value_known[id] = values;
    }
    step.shape_memo = shapes && !opaque;
    return values;
  };
  for (PlanStep& step : plan.forward) {
    bool cacheable = propagate(step);
    for (int id : step.outputs) cacheable = cacheable && (id < 0 || !handed_out.count(id));
    step.shape_cached = cacheable;
  }
  for (int id : plan.output_grads)
    if (id >= 0) shape_known[id] = 1, value_known[id] = 0;
  for (PlanStep& step : plan.backward) propagate(step);
}

}  // namespace ortmodule
