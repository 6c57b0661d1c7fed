#include "grad/gradient_builder.h"

#include <stdexcept>
#include <unordered_map>
#include <unordered_set>

#include "ops/op_table.h"

namespace ortmodule {

namespace {

bool dtype_only_input(const Node& n, size_t i) {
  return i < 32 && ((n.def->no_grad_inputs >> i) & 1u);
}

// Values that depend on a requested input (through differentiable ops, or ops whose
// gradient is zero: their outputs require grad as in PyTorch).
std::unordered_set<Value*> values_requiring_grad(const std::vector<Node*>& nodes,
                                                 const std::vector<Value*>& wrt) {
  std::unordered_set<Value*> req(wrt.begin(), wrt.end());
  for (Node* n : nodes) {
    if (!n->def || !(n->def->differentiable || n->def->zero_gradient)) continue;
    bool any = false;
    for (size_t i = 0; i < n->inputs.size(); ++i)
      any = any || (n->inputs[i] && req.count(n->inputs[i]) && !dtype_only_input(*n, i));
    if (!any) continue;
    for (Value* out : n->outputs)
      if (out) req.insert(out);
  }
  return req;
}

// Values from which some graph output can be reached.
std::unordered_set<Value*> values_reaching_outputs(const std::vector<Node*>& nodes,
                                                   const std::vector<Value*>& outputs) {
  std::unordered_set<Value*> reach(outputs.begin(), outputs.end());
  for (auto it = nodes.rbegin(); it != nodes.rend(); ++it) {
    Node* n = *it;
    bool any = false;
    for (Value* out : n->outputs) any = any || (out && reach.count(out));
    if (!any) continue;
    for (Value* in : n->inputs)
      if (in) reach.insert(in);
  }
  return reach;
}

}  // namespace

GradientGraphInfo build_gradient_graph(Graph& graph, const std::vector<Value*>& wrt) {
  const std::vector<Node*> forward_nodes = graph.nodes();
  std::unordered_set<Value*> req = values_requiring_grad(forward_nodes, wrt);
  std::unordered_set<Value*> reach = values_reaching_outputs(forward_nodes, graph.outputs());

  // Outputs through which the producer's gradient rule passes no gradient.
  std::unordered_set<Value*> no_grad_outputs;
  for (Node* n : forward_nodes) {
    if (!n->def || n->def->grad_outputs < 0) continue;
    for (size_t i = static_cast<size_t>(n->def->grad_outputs); i < n->outputs.size(); ++i)
      if (n->outputs[i]) no_grad_outputs.insert(n->outputs[i]);
  }

  GradientGraphInfo info;
  // Pending gradient contributions per forward value, summed when first read.
  std::unordered_map<Value*, std::vector<Value*>> contributions;
  for (Value* out : graph.outputs()) {
    Value* g = nullptr;
    // Outputs of unknown type may carry gradients; the boundary attaches autograd
    // history only to floating-point results.
    if (req.count(out) && !no_grad_outputs.count(out) &&
        (out->dtype == DType::Undefined || dtype_is_floating(out->dtype))) {
      g = graph.new_value(out->name + "_grad");
      g->dtype = out->dtype;
      g->shape = out->shape;
      g->has_shape = out->has_shape;
      contributions[out].push_back(g);
    }
    info.output_grads.push_back(g);
  }

  auto total_grad = [&](Value* v) -> Value* {
    auto it = contributions.find(v);
    if (it == contributions.end() || it->second.empty()) return nullptr;
    std::vector<Value*>& parts = it->second;
    if (parts.size() > 1) {
      if (dtype_is_low_precision(v->dtype)) {
        // Contributions may arrive in float32 (from ops computed in float32) or 16-bit:
        // each is brought to the value's own type, summed as autograd sums them.
        for (Value*& part : parts) {
          Value* like = graph.new_value(part->name + "_like");
          like->dtype = v->dtype;
          Node* n = graph.add_node("CastLike", "", {part, v}, {like}, like->name);
          n->def = find_op("", "CastLike", kMaxOnnxOpset);
          part = like;
        }
      }
      Value* sum = graph.new_value(v->name + "_grad_sum");
      if (dtype_is_low_precision(v->dtype)) sum->dtype = v->dtype;
      Node* n = graph.add_node("Sum", "", parts, {sum}, v->name + "_grad_accumulate");
      n->def = find_op("", "Sum", kMaxOnnxOpset);
      parts.assign(1, sum);
    }
    return parts[0];
  };

  for (auto it = forward_nodes.rbegin(); it != forward_nodes.rend(); ++it) {
    Node* node = *it;
    std::vector<bool> needs(node->inputs.size(), false);
    bool any_needed = false;
    for (size_t i = 0; i < node->inputs.size(); ++i) {
      Value* in = node->inputs[i];
      needs[i] =
          in && req.count(in) && reach.count(in) && !(node->def && dtype_only_input(*node, i));
      any_needed = any_needed || needs[i];
    }
    if (!any_needed || !node->def || !node->def->differentiable) continue;
    std::vector<Value*> out_grads;
    bool any_grad = false;
    for (Value* out : node->outputs) {
      Value* g = out ? total_grad(out) : nullptr;
      out_grads.push_back(g);
      any_grad = any_grad || g;
    }
    if (!any_grad) continue;
    for (size_t i = 0; i < out_grads.size(); ++i) {
      if (out_grads[i] && no_grad_outputs.count(node->outputs[i])) {
        throw std::runtime_error(
            "a gradient flows into output " + std::to_string(i) + " ('" + node->outputs[i]->name +
            "') of " + node->describe() + ", but the op's gradient passes only through its first " +
            std::to_string(node->def->grad_outputs) +
            " output(s). Detach that output (it is a statistic, index or mask) or compute it "
            "with separate ops.");
      }
    }
    if (!node->def->grad) {
      throw std::runtime_error("no gradient rule for " + node->describe() +
                               "; it lies between a parameter that requires grad and the "
                               "output. Freeze the parameters before it or report the op.");
    }
    GradContext ctx(graph, *node, out_grads, needs);
    node->def->grad(ctx);
    for (size_t i = 0; i < node->inputs.size(); ++i) {
      Value* g = ctx.input_grads()[i];
      if (g) contributions[node->inputs[i]].push_back(g);
    }
  }

  for (Value* x : wrt) info.input_grads.push_back(total_grad(x));
  graph.topological_sort();
  return info;
}

}  // namespace ortmodule
