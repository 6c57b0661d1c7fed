#include "passes/cse.h"

#include <cstdint>
#include <string>
#include <unordered_map>

#include "ops/op_table.h"

namespace ortmodule {
namespace {

bool mergeable(const Node& n) {
  return !(n.def && (n.def->random || n.def->host_call)) && n.op_type != "Constant" &&
         !n.outputs.empty();
}

// Appends `bytes` with its length, so that no two different field sequences give the
// same key (a string holding a separator cannot pose as two strings).
void append_field(std::string& key, const void* bytes, size_t size) {
  key.append(reinterpret_cast<const char*>(&size), sizeof(size));
  key.append(static_cast<const char*>(bytes), size);
}

void append_field(std::string& key, const std::string& s) { append_field(key, s.data(), s.size()); }

template <typename T>
void append_field(std::string& key, T value) {
  append_field(key, &value, sizeof(value));
}

// A key equal exactly for nodes that compute the same thing: op, domain, input ids and
// attributes. Floats are compared by bit pattern: values that print alike (1.0000001 and
// 1.0000002) stay apart, and so do NaNs with different payloads and -0.0 and 0.0.
std::string node_key(const Node& n) {
  std::string key;
  append_field(key, n.domain);
  append_field(key, n.op_type);
  append_field(key, n.inputs.size());
  for (const Value* in : n.inputs) append_field(key, in ? in->id : -1);
  append_field(key, n.outputs.size());
  for (const auto& [name, a] : n.attrs) {
    append_field(key, name);
    append_field(key, static_cast<int>(a.kind));
    switch (a.kind) {
      case Attribute::Kind::Int:
        append_field(key, a.i);
        break;
      case Attribute::Kind::Float:
        append_field(key, &a.f, sizeof(a.f));
        break;
      case Attribute::Kind::String:
        append_field(key, a.s);
        break;
      case Attribute::Kind::Ints:
        append_field(key, a.ints.data(), a.ints.size() * sizeof(int64_t));
        break;
      case Attribute::Kind::Floats:
        append_field(key, a.floats.data(), a.floats.size() * sizeof(double));
        break;
      case Attribute::Kind::Strings:
        append_field(key, a.strings.size());
        for (const std::string& v : a.strings) append_field(key, v);
        break;
      case Attribute::Kind::Tensor:
        // Only the same tensor object is known to hold the same values.
        append_field(key, a.t.raw());
        break;
    }
  }
  return key;
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
