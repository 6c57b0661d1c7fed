// What a gradient rule (grad_<op> in ops/*_ops.cpp) sees: the forward node through named
// accessors, and a way to emit nodes. The API below ops/: rules include this header; the
// walker that calls them (grad/gradient_builder.h) sits above ops/ and finds them through
// the op table.
#pragma once

#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "ir/graph.h"

namespace ortmodule {

using AttrList = std::initializer_list<std::pair<const char*, Attribute>>;

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
