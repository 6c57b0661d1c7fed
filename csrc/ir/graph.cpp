#include "ir/graph.h"

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <unordered_set>

namespace ortmodule {

Attribute Attribute::make_int(int64_t v) {
  Attribute a;
  a.kind = Kind::Int;
  a.i = v;
  return a;
}
Attribute Attribute::make_float(double v) {
  Attribute a;
  a.kind = Kind::Float;
  a.f = v;
  return a;
}
Attribute Attribute::make_ints(std::vector<int64_t> v) {
  Attribute a;
  a.kind = Kind::Ints;
  a.ints = std::move(v);
  return a;
}
Attribute Attribute::make_string(std::string v) {
  Attribute a;
  a.kind = Kind::String;
  a.s = std::move(v);
  return a;
}
Attribute Attribute::make_tensor(Tensor v) {
  Attribute a;
  a.kind = Kind::Tensor;
  a.t = std::move(v);
  return a;
}

const Attribute* Node::attr(const std::string& key) const {
  auto it = attrs.find(key);
  return it == attrs.end() ? nullptr : &it->second;
}

namespace {

const char* attr_kind_name(Attribute::Kind k) {
  switch (k) {
    case Attribute::Kind::Int:
      return "int";
    case Attribute::Kind::Float:
      return "float";
    case Attribute::Kind::String:
      return "string";
    case Attribute::Kind::Ints:
      return "ints";
    case Attribute::Kind::Floats:
      return "floats";
    case Attribute::Kind::Strings:
      return "strings";
    case Attribute::Kind::Tensor:
      return "tensor";
  }
  return "unknown";
}

[[noreturn]] void wrong_kind(const Node& n, const std::string& key, const char* expected,
                             Attribute::Kind got) {
  throw std::runtime_error(n.describe() + ": attribute '" + key + "' must be of type " + expected +
                           ", got " + attr_kind_name(got));
}

}  // namespace

int64_t Node::attr_int(const std::string& key, int64_t def_value) const {
  const Attribute* a = attr(key);
  if (!a) return def_value;
  if (a->kind == Attribute::Kind::Float) return static_cast<int64_t>(a->f);
  if (a->kind != Attribute::Kind::Int) wrong_kind(*this, key, "int", a->kind);
  return a->i;
}

double Node::attr_float(const std::string& key, double def_value) const {
  const Attribute* a = attr(key);
  if (!a) return def_value;
  if (a->kind == Attribute::Kind::Int) return static_cast<double>(a->i);
  // ONNX's FLOAT attribute is 32-bit: a value that needs double precision (the epsilon of a
  // float64 BatchNorm, 1e-3 rounded to float32 is 1.0000000475e-3) comes as a one-element
  // DOUBLE tensor.
  if (a->kind == Attribute::Kind::Tensor && a->t.dtype() == DType::Float64 && a->t.numel() == 1)
    return a->t.data<double>()[0];
  if (a->kind != Attribute::Kind::Float) wrong_kind(*this, key, "float", a->kind);
  return a->f;
}

std::string Node::attr_string(const std::string& key, const std::string& def_value) const {
  const Attribute* a = attr(key);
  if (!a) return def_value;
  if (a->kind != Attribute::Kind::String) wrong_kind(*this, key, "string", a->kind);
  return a->s;
}

std::vector<int64_t> Node::attr_ints(const std::string& key, std::vector<int64_t> def_value) const {
  const Attribute* a = attr(key);
  if (!a) return def_value;
  if (a->kind != Attribute::Kind::Ints) wrong_kind(*this, key, "ints", a->kind);
  return a->ints;
}

size_t Node::num_inputs() const {
  size_t n = inputs.size();
  while (n > 0 && inputs[n - 1] == nullptr) --n;
  return n;
}

size_t Node::output_index(const Value* v) const {
  for (size_t k = 0; k < outputs.size(); ++k)
    if (outputs[k] == v) return k;
  return outputs.size();
}

std::string Node::describe() const {
  std::string d = domain.empty() ? op_type : domain + "::" + op_type;
  d += " node '" + name + "'";
  if (!source.empty()) d += " (from " + source + ")";
  return d;
}

Value* Graph::find_value(const std::string& n) const {
  auto it = by_name_.find(n);
  return it == by_name_.end() ? nullptr : it->second;
}

Value* Graph::value(const std::string& n) const {
  Value* v = find_value(n);
  if (!v) throw std::runtime_error("graph has no value named '" + n + "'");
  return v;
}

Value* Graph::new_value(const std::string& name_hint) {
  std::string n = name_hint.empty() ? "v" : name_hint;
  while (by_name_.count(n)) n = name_hint + "_" + std::to_string(++unique_counter_);
  auto v = std::make_unique<Value>();
  v->id = static_cast<int>(values_.size());
  v->name = n;
  Value* raw = v.get();
  values_.push_back(std::move(v));
  by_name_[n] = raw;
  return raw;
}

Node* Graph::add_node(const std::string& op_type, const std::string& domain,
                      const std::vector<Value*>& inputs, const std::vector<Value*>& outputs,
                      const std::string& node_name) {
  auto node = std::make_unique<Node>();
  node->id = static_cast<int>(nodes_.size());
  node->op_type = op_type;
  node->domain = domain;
  node->name = node_name.empty() ? op_type + "_" + std::to_string(node->id) : node_name;
  node->inputs = inputs;
  node->outputs = outputs;
  Node* raw = node.get();
  for (Value* out : outputs) {
    if (!out) continue;
    if (out->producer) {
      throw std::runtime_error("value '" + out->name + "' is produced by both " +
                               out->producer->describe() + " and " + raw->describe());
    }
    out->producer = raw;
  }
  for (Value* in : inputs)
    if (in) in->consumers.push_back(raw);
  nodes_.push_back(std::move(node));
  order_.push_back(raw);
  return raw;
}

Value* Graph::add_constant(const std::string& name_hint, Tensor t) {
  Value* v = new_value(name_hint);
  v->dtype = t.dtype();
  v->has_shape = true;
  for (int64_t d : t.shape()) v->shape.push_back(Dim{d, ""});
  v->initializer = std::move(t);
  return v;
}

Value* Graph::add_node_output(Node* node, size_t index, const std::string& name_hint) {
  if (node->outputs.size() <= index) node->outputs.resize(index + 1, nullptr);
  if (node->outputs[index]) return node->outputs[index];
  Value* v = new_value(name_hint);
  v->producer = node;
  node->outputs[index] = v;
  return v;
}

std::vector<Node*> Graph::nodes() const { return order_; }

void Graph::move_before(Node* node, const Node* anchor) {
  auto from = std::find(order_.begin(), order_.end(), node);
  if (from == order_.end() || std::find(order_.begin(), order_.end(), anchor) == order_.end())
    throw std::logic_error("internal error: move_before on a node outside the graph");
  order_.erase(from);
  order_.insert(std::find(order_.begin(), order_.end(), anchor), node);
}

void Graph::remove_nodes(const std::vector<Node*>& nodes) {
  std::unordered_set<Node*> drop(nodes.begin(), nodes.end());
  std::vector<Node*> kept;
  for (Node* n : order_) {
    if (!drop.count(n)) {
      kept.push_back(n);
      continue;
    }
    for (Value* out : n->outputs)
      if (out && out->producer == n) out->producer = nullptr;
  }
  order_ = std::move(kept);
  rebuild_consumers();
}

void Graph::rebuild_consumers() {
  for (auto& v : values_) v->consumers.clear();
  for (Node* n : order_)
    for (Value* in : n->inputs)
      if (in) in->consumers.push_back(n);
}

void Graph::topological_sort() {
  // Kahn's algorithm, stable with respect to the current order.
  std::unordered_map<Node*, int> pending;
  std::unordered_map<Node*, size_t> position;
  for (size_t i = 0; i < order_.size(); ++i) position[order_[i]] = i;
  for (Node* n : order_) {
    std::unordered_set<Node*> deps;
    for (Value* in : n->inputs)
      if (in && in->producer) deps.insert(in->producer);
    pending[n] = static_cast<int>(deps.size());
  }
  rebuild_consumers();
  std::vector<Node*> ready;
  for (Node* n : order_)
    if (pending[n] == 0) ready.push_back(n);
  auto by_position = [&](Node* a, Node* b) { return position[a] > position[b]; };
  std::make_heap(ready.begin(), ready.end(), by_position);
  std::vector<Node*> sorted;
  while (!ready.empty()) {
    std::pop_heap(ready.begin(), ready.end(), by_position);
    Node* n = ready.back();
    ready.pop_back();
    sorted.push_back(n);
    std::unordered_set<Node*> released;
    for (Value* out : n->outputs) {
      if (!out) continue;
      for (Node* c : out->consumers) {
        if (released.insert(c).second && --pending[c] == 0) {
          ready.push_back(c);
          std::push_heap(ready.begin(), ready.end(), by_position);
        }
      }
    }
  }
  if (sorted.size() != order_.size()) {
    for (Node* n : order_) {
      if (pending[n] > 0) {
        throw std::runtime_error("graph has a cycle through " + n->describe() +
                                 ": its inputs depend on its own outputs");
      }
    }
  }
  order_ = std::move(sorted);
}

}  // namespace ortmodule
