#include "passes/attention_fusion.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <unordered_set>
#include <vector>

#include "ops/op_table.h"
#include "passes/chain_rewrite.h"
#include "passes/constant_value.h"

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

// A Dropout (opset 12+) on the softmax: its ratio when it drops in training (a constant
// ratio, training_mode constant true), 0 when it passes its input through (training_mode
// absent or false, ratio 0), -1 when that is not known before run time or its mask is read.
double dropout_ratio(const Node* n) {
  if (!n || n->op_type != "Dropout" || !n->domain.empty() || !n->def ||
      n->def->since_version < 12 || !n->output(0) ||
      (n->output(1) && !n->output(1)->consumers.empty()))
    return -1;
  if (!n->input(2)) return 0;  // training_mode defaults to false: inference
  const Tensor* training = constant_tensor(n->input(2));
  if (!training || training->numel() != 1) return -1;
  if (training->int_at(0) == 0) return 0;
  if (!n->input(1)) return 0.5;  // ONNX's default ratio
  double ratio = 0;
  if (!constant_float_scalar(n->input(1), 1, ratio) || ratio < 0 || ratio >= 1) return -1;
  return ratio;
}

// Whether v is computed from a floating graph input (a parameter or a float input may need a
// gradient; an additive mask built from integer inputs and constants cannot).
bool from_float_input(const Value* v) {
  std::vector<const Value*> stack = {v};
  std::unordered_set<const Value*> seen;
  while (!stack.empty()) {
    const Value* x = stack.back();
    stack.pop_back();
    if (!x || !seen.insert(x).second) continue;
    if (!x->producer) {
      if (!x->initializer.defined() && dtype_is_floating(x->dtype)) return true;
      continue;
    }
    for (const Value* in : x->producer->inputs) stack.push_back(in);
  }
  return false;
}

// X when t = Transpose(X, perm [0, 2, 1, 3]): the heads of a [batch, seq, heads, dim] tensor
// moved before the sequence, as models do around attention; else null.
Value* heads_untransposed(const Value* t) {
  const Node* n = t ? t->producer : nullptr;
  if (!n || n->op_type != "Transpose" || !n->domain.empty() || !n->input(0)) return nullptr;
  const Attribute* perm = n->attr("perm");
  if (!perm || perm->ints != std::vector<int64_t>{0, 2, 1, 3}) return nullptr;
  return n->input(0);
}

// The fused node reads Q, K and V before the head transposes that feed it and writes its
// output as the one transpose reading it would (attribute bshd, ops/attention_ops.cpp), so
// neither the transposes nor their gradients run. Not with an additive mask that may need a
// gradient: the unfused rule that gives it one would transpose Q, K, V and dY again.
void absorb_head_transposes(Graph& graph, Node* n, const std::vector<Value*>& keep) {
  if (n->input(3) && !n->input(4) && from_float_input(n->input(3))) return;
  int64_t bshd = 0;
  for (size_t i = 0; i < 3; ++i) {
    if (Value* source = heads_untransposed(n->inputs[i])) {
      n->inputs[i] = source;
      bshd |= int64_t{1} << i;
    }
  }
  Value* y = n->output(0);
  const auto& outs = graph.outputs();
  const bool y_private = y->consumers.size() == 1 &&
                         std::find(outs.begin(), outs.end(), y) == outs.end() &&
                         std::find(keep.begin(), keep.end(), y) == keep.end();
  Value* transposed = y_private ? y->consumers[0]->output(0) : nullptr;
  if (transposed && heads_untransposed(transposed) == y &&
      std::find(outs.begin(), outs.end(), transposed) == outs.end() &&
      std::find(keep.begin(), keep.end(), transposed) == keep.end()) {
    // Readers of the transpose read the output itself, now in the transpose's layout.
    for (Node* reader : transposed->consumers)
      for (Value*& in : reader->inputs)
        if (in == transposed) in = y;
    y->has_shape = transposed->has_shape;
    y->shape = transposed->shape;
    bshd |= 8;
  }
  if (bshd) n->attrs["bshd"] = Attribute::make_int(bshd);
}

bool is_plain_matmul(const Node* n) {
  return n && n->op_type == "MatMul" && n->domain.empty() && n->num_inputs() == 2 && n->input(0) &&
         n->input(1) && n->output(0);
}

}  // namespace

int fuse_attention(Graph& graph, const std::vector<Value*>& keep) {
  const OpDef* fused_def = find_op("ai.ortmodule", "FusedAttention", graph.opset_version);
  const OpDef* dropout_def = find_op("ai.ortmodule", "FusedAttentionDropout", graph.opset_version);
  if (!fused_def || !dropout_def) return 0;
  graph.rebuild_consumers();
  std::vector<Node*> fused_nodes;
  for (Node* softmax : graph.nodes()) {
    if (softmax->op_type != "ScaledMaskedSoftmax" || softmax->domain != "ai.ortmodule" ||
        !softmax->input(0) || !softmax->output(0))
      continue;
    Value* scores = softmax->input(0);
    Node* qk = scores->producer;
    if (!is_plain_matmul(qk) || !private_to(graph, scores, softmax, keep)) continue;
    Value* k = untransposed(qk->input(1));
    if (!k) continue;
    // The softmax, through Identity nodes (dropout at p = 0, casts to its own dtype) and at
    // most one Dropout.
    std::vector<Node*> chain = {qk, softmax};
    Value* probs = softmax->output(0);
    Node* dropout = nullptr;
    double ratio = 0;
    bool known = true;
    while (probs->consumers.size() == 1 && private_to(graph, probs, probs->consumers[0], keep)) {
      Node* next = probs->consumers[0];
      if (next->op_type == "Identity" && next->domain.empty() && next->output(0)) {
      } else if (!dropout && next->op_type == "Dropout") {
        ratio = dropout_ratio(next);
        known = ratio >= 0;
        dropout = next;
      } else {
        break;
      }
      chain.push_back(next);
      probs = next->output(0);
    }
    // With dropout, the unfused rule that gives an additive mask its gradient would need the
    // dropout's elements too: such chains stay unfused.
    const bool mask_gradient =
        softmax->input(1) && !softmax->input(2) && from_float_input(softmax->input(1));
    const auto& outs = graph.outputs();
    const bool mask_output = dropout && dropout->output(1) &&
                             std::find(outs.begin(), outs.end(), dropout->output(1)) != outs.end();
    if (!known || mask_output || (ratio > 0 && mask_gradient) || probs->consumers.size() != 1)
      continue;
    Node* pv = probs->consumers[0];
    if (!is_plain_matmul(pv) || pv->input(0) != probs || pv->input(1) == probs ||
        !private_to(graph, probs, pv, keep))
      continue;
    chain.push_back(pv);
    const int dropout_stream = dropout ? dropout->random_stream() : -1;
    std::vector<Value*> inputs = {qk->input(0), k, pv->input(1)};
    for (size_t i = 1; i < softmax->num_inputs(); ++i) inputs.push_back(softmax->input(i));
    const Attribute* scale_attr = softmax->attr("scale");
    const Attribute scale = scale_attr ? *scale_attr : Attribute::make_float(1.0);
    // The Transpose stays for other readers; unread, dead-node removal drops it.
    Node* n =
        replace_chain(graph, chain, pv, ratio > 0 ? dropout_def : fused_def, inputs, "/attention");
    n->attrs["scale"] = scale;
    if (ratio > 0) {
      n->attrs["dropout"] = Attribute::make_float(ratio);
      n->random_index = dropout_stream;
    }
    fused_nodes.push_back(n);
  }
  if (fused_nodes.empty()) return 0;
  graph.rebuild_consumers();
  for (Node* n : fused_nodes) absorb_head_transposes(graph, n, keep);
  return finish_rewrites(graph, static_cast<int>(fused_nodes.size()));
}

}  // namespace ortmodule
