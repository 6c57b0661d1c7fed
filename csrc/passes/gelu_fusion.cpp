#include "passes/gelu_fusion.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "ops/op_table.h"
#include "passes/chain_rewrite.h"

namespace ortmodule {
namespace {

// The value of a one-element constant (a Constant node or an initializer), if v is one.
bool scalar_value(const Value* v, double& out) {
  if (!v) return false;
  const Tensor* t = nullptr;
  if (v->initializer.defined()) {
    t = &v->initializer;
  } else if (v->producer && v->producer->op_type == "Constant") {
    const Attribute* a = v->producer->attr("value");
    if (a && a->kind == Attribute::Kind::Tensor) t = &a->t;
  }
  if (!t || !t->defined() || t->numel() != 1 || !dtype_is_floating(t->dtype())) return false;
  out = t->float_at(0);
  return true;
}

// Whether v holds `expected` as the model's float32 constant would (exported constants are
// float32 roundings of the Python literals).
bool is_scalar(const Value* v, double expected) {
  double got = 0;
  return scalar_value(v, got) && std::fabs(got - expected) <= 1e-6 * std::fabs(expected);
}

// n's producer when it is `op` of the default domain.
Node* producer_of(const Value* v, const char* op) {
  Node* n = v ? v->producer : nullptr;
  return n && n->op_type == op && n->domain.empty() && n->inputs.size() == 2 ? n : nullptr;
}

// For a binary commutative node with one scalar operand equal to `c`: the other operand.
Value* other_than_scalar(const Node* n, double c) {
  if (!n) return nullptr;
  if (is_scalar(n->input(1), c)) return n->input(0);
  if (is_scalar(n->input(0), c)) return n->input(1);
  return nullptr;
}

// The only reader of v, when there is exactly one and v is not a graph output.
Node* only_consumer(const Graph& g, const Value* v) {
  if (!v || v->consumers.size() != 1) return nullptr;
  const auto& outs = g.outputs();
  if (std::find(outs.begin(), outs.end(), v) != outs.end()) return nullptr;
  return v->consumers[0];
}

}  // namespace

int fuse_tanh_gelu(Graph& graph, const std::vector<Value*>& keep) {
  if (graph.opset_version < 20) return 0;
  const OpDef* gelu = find_op("", "Gelu", graph.opset_version);
  if (!gelu) return 0;
  graph.rebuild_consumers();
  int fused = 0;
  const double sqrt_2_over_pi = std::sqrt(2.0 / M_PI);
  for (Node* tanh : graph.nodes()) {
    if (tanh->op_type != "Tanh" || !tanh->domain.empty()) continue;
    // tanh(c * (x + 0.044715 * x^3))
    Node* scale = producer_of(tanh->input(0), "Mul");
    Node* sum = producer_of(other_than_scalar(scale, sqrt_2_over_pi), "Add");
    if (!sum) continue;
    Value* x = nullptr;
    Node *cube_scale = nullptr, *cube = nullptr;
    for (int k = 0; k < 2 && !x; ++k) {
      Node* m = producer_of(sum->input(1 - k), "Mul");
      Node* p = producer_of(other_than_scalar(m, 0.044715), "Pow");
      if (p && p->input(0) == sum->input(k) && is_scalar(p->input(1), 3.0)) {
        x = sum->input(k);
        cube_scale = m;
        cube = p;
      }
    }
    if (!x) continue;
    // 0.5 * x * (1 + tanh(...)), the 0.5 * x computed first as torch writes it
    Node* one_plus = only_consumer(graph, tanh->output(0));
    if (!one_plus || one_plus->op_type != "Add" || !one_plus->domain.empty() ||
        other_than_scalar(one_plus, 1.0) != tanh->output(0))
      continue;
    Node* out = only_consumer(graph, one_plus->output(0));
    if (!out || out->op_type != "Mul" || !out->domain.empty() || out->inputs.size() != 2) continue;
    Value* half_x = out->input(0) == one_plus->output(0) ? out->input(1) : out->input(0);
    Node* half = producer_of(half_x, "Mul");
    if (!half || other_than_scalar(half, 0.5) != x) continue;
    // Every intermediate feeds only the chain (x^3, 0.044715 x^3, the sum, the scaled sum,
    // the tanh, 1 + tanh and 0.5 x).
    const std::vector<Node*> chain = {cube, cube_scale, sum, scale, tanh, one_plus, half, out};
    bool private_chain = true;
    for (Node* n : chain)
      if (n != out && (only_consumer(graph, n->output(0)) == nullptr ||
                       std::find(keep.begin(), keep.end(), n->output(0)) != keep.end()))
        private_chain = false;
    if (!private_chain) continue;
    Node* g = replace_chain(graph, chain, out, gelu, {x}, "/gelu_tanh");
    g->attrs["approximate"] = Attribute::make_string("tanh");
    ++fused;
  }
  return finish_rewrites(graph, fused);
}

}  // namespace ortmodule
