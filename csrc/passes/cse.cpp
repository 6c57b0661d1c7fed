#include "passes/cse.h"

#include <map>
#include <sstream>
#include <unordered_map>

#include "ops/op_table.h"

namespace ortmodule {
namespace {

bool mergeable(const Node& n) {
  return !(n.def && (n.def->random || n.def->host_call)) && n.op_type != "Constant" &&
         !n.outputs.empty();
}

// A key equal for nodes that compute the same thing: op, domain, input ids, attributes.
std::string node_key(const Node& n) {
  std::ostringstream os;
  os << n.domain << "::" << n.op_type << "(";
  for (const Value* in : n.inputs) os << (in ? in->id : -1) << ",";
  os << ")" << n.outputs.size();
  for (const auto& [name, a] : n.attrs) {
    os << "|" << name << "=";
    switch (a.kind) {
      case Attribute::Kind::Int:
        os << a.i;
        break;
      case Attribute::Kind::Float:
        os << a.f;
        break;
      case Attribute::Kind::String:
        os << a.s;
        break;
      case Attribute::Kind::Ints:
        for (int64_t v : a.ints) os << v << ",";
        break;
      case Attribute::Kind::Floats:
        for (double v : a.floats) os << v << ",";
        break;
      case Attribute::Kind::Strings:
        for (const auto& v : a.strings) os << v << ",";
        break;
      case Attribute::Kind::Tensor:
        os << "tensor@" << a.t.raw();
        break;
    }
  }
  return os.str();
}

}  // namespace

int eliminate_common_subexpressions(Graph& graph, std::unordered_map<Value*, Value*>* replaced) {
  std::unordered_map<std::string, Node*> seen;
  std::unordered_map<Value*, Value*> replacement;
  std::vector<Node*> removed;
  for (Node* n : graph.nodes()) {
    for (Value*& in : n->inputs) {
      auto it = in ? replacement.find(in) : replacement.end();
      if (it != replacement.end()) in = it->second;
    }
    if (!mergeable(*n)) continue;
    auto [it, inserted] = seen.emplace(node_key(*n), n);
    if (inserted) continue;
    Node* first = it->second;
    bool outputs_match = first->outputs.size() == n->outputs.size();
    for (size_t i = 0; outputs_match && i < n->outputs.size(); ++i)
      outputs_match = (first->outputs[i] == nullptr) == (n->outputs[i] == nullptr);
    if (!outputs_match) continue;
    for (size_t i = 0; i < n->outputs.size(); ++i)
      if (n->outputs[i]) replacement[n->outputs[i]] = first->outputs[i];
    removed.push_back(n);
  }
  for (Value*& out : graph.mutable_outputs()) {
    auto it = replacement.find(out);
    if (it != replacement.end()) out = it->second;
  }
  graph.remove_nodes(removed);
  if (replaced) *replaced = std::move(replacement);
  return static_cast<int>(removed.size());
}

}  // namespace ortmodule
