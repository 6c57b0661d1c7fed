// In-memory graph: values, nodes with attributes, graph inputs/outputs and
// constant initializers. Built by the ONNX loader, extended by the gradient
// builder, consumed by the planner. No protobuf and no torch types here.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "ir/tensor.h"

namespace ortmodule {

// The newest opset of the default ONNX domain the op table has been checked against: the
// loader accepts models of opsets 1 to this (each op at the versions its rows cover).
constexpr int kMaxOnnxOpset = 28;

struct OpDef;
struct Node;

// A dimension is either known (value >= 0) or symbolic (value < 0, named param).
struct Dim {
  int64_t value = -1;
  std::string param;
};

struct Value {
  int id = -1;
  std::string name;
  DType dtype = DType::Undefined;
  bool has_shape = false;
  std::vector<Dim> shape;
  Node* producer = nullptr;
  Tensor initializer;  // defined for constants baked into the graph
  // For a graph input that the model also lists as an initializer: the value it takes when
  // the caller leaves it out (ONNX: such an initializer is a default the caller may override).
  Tensor input_default;
  std::vector<Node*> consumers;
};

struct Attribute {
  enum class Kind { Int, Float, String, Ints, Floats, Strings, Tensor };
  Kind kind = Kind::Int;
  int64_t i = 0;
  double f = 0;
  std::string s;
  std::vector<int64_t> ints;
  std::vector<double> floats;
  std::vector<std::string> strings;
  Tensor t;

  static Attribute make_int(int64_t v);
  static Attribute make_float(double v);
  static Attribute make_ints(std::vector<int64_t> v);
  static Attribute make_string(std::string v);
  static Attribute make_tensor(Tensor v);
};

struct Node {
  int id = -1;
  std::string name;
  std::string op_type;
  std::string domain;           // "" is the ONNX default domain
  std::vector<Value*> inputs;   // nullptr marks an omitted optional input
  std::vector<Value*> outputs;  // nullptr marks an omitted optional output
  std::map<std::string, Attribute> attrs;
  const OpDef* def = nullptr;  // resolved against the op table
  std::string source;          // Python location that produced the node, when the exporter said
  // For random ops: the op's position among the model's random ops in the order the model
  // ran them. It keys the op's random numbers, so that the graphs built from one model for
  // other modes (with or without gradients) draw the same numbers for the same seed.
  int random_index = -1;
  // torch.utils.checkpoint region the node was traced in (-1: none); backward recomputes
  // such nodes instead of keeping their outputs (passes/recompute.h).
  int checkpoint_region = -1;
  // Forward-independent work that backward runs: a recompute copy of a forward node, or
  // a gradient helper that reads one. Scheduled right before its first backward reader.
  bool run_in_backward = false;
  const Node* recomputes = nullptr;  // for a recompute copy: the forward node it repeats

  bool has_attr(const std::string& key) const { return attrs.count(key) != 0; }
  int64_t attr_int(const std::string& key, int64_t def_value) const;
  double attr_float(const std::string& key, double def_value) const;
  std::string attr_string(const std::string& key, const std::string& def_value) const;
  std::vector<int64_t> attr_ints(const std::string& key, std::vector<int64_t> def_value = {}) const;
  const Attribute* attr(const std::string& key) const;
  size_t num_inputs() const;  // counting up to the last present input
  Value* input(size_t i) const { return i < inputs.size() ? inputs[i] : nullptr; }
  Value* output(size_t i) const { return i < outputs.size() ? outputs[i] : nullptr; }
  // Where v is among the outputs (outputs.size() when it is none of them).
  size_t output_index(const Value* v) const;
  // "OpType 'name'" for error messages.
  std::string describe() const;
  // Identifies the node's random stream: a recompute copy draws what its original drew.
  int random_stream() const {
    const Node* origin = recomputes ? recomputes : this;
    return origin->random_index >= 0 ? origin->random_index : origin->id;
  }
};

// The chain of producers' input 0 that ends at v: v, then the input 0 of its producer p
// while p's output k on the chain is one that keeps(p, k) says has what its input 0 has (a
// dtype, a shape) by the op's definition, and so on; the chain's first value last. A graph is
// acyclic, so the walk ends; the bound only guards a malformed one.
template <typename Keeps>
std::vector<Value*> input0_chain(Value* v, Keeps keeps) {
  std::vector<Value*> chain{v};
  for (size_t steps = 0; v && steps < 100000; ++steps) {
    const Node* p = v->producer;
    if (!p || p->inputs.empty() || !p->input(0) || !keeps(*p, p->output_index(v))) break;
    v = p->input(0);
    chain.push_back(v);
  }
  return chain;
}

class Graph {
 public:
  Graph() = default;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  Value* find_value(const std::string& name) const;
  Value* value(const std::string& name) const;  // throws if missing
  // Creates a value; the name is made unique if taken.
  Value* new_value(const std::string& name_hint);
  Node* add_node(const std::string& op_type, const std::string& domain,
                 const std::vector<Value*>& inputs, const std::vector<Value*>& outputs,
                 const std::string& name = "");
  Value* add_constant(const std::string& name_hint, Tensor t);
  // Adds an output value to an existing node (e.g. a forward node exposing a
  // value that backward needs). Pads with nullptr up to `index`.
  Value* add_node_output(Node* node, size_t index, const std::string& name_hint);

  // Orders nodes so producers come before consumers; throws naming a node on a cycle.
  void topological_sort();
  // Moves `node` in the order to right before `anchor` (both in the graph); the caller keeps
  // producers before consumers.
  void move_before(Node* node, const Node* anchor);
  // Drops nodes from the order (their outputs must no longer be read).
  void remove_nodes(const std::vector<Node*>& nodes);
  // Recomputes consumer lists from node inputs.
  void rebuild_consumers();

  std::vector<Node*> nodes() const;
  const std::vector<Value*>& inputs() const { return inputs_; }
  const std::vector<Value*>& outputs() const { return outputs_; }
  std::vector<Value*>& mutable_inputs() { return inputs_; }
  std::vector<Value*>& mutable_outputs() { return outputs_; }
  size_t num_values() const { return values_.size(); }
  Value* value_by_id(int id) const { return values_[id].get(); }

  int64_t opset_version = 17;  // of the default ONNX domain
  std::string name;

 private:
  std::vector<std::unique_ptr<Value>> values_;
  std::vector<std::unique_ptr<Node>> nodes_;
  std::vector<Node*> order_;
  std::unordered_map<std::string, Value*> by_name_;
  std::vector<Value*> inputs_;
  std::vector<Value*> outputs_;
  int unique_counter_ = 0;
};

}  // namespace ortmodule
