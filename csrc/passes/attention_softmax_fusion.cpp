#include "passes/attention_softmax_fusion.h"

#include <algorithm>
#include <string>
#include <vector>

#include "ops/op_table.h"
#include "passes/chain_rewrite.h"
#include "passes/constant_value.h"

namespace ortmodule {
namespace {

// v's producer, when it is `op` of the default domain with `arity` inputs and v's only use
// is the next node of the chain (not a graph output, not kept).
Node* private_producer(const Graph& g, const Value* v, const char* op, size_t arity,
                       const std::vector<Value*>& keep) {
  Node* n = v ? v->producer : nullptr;
  if (!n || n->op_type != op || !n->domain.empty() || n->num_inputs() != arity ||
      v->consumers.size() != 1)
    return nullptr;
  for (size_t k = 0; k < arity; ++k)
    if (!n->input(k)) return nullptr;
  const auto& outs = g.outputs();
  if (std::find(outs.begin(), outs.end(), v) != outs.end() ||
      std::find(keep.begin(), keep.end(), v) != keep.end())
    return nullptr;
  return n;
}

Node* private_binary_producer(const Graph& g, const Value* v, const char* op,
                              const std::vector<Value*>& keep) {
  return private_producer(g, v, op, 2, keep);
}

// For Mul(x, c), Mul(c, x) and Div(x, c) feeding `v` privately (c a one-element constant
// of rank <= 1; a larger rank would change the product's rank): x, with the chain's node
// and the factor applied to x.
Value* unscaled(const Graph& g, Value* v, const std::vector<Value*>& keep, Node** node,
                double* scale) {
  double c = 0;
  if (Node* mul = private_binary_producer(g, v, "Mul", keep)) {
    for (int k = 0; k < 2; ++k) {
      if (constant_float_scalar(mul->input(1 - k), 1, c)) {
        *node = mul;
        *scale = c;
        return mul->input(k);
      }
    }
  }
  if (Node* div = private_binary_producer(g, v, "Div", keep)) {
    if (constant_float_scalar(div->input(1), 1, c) && c != 0) {
      *node = div;
      *scale = 1.0 / c;
      return div->input(0);
    }
  }
  return nullptr;
}

}  // namespace

int fuse_attention_softmax(Graph& graph, const std::vector<Value*>& keep) {
  if (graph.opset_version < 13) return 0;  // before 13 Softmax normalises a 2-D view
  const OpDef* fused_def = find_op("ai.ortmodule", "ScaledMaskedSoftmax", graph.opset_version);
  if (!fused_def) return 0;
  const OpDef* not_def = find_op("", "Not", graph.opset_version);
  graph.rebuild_consumers();
  int fused = 0;
  for (Node* softmax : graph.nodes()) {
    if (softmax->op_type != "Softmax" || !softmax->domain.empty() || !softmax->input(0) ||
        !softmax->output(0) || softmax->attr_int("axis", -1) != -1)
      continue;
    std::vector<Node*> chain = {softmax};
    Value* scores = softmax->input(0);
    Value* mask = nullptr;
    Value* fill = nullptr;  // with a boolean mask
    if (Node* add = private_binary_producer(graph, scores, "Add", keep)) {
      chain.push_back(add);
      // The scaled operand holds the scores; without a scale either operand may, and the
      // gradient rule treats both alike.
      Node* probe = nullptr;
      double unused = 1;
      const int scaled = unscaled(graph, add->input(1), keep, &probe, &unused) ? 1 : 0;
      scores = add->input(scaled);
      mask = add->input(1 - scaled);
    } else if (Node* where = private_producer(graph, scores, "Where", 3, keep)) {
      // Where(keep, s, c) or Where(drop, c, s) (masked_fill), c a one-element constant: a
      // boolean mask with fill c; the second form's mask is negated (a Not over the mask,
      // which is usually smaller than the scores: [B, 1, S, S] against [B, H, S, S]).
      double unused = 0;
      const bool kept_true = constant_float_scalar(where->input(2), 1, unused);
      if (kept_true || constant_float_scalar(where->input(1), 1, unused)) {
        chain.push_back(where);
        mask = where->input(0);
        fill = where->input(kept_true ? 2 : 1);
        scores = where->input(kept_true ? 1 : 2);
        if (!kept_true) {
          if (!not_def) continue;
          Value* kept = graph.new_value(mask->name + "/kept");
          Node* negation = graph.add_node("Not", "", {mask}, {kept}, where->name + "/not");
          negation->def = not_def;
          negation->source = where->source;
          mask = kept;
        }
      }
    }
    double scale = 1;
    Node* scale_node = nullptr;
    if (Value* x = unscaled(graph, scores, keep, &scale_node, &scale)) {
      chain.push_back(scale_node);
      scores = x;
    }
    if (chain.size() == 1) continue;  // a plain softmax
    std::vector<Value*> inputs = {scores};
    if (mask) inputs.push_back(mask);
    if (fill) inputs.push_back(fill);
    Node* n = replace_chain(graph, chain, softmax, fused_def, inputs, "/scaled_masked");
    n->attrs["scale"] = Attribute::make_float(scale);
    ++fused;
  }
  return finish_rewrites(graph, fused);
}

}  // namespace ortmodule
