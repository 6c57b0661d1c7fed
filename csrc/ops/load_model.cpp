#include "ops/load_model.h"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "ops/onnx_arity.h"
#include "ops/op_table.h"

namespace ortmodule {

namespace {

// The version of a standard op that a model at `opset` uses, from the schemas' arity table
// (null for an op ONNX does not define at that opset).
const OnnxArity* onnx_arity(const std::string& op_type, int64_t opset) {
  const OnnxArity* found = nullptr;
  for (const OnnxArity& a : kOnnxArity) {
    if (op_type != a.op_type) continue;
    if (a.since_version <= opset) found = &a;
  }
  return found;
}

std::string input_name(const OnnxArity& a, size_t index) {
  std::string names = a.input_names;
  size_t begin = 0;
  for (size_t i = 0; i < index; ++i) {
    begin = names.find('|', begin);
    if (begin == std::string::npos) return "";
    ++begin;
  }
  return names.substr(begin, names.find('|', begin) - begin);
}

// A standard op's node must have every input its schema requires, and no more than it takes,
// before any shape rule, kernel or gradient rule reads them.
void check_arity(const Node& node, int64_t opset) {
  if (!node.domain.empty() && node.domain != "ai.onnx") return;
  const OnnxArity* a = onnx_arity(node.op_type, opset);
  if (!a) return;
  for (int i = 0; i < a->min_inputs; ++i) {
    if (node.input(static_cast<size_t>(i))) continue;
    const std::string name = input_name(*a, static_cast<size_t>(i));
    throw std::runtime_error(
        node.describe() + " is missing its required input " + std::to_string(i) +
        (name.empty() ? "" : " (" + name + ")") + ": " + node.op_type + "-" +
        std::to_string(a->since_version) + " requires " + std::to_string(a->min_inputs) +
        " input(s). Give the node that input (ONNX operator schema of " + node.op_type + ").");
  }
  const size_t given = node.num_inputs();
  if (a->max_inputs >= 0 && given > static_cast<size_t>(a->max_inputs)) {
    throw std::runtime_error(
        node.describe() + " has " + std::to_string(given) + " inputs, but " + node.op_type + "-" +
        std::to_string(a->since_version) + " takes at most " + std::to_string(a->max_inputs) +
        ". Remove the extra inputs (ONNX operator schema of " + node.op_type + ").");
  }
}

}  // namespace

void bind_ops(Graph& graph) {
  // Node ids are the model's order (the loader creates the nodes as the file lists them);
  // the graph's own order is topological and may differ.
  std::vector<Node*> nodes = graph.nodes();
  std::sort(nodes.begin(), nodes.end(), [](const Node* a, const Node* b) { return a->id < b->id; });
  for (Node* node : nodes) {
    node->def = find_op(node->domain, node->op_type, graph.opset_version);
    if (node->def) {
      check_arity(*node, graph.opset_version);
      continue;
    }
    bool known_elsewhere = false;
    for (const OpDef& d : op_table())
      known_elsewhere |= d.domain == node->domain && d.op_type == node->op_type;
    std::string why = known_elsewhere
                          ? " is not supported at opset " + std::to_string(graph.opset_version)
                          : " is not supported";
    throw std::runtime_error("unsupported op: " + node->describe() + why +
                             ". Supported ops: " + supported_ops_list());
  }
  int random_ops = 0;
  for (Node* n : nodes)
    if (n->def->random) n->random_index = random_ops++;
}

std::unique_ptr<Graph> load_model(const std::string& bytes, const LoadOptions& options) {
  std::unique_ptr<Graph> graph = load_onnx_model(bytes, options);
  bind_ops(*graph);
  return graph;
}

std::unique_ptr<Graph> load_model_file(const std::string& path, const LoadOptions& options) {
  std::unique_ptr<Graph> graph = load_onnx_file(path, options);
  bind_ops(*graph);
  return graph;
}

}  // namespace ortmodule
