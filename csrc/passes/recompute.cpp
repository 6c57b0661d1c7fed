#include "passes/recompute.h"

#include <functional>
#include <unordered_map>

#include "ops/op_table.h"

namespace ortmodule {

int recompute_checkpoint_regions(Graph& graph, const std::unordered_set<const Node*>& forward_nodes,
                                 const std::vector<Value*>& output_grads) {
  const std::vector<Node*> nodes = graph.nodes();
  // Backward: nodes that depend on an output gradient (the planner's rule).
  std::unordered_set<const Value*> grad_dependent;
  for (Value* g : output_grads)
    if (g) grad_dependent.insert(g);
  std::unordered_set<const Node*> backward;
  for (Node* n : nodes) {
    bool dep = false;
    for (Value* in : n->inputs) dep = dep || (in && grad_dependent.count(in));
    if (!dep) continue;
    backward.insert(n);
    for (Value* out : n->outputs)
      if (out) grad_dependent.insert(out);
  }
  auto repeatable = [&](const Node* p) {
    return p && p->checkpoint_region >= 0 && forward_nodes.count(p) && p->def &&
           !p->def->host_call && p->def->state_writeback.empty();
  };

  std::unordered_map<const Node*, Node*> copy_of;
  int copies = 0;
  // The value backward reads in place of `v`: a copy's output when a region node made it.
  std::function<Value*(Value*)> recomputed = [&](Value* v) -> Value* {
    Node* p = v ? v->producer : nullptr;
    if (!repeatable(p)) return v;
    Node*& copy = copy_of[p];
    if (!copy) {
      std::vector<Value*> inputs;
      for (Value* in : p->inputs) {
        // Values from outside the region are its inputs: kept, not recomputed.
        const bool same_region =
            in && in->producer && in->producer->checkpoint_region == p->checkpoint_region;
        inputs.push_back(same_region ? recomputed(in) : in);
      }
      std::vector<Value*> outputs;
      for (Value* out : p->outputs) {
        Value* o = out ? graph.new_value(out->name + "/recompute") : nullptr;
        if (o) {
          o->dtype = out->dtype;
          o->shape = out->shape;
          o->has_shape = out->has_shape;
        }
        outputs.push_back(o);
      }
      copy = graph.add_node(p->op_type, p->domain, inputs, outputs, p->name + "/recompute");
      copy->attrs = p->attrs;
      copy->def = p->def;
      copy->source = p->source;
      copy->run_in_backward = true;
      copy->recomputes = p;
      ++copies;
    }
    for (size_t i = 0; i < p->outputs.size(); ++i)
      if (p->outputs[i] == v) return copy->outputs[i];
    return v;
  };

  // Gradient helpers outside backward (Shape, Cos for Sin's gradient, ...) that read a
  // region value run in backward on the recomputed value, as does anything reading them.
  std::unordered_set<const Value*> deferred_values;
  for (Node* n : nodes) {
    bool deferred = false;
    if (!backward.count(n) && !forward_nodes.count(n)) {
      for (Value* in : n->inputs)
        deferred = deferred || (in && (repeatable(in->producer) || deferred_values.count(in)));
    }
    if (!backward.count(n) && !deferred) continue;
    for (Value*& in : n->inputs) in = recomputed(in);
    if (deferred) {
      n->run_in_backward = true;
      for (Value* out : n->outputs)
        if (out) deferred_values.insert(out);
    }
  }
  graph.rebuild_consumers();
  graph.topological_sort();
  return copies;
}

}  // namespace ortmodule
