#include "grad/grad_context.h"

#include <stdexcept>

#include "ops/op_table.h"

namespace ortmodule {

// Gradient rules emit ops in their newest form (inputs rather than attributes, numpy
// broadcasting), whatever the opset of the model being differentiated: they are looked up
// at the newest opset of the table.

GradContext::GradContext(Graph& graph, Node& node, std::vector<Value*> output_grads,
                         std::vector<bool> needs_grad)
    : graph_(graph),
      node_(node),
      output_grads_(std::move(output_grads)),
      needs_grad_(std::move(needs_grad)),
      input_grads_(node.inputs.size(), nullptr) {}

Value* GradContext::forward_output(size_t i, const std::string& hint) {
  return graph_.add_node_output(&node_, i, node_.name + "/" + hint);
}

void GradContext::replace_forward_op(const std::string& op, const std::string& domain) {
  const OpDef* def = find_op(domain, op, kMaxOnnxOpset);
  if (!def) throw std::logic_error("replacement op " + op + " is not in the op table");
  node_.op_type = op;
  node_.domain = domain;
  node_.def = def;
}

void GradContext::set_input_grad(size_t i, Value* grad) {
  if (needs_grad(i)) input_grads_[i] = grad;
}

Value* GradContext::emit(const std::string& op, std::vector<Value*> inputs, AttrList attrs,
                         const std::string& domain) {
  return emit_multi(op, std::move(inputs), {true}, attrs, domain)[0];
}

std::vector<Value*> GradContext::emit_multi(const std::string& op, std::vector<Value*> inputs,
                                            const std::vector<bool>& wanted, AttrList attrs,
                                            const std::string& domain) {
  std::vector<Value*> outs;
  for (size_t i = 0; i < wanted.size(); ++i)
    outs.push_back(wanted[i] ? graph_.new_value(node_.name + "_grad/" + op) : nullptr);
  Node* n = graph_.add_node(op, domain, inputs, outs, node_.name + "_grad/" + op);
  for (const auto& kv : attrs) n->attrs[kv.first] = kv.second;
  n->def = find_op(domain, op, kMaxOnnxOpset);
  if (!n->def) {
    throw std::logic_error("gradient of " + node_.describe() + " emits op " + op +
                           " which is not in the op table");
  }
  return outs;
}

Value* GradContext::shape_of(Value* v) { return emit("Shape", {v}); }

Value* GradContext::sum_to_shape(Value* grad, Value* like) {
  return emit("SumToShape", {grad, shape_of(like)}, {}, "ai.ortmodule");
}

Value* GradContext::scalar_constant(double v, Value* like_dtype_of) {
  // Resolved at run time to the dtype of the other operand by ScalarLike.
  return emit("ScalarLike", {like_dtype_of}, {{"value", Attribute::make_float(v)}}, "ai.ortmodule");
}

void GradContext::fail(const std::string& message) const {
  throw std::runtime_error("cannot differentiate " + node_.describe() + ": " + message);
}

}  // namespace ortmodule
