#include "training/graph_edit.h"

#include <cstdint>
#include <cstring>
#include <stdexcept>

#include "ops/op_table.h"

namespace ortmodule {

Value* add_op(Graph& g, const std::string& op, const std::string& domain,
              const std::vector<Value*>& inputs,
              std::initializer_list<std::pair<const char*, Attribute>> attrs,
              const std::string& name, Value* out) {
  if (!out) out = g.new_value(name);
  Node* n = g.add_node(op, domain, inputs, {out}, name);
  for (const auto& kv : attrs) n->attrs[kv.first] = kv.second;
  n->def = find_op(domain, op, g.opset_version);
  if (!n->def) {
    throw std::logic_error("op " + op + (domain.empty() ? "" : " (" + domain + ")") +
                           " is not in the op table at opset " + std::to_string(g.opset_version));
  }
  return out;
}

Value* int64_constant(Graph& g, const std::string& name, const std::vector<int64_t>& values) {
  Tensor t = Tensor::empty(DType::Int64, {static_cast<int64_t>(values.size())});
  if (!values.empty()) std::memcpy(t.raw(), values.data(), values.size() * sizeof(int64_t));
  t.storage()->writable = false;
  return g.add_constant(name, t);
}

Value* float_constant(Graph& g, const std::string& name, float value) {
  Tensor t = Tensor::empty(DType::Float32, {});
  t.data<float>()[0] = value;
  t.storage()->writable = false;
  return g.add_constant(name, t);
}

}  // namespace ortmodule
