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

// v, or for a value of unknown shape that a Cast made (a weight or bias cast to 16 bits under
// autocast), the value it cast (of the same shape).
const Value* with_shape(const Value* v) {
  if (v && !v->has_shape && v->producer && v->producer->domain.empty() &&
      v->producer->op_type == "Cast" && v->producer->input(0))
    return v->producer->input(0);
  return v;
}

// N of a product whose second operand is a [K, N] (or [N, K] with transB) matrix of known
// shape, else -1.
int64_t weight_columns(const Node& product) {
  const Value* b = with_shape(product.input(1));
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

// c reads v for its dtype only: CastLike's `target_type` input (a Cast's gradient rule casts
// back to the type of the value the Cast read).
bool is_type_read(const Node& c, const Value* v) {
  return c.domain.empty() && c.op_type == "CastLike" && c.inputs.size() == 2 && c.inputs[1] == v &&
         c.inputs[0] != v;
}

// The one reader of v that is not a Shape (gradient rules read the shapes of the values they
// sum to) or a CastLike reading v's dtype, or nullptr.
Node* only_data_reader(const Value* v) {
  Node* reader = nullptr;
  for (Node* c : v->consumers) {
    if (is_shape_read(*c) || is_type_read(*c, v)) continue;
    if (reader) return nullptr;
    reader = c;
  }
  return reader;
}

bool is_cast_to(const Node* n, DType to) {
  return n && n->domain.empty() && n->op_type == "Cast" && n->inputs.size() == 1 &&
         n->outputs.size() == 1 && n->checkpoint_region < 0 && !n->recomputes &&
         n->attr_int("to", -1) == static_cast<int64_t>(to);
}

// The 16-bit value of dtype `low` that v widens (v = Cast(value, to=float32)), or nullptr.
Value* widened_from(const Value* v, DType low) {
  const Node* cast = v ? v->producer : nullptr;
  if (!is_cast_to(cast, DType::Float32) || !cast->input(0) || cast->input(0)->dtype != low)
    return nullptr;
  return cast->input(0);
}

// Shape readers of `from` read `to` instead (a value of the same shape), and CastLike nodes
// that read `from` for its dtype become Casts to that dtype.
void move_shape_reads(Value* from, Value* to, const OpDef* cast) {
  for (Node* c : from->consumers) {
    if (is_shape_read(*c)) {
      c->inputs[0] = to;
    } else if (is_type_read(*c, from)) {
      c->op_type = "Cast";
      c->def = cast;
      c->inputs.pop_back();
      c->attrs.clear();
      if (from->dtype == DType::Undefined)
        throw std::logic_error("matmul bias fusion: the dtype of '" + from->name + "' is unknown");
      c->attrs["to"] = Attribute::make_int(static_cast<int64_t>(from->dtype));
    }
  }
}

// The product node mm becomes the fused node, keeping its place in the order, its name (which
// error messages quote) and its source location.
Node* become_fused(Node* mm, const OpDef* def, Value* bias, const std::vector<Value*>& outputs,
                   const std::string& activation) {
  mm->output(0)->producer = nullptr;
  mm->op_type = "FusedMatMulBias";
  mm->domain = kOwnDomain;
  mm->def = def;
  mm->inputs.push_back(bias);
  mm->outputs = outputs;
  for (Value* out : outputs) out->producer = mm;
  for (auto it = mm->attrs.begin(); it != mm->attrs.end();)
    it = it->first == "transA" || it->first == "transB" || it->first == "alpha"
             ? std::next(it)
             : mm->attrs.erase(it);
  if (!activation.empty()) mm->attrs["activation"] = Attribute::make_string(activation);
  return mm;
}

// The one Cast of v to `low` among v's data readers, or nullptr; other data readers are
// allowed only where `others_allowed`.
Node* rounding_reader(const Value* v, DType low, bool others_allowed) {
  Node* round = nullptr;
  for (Node* c : v->consumers) {
    if (is_shape_read(*c) || is_type_read(*c, v)) continue;
    if (is_cast_to(c, low) && !round) {
      round = c;
    } else if (!others_allowed) {
      return nullptr;
    }
  }
  return round;
}

// 16-bit products (autocast: the product takes float16/bfloat16 operands, every other op
// computes in float32 between Casts, passes/low_precision.h): the product, the widening of
// its result, the float32 Add of the widened 16-bit bias and the rounding of the sum, plus
// optionally the activation between its own widening and rounding, become one
// FusedMatMulBias over the 16-bit operands. Its sum is rounded once (as eager's addmm rounds
// a Linear's output) and the activation reads the rounded sum, as eager's activation does.
std::vector<Node*> fuse_low_precision(Graph& graph, const std::unordered_set<const Value*>& kept,
                                      const OpDef* def) {
  const OpDef* cast = find_op("", "Cast", graph.opset_version);
  graph.rebuild_consumers();
  std::unordered_set<const Node*> removed;
  std::vector<Node*> fused;
  for (Node* mm : graph.nodes()) {
    if (removed.count(mm) || !is_product(*mm) || mm->checkpoint_region >= 0) continue;
    Value* product = mm->output(0);
    if (!product || kept.count(product) || !dtype_is_low_precision(product->dtype)) continue;
    const DType low = product->dtype;
    Node* widen = only_data_reader(product);
    if (!is_cast_to(widen, DType::Float32) || kept.count(widen->output(0))) continue;
    Node* add = only_data_reader(widen->output(0));
    if (!add || !add->domain.empty() || add->op_type != "Add" || add->inputs.size() != 2 ||
        add->outputs.size() != 1 || add->checkpoint_region >= 0 || add->recomputes ||
        add->input(0) == add->input(1) || !add->output(0) || kept.count(add->output(0)))
      continue;
    Value* bias =
        widened_from(add->input(0) == widen->output(0) ? add->input(1) : add->input(0), low);
    const int64_t n = weight_columns(*mm);
    const Value* bias_shaped = with_shape(bias);
    if (!bias || n < 0 || !bias_shaped->has_shape || bias_shaped->shape.size() != 1 ||
        bias_shaped->shape[0].value != n)
      continue;
    Node* round = only_data_reader(add->output(0));
    if (!is_cast_to(round, low)) continue;
    Value* pre = round->output(0);
    // The activation: pre widened (one Cast, which a gradient rule may read too), one
    // Relu/Gelu reading that, and the rounding of the activation as its only reader (for
    // Relu, whose float32 result is its rounding exactly, other readers such as ReluGrad
    // read the rounding widened).
    Node *act = nullptr, *act_widen = nullptr, *act_round = nullptr;
    for (Node* c : pre->consumers) {
      if (!is_cast_to(c, DType::Float32)) continue;
      for (Node* a : c->output(0)->consumers) {
        if (activation_of(*a).empty() || a->checkpoint_region >= 0 || a->recomputes) continue;
        Node* r = a->output(0) && !kept.count(a->output(0))
                      ? rounding_reader(a->output(0), low, a->op_type == "Relu")
                      : nullptr;
        if (!r) continue;
        if (act) {  // two activations of one sum: fuse neither
          act = nullptr;
          break;
        }
        act = a;
        act_widen = c;
        act_round = r;
      }
      if (act) break;
    }
    const auto data_readers = [](const Value* v, const Node* except) {
      return std::count_if(v->consumers.begin(), v->consumers.end(), [&](Node* c) {
        return c != except && !is_shape_read(*c) && !is_type_read(*c, v);
      });
    };
    const bool widen_read_elsewhere = act && data_readers(act_widen->output(0), act) > 0;
    const bool pre_read_elsewhere =
        kept.count(pre) || !act || widen_read_elsewhere || data_readers(pre, act_widen) > 0;
    std::vector<Value*> outputs;
    if (act) outputs.push_back(act_round->output(0));
    if (pre_read_elsewhere) outputs.push_back(pre);
    for (Value* v : {product, widen->output(0), add->output(0)})
      move_shape_reads(v, outputs[0], cast);
    if (!pre_read_elsewhere) move_shape_reads(pre, outputs[0], cast);
    std::vector<Node*> gone = {widen, add, round};
    // Relu's float32 output, still read (ReluGrad): the fused 16-bit output widened.
    const bool widen_activation = act && data_readers(act->output(0), act_round) > 0;
    const std::string activation = act ? activation_of(*act) : "";
    if (act) {
      if (!widen_activation) {
        move_shape_reads(act->output(0), outputs[0], cast);
        gone.push_back(act);
      }
      gone.push_back(act_round);
      if (!widen_read_elsewhere) {
        move_shape_reads(act_widen->output(0), outputs[0], cast);
        gone.push_back(act_widen);
      }
    }
    // Recompute copies of the removed nodes repeat the fused node from now on.
    for (Value* v : {pre, act_widen ? act_widen->output(0) : pre})
      for (Node* c : v->consumers)
        if (c->recomputes && std::find(gone.begin(), gone.end(), c->recomputes) != gone.end())
          c->recomputes = mm;
    graph.remove_nodes(gone);
    removed.insert(gone.begin(), gone.end());
    if (widen_activation) {
      // The Relu node itself becomes that widening (a forward node still, so that
      // recompute_widening_casts can move it to backward).
      act->op_type = "Cast";
      act->def = cast;
      act->inputs = {act_round->output(0)};
      act->attrs.clear();
      act->attrs["to"] = Attribute::make_int(static_cast<int64_t>(DType::Float32));
    }
    fused.push_back(become_fused(mm, def, bias, outputs, activation));
  }
  if (!fused.empty()) {
    graph.rebuild_consumers();
    graph.topological_sort();
  }
  return fused;
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
    fused.push_back(become_fused(mm, def, bias, outputs, activation));
  }
  if (!fused.empty()) {
    graph.rebuild_consumers();
    graph.topological_sort();
  }
  for (Node* f : fuse_low_precision(graph, kept, def)) fused.push_back(f);
  return fused;
}

}  // namespace ortmodule
