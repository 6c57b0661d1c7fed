#include "passes/silu_mul_fusion.h"

#include <vector>

#include "ops/op_table.h"
#include "passes/chain_rewrite.h"

namespace ortmodule {

using chain::is_op;
using chain::other_input;
using chain::private_value;

int fuse_silu_mul(Graph& graph, const std::vector<Value*>& keep) {
  const OpDef* fused_def = find_op("ai.ortmodule", "SiluMul", 1);
  if (!fused_def) return 0;
  graph.rebuild_consumers();
  int fused = 0;
  for (Node* sigmoid : graph.nodes()) {
    if (!is_op(sigmoid, "Sigmoid") || !sigmoid->input(0)) continue;
    Value* g = sigmoid->input(0);
    // silu = g * sigmoid(g), read only by the product with u
    if (!private_value(graph, sigmoid->output(0), keep)) continue;
    Node* silu = sigmoid->output(0)->consumers[0];
    if (!is_op(silu, "Mul") || other_input(silu, sigmoid->output(0)) != g ||
        !private_value(graph, silu->output(0), keep))
      continue;
    Node* gate = silu->output(0)->consumers[0];
    Value* u = is_op(gate, "Mul") ? other_input(gate, silu->output(0)) : nullptr;
    if (!u || !(g->dtype == DType::Float32 || g->dtype == DType::Float64) || u->dtype != g->dtype)
      continue;
    replace_chain(graph, {sigmoid, silu, gate}, gate, fused_def, {g, u}, "/silu_mul");
    ++fused;
  }
  return finish_rewrites(graph, fused);
}

}  // namespace ortmodule
