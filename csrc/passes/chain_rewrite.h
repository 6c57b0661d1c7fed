// Rewriting a matched chain of nodes as one fused node, shared by the fusion passes
// (gelu_fusion, attention_softmax_fusion, rmsnorm_fusion).
#pragma once

#include <string>
#include <vector>

#include "ir/graph.h"
#include "ops/op_table.h"

namespace ortmodule {

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
