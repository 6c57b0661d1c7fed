// Builds the backward part of a training graph from the forward graph.
//
// For each forward output y that may carry a gradient, a graph input "y_grad" is
// added; walking the nodes in reverse order, each op's gradient rule (from the op
// table) emits nodes computing the gradients of the inputs that need them. Several
// contributions to one value are summed. Nodes are only emitted for values on a
// path from a requested input to an output.
#pragma once

#include <initializer_list>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "ir/graph.h"

namespace ortmodule {

struct GradientGraphInfo {
  std::vector<Value*> output_grads;  // one per forward output (nullptr: not differentiable)
  std::vector<Value*> input_grads;   // one per requested input (nullptr: gradient is zero)
};

// Extends `graph` in place. `wrt` are graph inputs needing gradients.
GradientGraphInfo build_gradient_graph(Graph& graph, const std::vector<Value*>& wrt);

using AttrList = std::initializer_list<std::pair<const char*, Attribute>>;

// What a gradient rule sees: the forward node through named accessors, and a way
// to emit nodes.
class GradContext {
 public:
  GradContext(Graph& graph, Node& node, std::vector<Value*> output_grads,
              std::vector<bool> needs_grad);

  Node& node() const { return node_; }
  Value* input(size_t i) const { return node_.input(i); }
  Value* output(size_t i) const { return node_.output(i); }
  // Makes sure forward output i exists (rules that need e.g. MaxPool indices).
  Value* forward_output(size_t i, const std::string& hint);
  // Switches the forward node to an op with the same inputs and more outputs
  // (BatchNormalization -> BatchNormInternal).
  void replace_forward_op(const std::string& op, const std::string& domain);
  Value* output_grad(size_t i) const {
    return i < output_grads_.size() ? output_grads_[i] : nullptr;
  }
  bool needs_grad(size_t i) const { return i < needs_grad_.size() && needs_grad_[i]; }
  void set_input_grad(size_t i, Value* grad);
  const std::vector<Value*>& input_grads() const { return input_grads_; }

  // Emits a node with one output and returns it.
  Value* emit(const std::string& op, std::vector<Value*> inputs, AttrList attrs = {},
              const std::string& domain = "");
  // Emits a node with `num_outputs` outputs (only those in `wanted` are created).
  std::vector<Value*> emit_multi(const std::string& op, std::vector<Value*> inputs,
                                 const std::vector<bool>& wanted, AttrList attrs = {},
                                 const std::string& domain = "");
  Value* shape_of(Value* v);
  // Undoes broadcasting: sums `grad` down to the shape of `like`.
  Value* sum_to_shape(Value* grad, Value* like);
  Value* scalar_constant(double v, Value* like_dtype_of);
  [[noreturn]] void fail(const std::string& message) const;

 private:
  Graph& graph_;
  Node& node_;
  std::vector<Value*> output_grads_;
  std::vector<bool> needs_grad_;
  std::vector<Value*> input_grads_;
};

}  // namespace ortmodule
