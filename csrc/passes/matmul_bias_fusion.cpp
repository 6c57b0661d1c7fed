#include "passes/matmul_bias_fusion.h"

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <stdexcept>
#include <string>
#include <unordered_set>

#include "ops/op_table.h"

namespace ortmodule {
namespace {

const char* kOwnDomain = "ai.ortmodule";

bool is_product(const Node& n) {
  if (n.inputs.size() != 2 || n.outputs.size() != 1) return false;
  return (n.domain.empty() && n.op_type == "MatMul") ||
         (n.domain == "com.microsoft" && n.op_type == "FusedMatMul");
}

bool is_floating(DType t) { return t == DType::Float32 || t == DType::Float64; }

// N of a product whose second operand is a [K, N] (or [N, K] with transB) matrix of known
// shape, else -1.
int64_t weight_columns(const Node& product) {
  const Value* b = product.input(1);
  if (!b || !b->has_shape || b->shape.size() != 2) return -1;
  const bool tb = product.attr_int("transB", 0) != 0;
  return b->shape[tb ? 0 : 1].value;
}

// The activation name FusedMatMulBias takes for node n, or "" when n is not one it fuses.
std::string activation_of(const Node& n) {
  if (!n.domain.empty() || n.inputs.size() != 1 || n.outputs.size() != 1) return "";
  if (n.op_type == "Relu") return "Relu";
  if (n.op_type == "Gelu") {
    const std::string mode = n.attr_string("approximate", "none");
    if (mode == "none") return "Gelu";
    if (mode == "tanh") return "GeluTanh";
  }
  return "";
}

bool is_shape_read(const Node& n) { return n.domain.empty() && n.op_type == "Shape"; }

// The one reader of v that is not a Shape (gradient rules read the shapes of the values they
// sum to), or nullptr.
Node* only_data_reader(const Value* v) {
  Node* reader = nullptr;
  for (Node* c : v->consumers) {
    if (is_shape_read(*c)) continue;
    if (reader) return nullptr;
    reader = c;
  }
  return reader;
}

}  // namespace

std::vector<Node*> fuse_matmul_bias(Graph& graph, const std::vector<Value*>& keep) {
  const OpDef* def = find_op(kOwnDomain, "FusedMatMulBias", graph.opset_version);
  if (!def) throw std::logic_error("the op table has no ai.ortmodule FusedMatMulBias row");
  graph.rebuild_consumers();
  std::unordered_set<const Value*> kept(keep.begin(), keep.end());
  kept.insert(graph.outputs().begin(), graph.outputs().end());
  std::unordered_set<const Node*> removed;
  std::vector<Node*> fused;
  for (Node* mm : graph.nodes()) {
    if (removed.count(mm) || !is_product(*mm) || mm->checkpoint_region >= 0) continue;
    Value* product = mm->output(0);
    if (!product || kept.count(product)) continue;
    Node* add = only_data_reader(product);
    if (!add || !add->domain.empty() || add->op_type != "Add" || add->inputs.size() != 2 ||
        add->outputs.size() != 1 || add->checkpoint_region >= 0 || add->input(0) == add->input(1))
      continue;
    Value* bias = add->input(0) == product ? add->input(1) : add->input(0);
    const int64_t n = weight_columns(*mm);
    if (!bias || n < 0 || !bias->has_shape || bias->shape.size() != 1 ||
        bias->shape[0].value != n || !is_floating(bias->dtype) ||
        bias->dtype != mm->input(1)->dtype)
      continue;
    Value* pre = add->output(0);
    if (!pre) continue;
    // The activation: the one Relu/Gelu reading the sum (other readers read output 1;
    // backward's recompute copy of the activation is such a reader).
    Node* act = nullptr;
    for (Node* c : pre->consumers) {
      if (activation_of(*c).empty() || c->checkpoint_region >= 0 || c->recomputes) continue;
      if (act) {  // two activations of one sum: fuse neither
        act = nullptr;
        break;
      }
      act = c;
    }
    const bool pre_read_elsewhere =
        kept.count(pre) || std::any_of(pre->consumers.begin(), pre->consumers.end(),
                                       [&](Node* c) { return c != act && !is_shape_read(*c); });
    std::vector<Value*> outputs;
    if (act) {
      outputs.push_back(act->output(0));
      if (pre_read_elsewhere) outputs.push_back(pre);
    } else {
      outputs.push_back(pre);
    }
    const std::string activation = act ? activation_of(*act) : "";
    // The product, the sum and the activation all have the fused output's shape.
    for (Value* v : {product, pre})
      for (Node* c : v->consumers)
        if (is_shape_read(*c) && !(v == pre && pre_read_elsewhere)) c->inputs[0] = outputs[0];
    std::vector<Node*> gone = {add};
    if (act) gone.push_back(act);
    // Recompute copies repeat the fused node from now on (it names their source location).
    // Only copies: a reader that is no copy (recomputes null, as act is without an
    // activation) stays itself, or it would take the product's random stream.
    for (Node* c : pre->consumers)
      if (c->recomputes && (c->recomputes == act || c->recomputes == add)) c->recomputes = mm;
    graph.remove_nodes(gone);
    removed.insert(gone.begin(), gone.end());
    // The product node becomes the fused node, keeping its place in the order, its name (which
    // error messages quote) and its source location.
    Node* f = mm;
    product->producer = nullptr;
    f->op_type = "FusedMatMulBias";
    f->domain = kOwnDomain;
    f->def = def;
    f->inputs.push_back(bias);
    f->outputs = outputs;
    for (Value* out : outputs) out->producer = f;
    for (auto it = f->attrs.begin(); it != f->attrs.end();)
      it = it->first == "transA" || it->first == "transB" || it->first == "alpha"
               ? std::next(it)
               : f->attrs.erase(it);
    if (act) f->attrs["activation"] = Attribute::make_string(activation);
    fused.push_back(f);
  }
  if (!fused.empty()) {
    graph.rebuild_consumers();
    graph.topological_sort();
  }
  return fused;
}

}  // namespace ortmodule
