// Rewriting a matched chain of nodes as one fused node, shared by the fusion passes
// (gelu_fusion, attention_softmax_fusion, rmsnorm_fusion, rotary_fusion).
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "ops/op_table.h"

namespace ortmodule {

// Matching helpers of the fusion passes.
namespace chain {

inline bool is_op(const Node* n, const char* op) {
  return n && n->op_type == op && n->domain.empty();
}

// Whether v is read by exactly one node and is neither a graph output nor kept.
inline bool private_value(const Graph& g, const Value* v, const std::vector<Value*>& keep) {
  if (!v || v->consumers.size() != 1) return false;
  const auto& outs = g.outputs();
  return std::find(outs.begin(), outs.end(), v) == outs.end() &&
         std::find(keep.begin(), keep.end(), v) == keep.end();
}

// The input of the binary node n that is not `operand` (null when neither or both are).
inline Value* other_input(const Node* n, const Value* operand) {
  if (!n || n->num_inputs() != 2) return nullptr;
  if (n->input(0) == operand && n->input(1) != operand) return n->input(1);
  if (n->input(1) == operand && n->input(0) != operand) return n->input(0);
  return nullptr;
}

}  // namespace chain

// Removes `chain` (which holds `last`) and writes last's output 0 with one node of `def`
// reading `inputs`, named after `last` plus `suffix` and keeping its Python source.
inline Node* replace_chain(Graph& g, const std::vector<Node*>& chain, const Node* last,
                           const OpDef* def, const std::vector<Value*>& inputs,
                           const std::string& suffix) {
  Value* y = last->output(0);
  const std::string name = last->name, source = last->source;
  g.remove_nodes(chain);
  Node* n = g.add_node(def->op_type, def->domain, inputs, {y}, name + suffix);
  n->def = def;
  n->source = source;
  return n;
}

// Once a pass has rewritten `rewritten` chains: consumers and node order again. Returns
// `rewritten`.
inline int finish_rewrites(Graph& g, int rewritten) {
  if (rewritten) {
    g.rebuild_consumers();
    g.topological_sort();
  }
  return rewritten;
}

}  // namespace ortmodule
