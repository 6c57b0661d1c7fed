#include "ops/load_model.h"

#include <algorithm>
#include <stdexcept>
#include <vector>

#include "ops/op_table.h"

namespace ortmodule {

void bind_ops(Graph& graph) {
  // Node ids are the model's order (the loader creates the nodes as the file lists them);
  // the graph's own order is topological and may differ.
  std::vector<Node*> nodes = graph.nodes();
  std::sort(nodes.begin(), nodes.end(), [](const Node* a, const Node* b) { return a->id < b->id; });
  for (Node* node : nodes) {
    node->def = find_op(node->domain, node->op_type, graph.opset_version);
    if (node->def) continue;
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
