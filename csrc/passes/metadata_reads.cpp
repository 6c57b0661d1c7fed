#include "passes/metadata_reads.h"

#include <algorithm>
#include <string>
#include <unordered_set>
#include <vector>

#include "ops/op_table.h"

namespace ortmodule {

namespace {

// Default-domain ops whose output 0 has input 0's shape and dtype by the op's definition:
// element-wise functions of input 0, and the ops that transform it along its own axes (for
// the ops with several outputs, output 0 is that one: Dropout's mask, LayerNormalization's
// mean and inverse deviation and BatchNormalization's running statistics are not).
const std::unordered_set<std::string>& same_shape_and_dtype() {
  static const std::unordered_set<std::string> ops = {"Identity",
                                                      "Relu",
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
                                                      "Softsign",
                                                      "Elu",
                                                      "Selu",
                                                      "Celu",
                                                      "HardSigmoid",
                                                      "HardSwish",
                                                      "Mish",
                                                      "Sin",
                                                      "Cos",
                                                      "Floor",
                                                      "Ceil",
                                                      "Round",
                                                      "Sign",
                                                      "Softmax",
                                                      "LogSoftmax",
                                                      "Hardmax",
                                                      "Dropout",
                                                      "LayerNormalization",
                                                      "BatchNormalization"};
  return ops;
}

// Whether n is an element-wise op of the default domain (the element-wise fusion's kind:
// its output could be computed in one pass with its readers').
bool elementwise(const Node& n) {
  static const std::unordered_set<std::string> binary = {
      "Add",  "Sub",   "Mul",  "Div",      "Pow",   "Max",  "Min",     "Sum", "Mean", "Where",
      "Clip", "PRelu", "Cast", "CastLike", "Equal", "Less", "Greater", "And", "Or",   "Not"};
  return n.domain.empty() && (same_shape_and_dtype().count(n.op_type) || binary.count(n.op_type));
}

// Whether output `k` of n has the dtype of n's input 0 by the op's definition.
bool has_input_dtype(const Node& n, size_t k) {
  // Default domain: T in and T out, besides those above.
  static const std::unordered_set<std::string> onnx = {
      "Add",     "Sub",    "Mul",    "Div",     "Pow",       "Max",     "Min",       "Sum",
      "Mean",    "MatMul", "Gemm",   "Reshape", "Transpose", "Squeeze", "Unsqueeze", "Expand",
      "Flatten", "Slice",  "Concat", "Tile",    "Pad",       "Gather"};
  // Engine and com.microsoft ops of one floating type T.
  static const std::unordered_set<std::string> own = {"FusedMatMul", "ScaledMaskedSoftmax"};
  if (k != 0) return false;
  if (n.domain.empty()) return same_shape_and_dtype().count(n.op_type) || onnx.count(n.op_type);
  return (n.domain == "com.microsoft" || n.domain == "ai.ortmodule") && own.count(n.op_type) != 0;
}

// Whether output `k` of n has the shape of n's input 0 by the op's definition (no op here
// broadcasts, reduces or reshapes).
bool has_input_shape(const Node& n, size_t k) {
  if (k != 0 || !n.domain.empty()) return false;
  return n.op_type == "Cast" || n.op_type == "CastLike" || same_shape_and_dtype().count(n.op_type);
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
    Value* target = input0_chain(n->input(1), has_input_dtype).back();
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

int simplify_shape_reads(Graph& graph) {
  graph.rebuild_consumers();
  const auto reads_shape = [](const Node* n) {
    return n->domain.empty() && (n->op_type == "Shape" || n->op_type == "Size");
  };
  int changed = 0;
  for (Node* n : graph.nodes()) {
    if (!reads_shape(n) || n->inputs.size() != 1 || !n->input(0)) continue;
    Value* v = n->input(0);
    // The earliest value of the chain that is at hand anyway: a graph input or initializer,
    // a value read twice already, or one an op that is no element-wise step of the chain
    // makes (a product, a reduction). Never a value that only its chain successor reads,
    // which a fused pass may take in place (Add -> Sqrt of an RMS norm).
    const std::vector<Value*> chain = input0_chain(v, has_input_shape);
    Value* target = nullptr;
    for (auto it = chain.rbegin(); it + 1 != chain.rend() && !target; ++it) {
      const Node* p = (*it)->producer;
      if (!p || (*it)->consumers.size() > 1 || !elementwise(*p)) target = *it;
    }
    if (!target) continue;
    auto& readers = v->consumers;
    const auto it = std::find(readers.begin(), readers.end(), n);
    if (it != readers.end()) readers.erase(it);
    target->consumers.push_back(n);
    n->inputs[0] = target;
    ++changed;
  }
  if (changed) graph.rebuild_consumers();
  return changed;
}

}  // namespace ortmodule
