#include "passes/cast_like_targets.h"

#include <string>
#include <unordered_set>

#include "ops/op_table.h"

namespace ortmodule {

namespace {

// Whether output `k` of n has the dtype of n's input 0 by the op's definition.
bool has_input_dtype(const Node& n, size_t k) {
  // Default domain: T in and T out (for the ops with several outputs, output 0 is T: Dropout's
  // mask, LayerNormalization's mean and inverse deviation and BatchNormalization's running
  // statistics are of other types or not read here).
  static const std::unordered_set<std::string> onnx = {"Relu",
                                                       "Gelu",
                                                       "Tanh",
                                                       "Sigmoid",
                                                       "Erf",
                                                       "Neg",
                                                       "Abs",
                                                       "Exp",
                                                       "Log",
                                                       "Sqrt",
                                                       "Reciprocal",
                                                       "LeakyRelu",
                                                       "Softplus",
                                                       "Elu",
                                                       "Selu",
                                                       "HardSigmoid",
                                                       "Sin",
                                                       "Cos",
                                                       "Identity",
                                                       "Softmax",
                                                       "LogSoftmax",
                                                       "Add",
                                                       "Sub",
                                                       "Mul",
                                                       "Div",
                                                       "Pow",
                                                       "Max",
                                                       "Min",
                                                       "Sum",
                                                       "Mean",
                                                       "MatMul",
                                                       "Gemm",
                                                       "LayerNormalization",
                                                       "BatchNormalization",
                                                       "Dropout",
                                                       "Reshape",
                                                       "Transpose",
                                                       "Squeeze",
                                                       "Unsqueeze",
                                                       "Expand",
                                                       "Flatten",
                                                       "Slice",
                                                       "Concat",
                                                       "Tile",
                                                       "Pad",
                                                       "Gather"};
  // Engine and com.microsoft ops of one floating type T.
  static const std::unordered_set<std::string> own = {"FusedMatMul", "ScaledMaskedSoftmax"};
  if (k != 0 || n.inputs.empty() || !n.input(0)) return false;
  if (n.domain.empty()) return onnx.count(n.op_type) != 0;
  return (n.domain == "com.microsoft" || n.domain == "ai.ortmodule") && own.count(n.op_type) != 0;
}

size_t output_index(const Node& n, const Value* v) {
  for (size_t k = 0; k < n.outputs.size(); ++k)
    if (n.outputs[k] == v) return k;
  return n.outputs.size();
}

bool is_graph_input(const Graph& graph, const Value* v) {
  for (const Value* in : graph.inputs())
    if (in == v) return true;
  return false;
}

}  // namespace

int simplify_cast_like_targets(Graph& graph) {
  const OpDef* cast = find_op("", "Cast", graph.opset_version);
  if (!cast) return 0;
  int changed = 0;
  for (Node* n : graph.nodes()) {
    if (!n->domain.empty() || n->op_type != "CastLike" || n->inputs.size() != 2 || !n->input(1))
      continue;
    Value* target = n->input(1);
    // A graph is acyclic, so the walk ends; the bound only guards a malformed one.
    for (size_t steps = 0; steps < 100000; ++steps) {
      const Node* p = target->producer;
      if (!p || !has_input_dtype(*p, output_index(*p, target))) break;
      target = p->input(0);
    }
    const Node* p = target->producer;
    if (p && p->domain.empty() && p->op_type == "Cast" && p->attr("to")) {
      n->op_type = "Cast";
      n->def = cast;
      n->inputs.pop_back();
      n->attrs["to"] = Attribute::make_int(p->attr_int("to", 0));  // saturate, if any, stays
      ++changed;
    } else if (target != n->input(1) && !p && is_graph_input(graph, target)) {
      n->inputs[1] = target;
      ++changed;
    }
  }
  if (changed) graph.rebuild_consumers();
  return changed;
}

}  // namespace ortmodule
