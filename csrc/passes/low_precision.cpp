#include "passes/low_precision.h"

#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "ops/op_table.h"

namespace ortmodule {

namespace {

// Ops that move or describe bfloat16 data without arithmetic, or convert it themselves.
bool keeps_bfloat16(const Node& n) {
  static const std::unordered_set<std::string> ops = {
      "Cast",    "CastLike",  "Constant", "Shape",   "Size",        "Identity",
      "Reshape", "Unsqueeze", "Squeeze",  "Flatten", "StopGradient"};
  return ops.count(n.op_type) != 0 && (n.domain.empty() || n.domain == "ai.ortmodule");
}

Node* add_cast(Graph& graph, Value* in, Value* out, DType to) {
  Node* cast = graph.add_node("Cast", "", {in}, {out}, out->name + "_cast");
  cast->attrs["to"] = Attribute::make_int(static_cast<int64_t>(to));
  cast->def = find_op("", "Cast", graph.opset_version);
  cast->source = in->producer ? in->producer->source : "";
  return cast;
}

}  // namespace

int compute_bfloat16_in_float32(Graph& graph) {
  std::unordered_map<Value*, Value*> as_float;  // bfloat16 value -> its float32 copy
  int moved = 0;
  // Constants carry their type in their tensor, not in the graph's type records.
  for (Node* n : graph.nodes()) {
    const Attribute* value = n->op_type == "Constant" ? n->attr("value") : nullptr;
    if (value && value->kind == Attribute::Kind::Tensor && value->t.defined() &&
        !n->outputs.empty() && n->outputs[0] && n->outputs[0]->dtype == DType::Undefined)
      n->outputs[0]->dtype = value->t.dtype();
  }
  for (Node* n : graph.nodes()) {
    if (keeps_bfloat16(*n)) continue;
    bool any = false;
    for (Value* v : n->inputs) any = any || (v && v->dtype == DType::BFloat16);
    for (Value* v : n->outputs) any = any || (v && v->dtype == DType::BFloat16);
    if (!any) continue;
    ++moved;
    for (Value*& in : n->inputs) {
      if (!in || in->dtype != DType::BFloat16) continue;
      auto it = as_float.find(in);
      if (it == as_float.end()) {
        Value* f = graph.new_value(in->name + "_f32");
        f->dtype = DType::Float32;
        f->shape = in->shape;
        f->has_shape = in->has_shape;
        add_cast(graph, in, f, DType::Float32);
        it = as_float.emplace(in, f).first;
      }
      in = it->second;
    }
    for (Value*& out : n->outputs) {
      if (!out || out->dtype != DType::BFloat16) continue;
      Value* f = graph.new_value(out->name + "_f32");
      f->dtype = DType::Float32;
      f->shape = out->shape;
      f->has_shape = out->has_shape;
      f->producer = n;
      Value* rounded = out;
      rounded->producer = nullptr;
      out = f;
      add_cast(graph, f, rounded, DType::BFloat16);
      // Later readers of the rounded value that compute in float32 read the rounded one.
      as_float.erase(rounded);
    }
  }
  if (moved) {
    graph.rebuild_consumers();
    graph.topological_sort();
  }
  return moved;
}

}  // namespace ortmodule
