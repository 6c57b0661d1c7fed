#include "passes/recompute.h"

#include <functional>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "ops/op_table.h"

namespace ortmodule {
namespace {

// Nodes that depend on an output gradient (the planner's rule for backward).
std::unordered_set<const Node*> backward_nodes(const std::vector<Node*>& nodes,
                                               const std::vector<Value*>& output_grads) {
  std::unordered_set<const Value*> grad_dependent;
  for (Value* g : output_grads)
    if (g) grad_dependent.insert(g);
  std::unordered_set<const Node*> backward;
  for (Node* n : nodes) {
    bool dep = n->run_in_backward;
    for (Value* in : n->inputs) dep = dep || (in && grad_dependent.count(in));
    if (!dep) continue;
    backward.insert(n);
    for (Value* out : n->outputs)
      if (out) grad_dependent.insert(out);
  }
  return backward;
}

// A copy of forward node `p` reading `inputs`, run in backward right before its first reader.
// With `first_output_only`, the copy computes output 0 alone (the optional outputs after it,
// e.g. a normalization's statistics, are left off).
Node* add_recompute_copy(Graph& graph, const Node* p, const std::vector<Value*>& inputs,
                         bool first_output_only = false) {
  std::vector<Value*> outputs;
  for (Value* out : p->outputs) {
    if (first_output_only && !outputs.empty()) break;
    Value* o = out ? graph.new_value(out->name + "/recompute") : nullptr;
    if (o) {
      o->dtype = out->dtype;
      o->shape = out->shape;
      o->has_shape = out->has_shape;
    }
    outputs.push_back(o);
  }
  Node* copy = graph.add_node(p->op_type, p->domain, inputs, outputs, p->name + "/recompute");
  copy->attrs = p->attrs;
  copy->def = p->def;
  copy->source = p->source;
  copy->run_in_backward = true;
  copy->recomputes = p;
  return copy;
}

// The backward node that reads one of `values` first in graph order (where recomputed
// copies go, so that sorting the graph leaves every reader where it was), or nullptr.
const Node* first_backward_reader(const std::vector<Value*>& values,
                                  const std::unordered_set<const Node*>& backward,
                                  const std::unordered_map<const Node*, size_t>& position) {
  const Node* first = nullptr;
  for (const Value* v : values)
    for (const Node* reader : v->consumers)
      if (backward.count(reader) && (!first || position.at(reader) < position.at(first)))
        first = reader;
  return first;
}

// Unary element-wise activations: one input, one output of its size, a few operations
// per element (far cheaper to repeat than the product that reads the output).
bool is_cheap_activation(const Node* n) {
  static const std::unordered_set<std::string> kDefaultDomain = {
      "Gelu", "Relu", "LeakyRelu", "Sigmoid", "Tanh", "Erf", "Softplus", "Elu", "Selu"};
  if (!n->def || n->def->random || n->def->host_call || !n->def->state_writeback.empty())
    return false;
  if (n->num_inputs() != 1 || !n->input(0) || n->outputs.size() != 1 || !n->output(0)) return false;
  if (n->output(0)->dtype != n->input(0)->dtype) return false;
  return n->domain.empty() && kDefaultDomain.count(n->op_type) != 0;
}

// Normalizations over the last axes (LayerNormalization, and the RMS norm
// SimplifiedLayerNormalization) whose other inputs are parameters (always at hand):
// backward keeps their input for the gradient, and the product after them reads their output
// for its weight gradient; repeating one costs a pass over a row per row. Only output 0 is
// repeated (the gradient reads forward's own mean and inverse deviation).
bool is_cheap_normalization(const Node* n, const std::unordered_set<const Value*>& parameters) {
  if (!n->def || n->def->random || n->def->host_call || !n->def->state_writeback.empty())
    return false;
  const bool layer_norm = n->domain.empty() && n->op_type == "LayerNormalization";
  const bool rms_norm =
      n->domain == "com.microsoft" && n->op_type == "SimplifiedLayerNormalization";
  if (!layer_norm && !rms_norm) return false;
  if (n->num_inputs() < 1 || !n->input(0) || n->outputs.empty() || !n->output(0)) return false;
  if (n->output(0)->dtype != n->input(0)->dtype) return false;
  for (size_t i = 1; i < n->num_inputs(); ++i)
    if (n->input(i) && !parameters.count(n->input(i))) return false;
  return true;
}

// Ops whose output is a view of input 0 (the other inputs, if any, give its shape).
bool is_view(const Node* n) {
  static const std::unordered_set<std::string> kViews = {"Reshape", "Flatten", "Squeeze",
                                                         "Unsqueeze", "Identity"};
  return n->def && n->domain.empty() && n->outputs.size() == 1 && n->output(0) && n->input(0) &&
         kViews.count(n->op_type) != 0;
}

}  // namespace

int recompute_cheap_activations(Graph& graph, const std::unordered_set<const Node*>& forward_nodes,
                                const std::vector<Value*>& output_grads) {
  graph.rebuild_consumers();
  const std::vector<Node*> nodes = graph.nodes();
  const std::unordered_set<const Node*> backward = backward_nodes(nodes, output_grads);
  std::unordered_set<const Value*> read_by_backward;
  for (const Node* n : backward)
    for (Value* in : n->inputs)
      if (in) read_by_backward.insert(in);
  std::unordered_set<const Value*> graph_outputs(graph.outputs().begin(), graph.outputs().end());
  std::unordered_map<const Node*, size_t> position;
  for (size_t i = 0; i < nodes.size(); ++i) position[nodes[i]] = i;
  auto repeatable = [&](const Node* n) {
    return forward_nodes.count(n) && !backward.count(n) && !n->run_in_backward &&
           n->checkpoint_region < 0;
  };
  // Graph inputs (the parameters are inputs of the training graph) and constants.
  std::unordered_set<const Value*> parameters(graph.inputs().begin(), graph.inputs().end());
  for (size_t i = 0; i < graph.num_values(); ++i)
    if (graph.value_by_id(static_cast<int>(i))->initializer.defined())
      parameters.insert(graph.value_by_id(static_cast<int>(i)));
  int copies = 0;
  for (Node* p : nodes) {
    if (!repeatable(p) || !(is_cheap_activation(p) || is_cheap_normalization(p, parameters)))
      continue;
    Value* x = p->input(0);
    Value* y = p->output(0);
    if (!read_by_backward.count(x) || graph_outputs.count(y)) continue;
    // The output and the views of it (a reshape between products), in graph order.
    std::vector<Value*> chain = {y};
    bool escapes = false;
    for (size_t i = 0; i < chain.size(); ++i) {
      for (Node* reader : chain[i]->consumers) {
        if (!repeatable(reader) || !is_view(reader) || reader->input(0) != chain[i]) continue;
        Value* v = reader->output(0);
        escapes = escapes || graph_outputs.count(v) != 0;
        chain.push_back(v);
      }
    }
    bool read = false;
    for (Value* v : chain) read = read || read_by_backward.count(v) != 0;
    if (escapes || !read) continue;
    const Node* first_reader = first_backward_reader(chain, backward, position);
    std::unordered_map<const Value*, Value*> copy_of;  // chain value -> its recomputed copy
    for (Value* v : chain) {
      const Node* original = v->producer;
      std::vector<Value*> inputs = original->inputs;
      inputs[0] = v == y ? x : copy_of.at(original->input(0));
      Node* copy = add_recompute_copy(graph, original, inputs, /*first_output_only=*/true);
      graph.move_before(copy, first_reader);
      copy_of[v] = copy->output(0);
      ++copies;
    }
    for (Value* v : chain) {
      for (Node* reader : v->consumers) {
        if (!backward.count(reader)) continue;
        for (Value*& in : reader->inputs)
          if (in == v) in = copy_of.at(v);
      }
    }
  }
  if (copies) {
    graph.rebuild_consumers();
    graph.topological_sort();
  }
  return copies;
}

namespace {

// Whether `target` is `from` or one of the nodes its inputs come from.
bool depends_on(const Node* from, const Node* target) {
  std::vector<const Node*> stack{from};
  std::unordered_set<const Node*> seen;
  while (!stack.empty()) {
    const Node* n = stack.back();
    stack.pop_back();
    if (n == target) return true;
    if (!seen.insert(n).second) continue;
    for (const Value* in : n->inputs)
      if (in && in->producer) stack.push_back(in->producer);
  }
  return false;
}

}  // namespace

int fold_gelu_recompute_into_grad(Graph& graph) {
  graph.rebuild_consumers();
  std::vector<Node*> folded;
  for (Node* copy : graph.nodes()) {
    if (!copy->recomputes || !copy->domain.empty() || copy->op_type != "Gelu" ||
        copy->num_inputs() != 1 || copy->outputs.size() != 1 || !copy->output(0))
      continue;
    Value* x = copy->input(0);
    const std::string mode = copy->attr_string("approximate", "none");
    Node* grad = nullptr;
    for (Node* reader : x->consumers) {
      if (reader->domain == "ai.ortmodule" && reader->op_type == "GeluGrad" &&
          reader->input(1) == x && reader->outputs.size() == 1 && reader->output(0) &&
          reader->attr_string("approximate", "none") == mode && reader->def &&
          !reader->recomputes && reader->checkpoint_region < 0) {
        grad = reader;
        break;
      }
    }
    if (!grad || !grad->input(0) || depends_on(grad, copy)) continue;
    Value* y = copy->output(0);
    copy->outputs.clear();
    y->producer = grad;
    grad->outputs.push_back(y);
    // Where the copy ran: right before the first reader of the activation (the sort below
    // moves the gradient later where its incoming gradient is made after that).
    graph.move_before(grad, copy);
    folded.push_back(copy);
  }
  if (!folded.empty()) {
    graph.remove_nodes(folded);
    graph.topological_sort();
  }
  return static_cast<int>(folded.size());
}

int recompute_widening_casts(Graph& graph, const std::unordered_set<const Node*>& forward_nodes,
                             const std::vector<Value*>& output_grads) {
  graph.rebuild_consumers();
  const std::vector<Node*> nodes = graph.nodes();
  const std::unordered_set<const Node*> backward = backward_nodes(nodes, output_grads);
  std::unordered_set<const Value*> graph_outputs(graph.outputs().begin(), graph.outputs().end());
  std::unordered_map<const Node*, size_t> position;
  for (size_t i = 0; i < nodes.size(); ++i) position[nodes[i]] = i;
  int copies = 0;
  for (Node* p : nodes) {
    if (!forward_nodes.count(p) || backward.count(p) || p->run_in_backward ||
        p->checkpoint_region >= 0 || p->recomputes || !p->domain.empty() || p->op_type != "Cast" ||
        p->inputs.size() != 1 || p->outputs.size() != 1)
      continue;
    Value* x = p->input(0);
    Value* y = p->output(0);
    if (!x || !y || !dtype_is_low_precision(x->dtype) ||
        p->attr_int("to", -1) != static_cast<int64_t>(DType::Float32) || graph_outputs.count(y))
      continue;
    const Node* first_reader = first_backward_reader({y}, backward, position);
    if (!first_reader) continue;
    Node* copy = add_recompute_copy(graph, p, {x});
    graph.move_before(copy, first_reader);
    for (Node* reader : y->consumers) {
      if (!backward.count(reader)) continue;
      for (Value*& in : reader->inputs)
        if (in == y) in = copy->output(0);
    }
    ++copies;
  }
  if (copies) {
    graph.rebuild_consumers();
    graph.topological_sort();
  }
  return copies;
}

int recompute_checkpoint_regions(Graph& graph, const std::unordered_set<const Node*>& forward_nodes,
                                 const std::vector<Value*>& output_grads) {
  const std::vector<Node*> nodes = graph.nodes();
  const std::unordered_set<const Node*> backward = backward_nodes(nodes, output_grads);
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
      copy = add_recompute_copy(graph, p, inputs);
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
