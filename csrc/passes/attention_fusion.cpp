#include "passes/attention_fusion.h"

#include <algorithm>
#include <string>
#include <vector>

#include "ops/op_table.h"
#include "passes/chain_rewrite.h"

namespace ortmodule {
namespace {

// Whether v is read only by `reader`, and is neither a graph output nor kept.
bool private_to(const Graph& g, const Value* v, const Node* reader,
                const std::vector<Value*>& keep) {
  if (!v || v->consumers.size() != 1 || v->consumers[0] != reader) return false;
  const auto& outs = g.outputs();
  return std::find(outs.begin(), outs.end(), v) == outs.end() &&
         std::find(keep.begin(), keep.end(), v) == keep.end();
}

// K when t = Transpose(K) swaps the last two axes of a rank >= 2 tensor (perm [0, ..., r-1,
// r-2]), else null.
Value* untransposed(const Value* t) {
  const Node* n = t ? t->producer : nullptr;
  if (!n || n->op_type != "Transpose" || !n->domain.empty() || !n->input(0)) return nullptr;
  const Attribute* perm = n->attr("perm");
  if (!perm || perm->ints.size() < 2) return nullptr;
  const int64_t r = static_cast<int64_t>(perm->ints.size());
  for (int64_t i = 0; i < r - 2; ++i)
    if (perm->ints[i] != i) return nullptr;
  if (perm->ints[r - 2] != r - 1 || perm->ints[r - 1] != r - 2) return nullptr;
  return n->input(0);
}

bool is_plain_matmul(const Node* n) {
  return n && n->op_type == "MatMul" && n->domain.empty() && n->num_inputs() == 2 && n->input(0) &&
         n->input(1) && n->output(0);
}

}  // namespace

int fuse_attention(Graph& graph, const std::vector<Value*>& keep) {
  const OpDef* fused_def = find_op("ai.ortmodule", "FusedAttention", graph.opset_version);
  if (!fused_def) return 0;
  graph.rebuild_consumers();
  int fused = 0;
  for (Node* softmax : graph.nodes()) {
    if (softmax->op_type != "ScaledMaskedSoftmax" || softmax->domain != "ai.ortmodule" ||
        !softmax->input(0) || !softmax->output(0))
      continue;
    Value* scores = softmax->input(0);
    Node* qk = scores->producer;
    if (!is_plain_matmul(qk) || !private_to(graph, scores, softmax, keep)) continue;
    Value* k = untransposed(qk->input(1));
    if (!k) continue;
    // The softmax, through Identity nodes (dropout at p = 0, casts to its own dtype).
    std::vector<Node*> chain = {qk, softmax};
    Value* probs = softmax->output(0);
    while (probs->consumers.size() == 1 && probs->consumers[0]->op_type == "Identity" &&
           probs->consumers[0]->domain.empty() && probs->consumers[0]->output(0) &&
           private_to(graph, probs, probs->consumers[0], keep)) {
      chain.push_back(probs->consumers[0]);
      probs = probs->consumers[0]->output(0);
    }
    if (probs->consumers.size() != 1) continue;
    Node* pv = probs->consumers[0];
    if (!is_plain_matmul(pv) || pv->input(0) != probs || pv->input(1) == probs ||
        !private_to(graph, probs, pv, keep))
      continue;
    chain.push_back(pv);
    std::vector<Value*> inputs = {qk->input(0), k, pv->input(1)};
    for (size_t i = 1; i < softmax->num_inputs(); ++i) inputs.push_back(softmax->input(i));
    const Attribute* scale_attr = softmax->attr("scale");
    const Attribute scale = scale_attr ? *scale_attr : Attribute::make_float(1.0);
    // The Transpose stays for other readers; unread, dead-node removal drops it.
    Node* n = replace_chain(graph, chain, pv, fused_def, inputs, "/attention");
    n->attrs["scale"] = scale;
    ++fused;
  }
  return finish_rewrites(graph, fused);
}

}  // namespace ortmodule
