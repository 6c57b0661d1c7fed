#include "passes/linear_cross_entropy_fusion.h"

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <string>
#include <unordered_set>
#include <vector>

#include "ir/dtype.h"
#include "ops/op_table.h"
#include "passes/constant_value.h"

namespace ortmodule {
namespace {

bool is_op(const Node* n, const char* op) { return n && n->op_type == op && n->domain.empty(); }
bool is_ms(const Node* n, const char* op) {
  return n && n->op_type == op && n->domain == "com.microsoft";
}

bool is_kept(const Graph& g, const Value* v, const std::vector<Value*>& keep) {
  const auto& outs = g.outputs();
  return std::find(outs.begin(), outs.end(), v) != outs.end() ||
         std::find(keep.begin(), keep.end(), v) != keep.end();
}

// v is read by `reader` alone and is neither a graph output nor kept.
bool private_to(const Graph& g, const Value* v, const Node* reader,
                const std::vector<Value*>& keep) {
  return v && v->consumers.size() == 1 && v->consumers[0] == reader && !is_kept(g, v, keep);
}

bool plain(const Node* n) { return n->checkpoint_region < 0 && !n->recomputes; }

// Static dims of a parameter, input or constant (fed values keep their exported shapes).
bool static_dims(const Value* v, std::vector<int64_t>& dims) {
  if (const Tensor* t = constant_tensor(v)) {
    dims = t->shape();
    return true;
  }
  if (!v || v->producer || !v->has_shape) return false;
  dims.clear();
  for (const Dim& d : v->shape) {
    if (d.value < 0) return false;
    dims.push_back(d.value);
  }
  return true;
}

bool is_float(DType t) { return t == DType::Float32 || t == DType::Float64; }

// Ops whose output 0 has the rank of their input 0.
bool keeps_rank(const Node* n) {
  static const char* const ops[] = {
      "Identity", "Cast",    "Relu",     "Gelu",       "Tanh",
      "Sigmoid",  "Erf",     "Neg",      "Exp",        "Log",
      "Sqrt",     "Abs",     "Softplus", "LeakyRelu",  "Elu",
      "Selu",     "Celu",    "Softsign", "HardSwish",  "HardSigmoid",
      "Mish",     "Dropout", "Softmax",  "LogSoftmax", "LayerNormalization",
      "Clip"};
  if (!n) return false;
  if (n->domain.empty())
    return std::any_of(std::begin(ops), std::end(ops),
                       [&](const char* op) { return n->op_type == op; });
  return (n->domain == "com.microsoft" &&
          (n->op_type == "Gelu" || n->op_type == "FastGelu" || n->op_type == "BiasGelu" ||
           n->op_type == "SimplifiedLayerNormalization")) ||
         (n->domain == "ai.ortmodule" && n->op_type == "FusedMatMulBias");
}

// The rank of v where the graph tells it (its recorded shape, or its producers: a Reshape to a
// constant shape, Flatten, the row Gather of label sparsity, products by a matrix, element-wise
// ops), else -1.
int64_t rank_of(const Value* v, int depth = 0) {
  if (!v || depth > 32) return -1;
  if (v->has_shape) return static_cast<int64_t>(v->shape.size());
  if (const Tensor* t = constant_tensor(v)) return t->rank();
  const Node* p = v->producer;
  if (!p) return -1;
  if (is_op(p, "Reshape")) {
    const Tensor* target = constant_tensor(p->input(1));
    return target && target->rank() == 1 ? target->numel() : -1;
  }
  if (is_op(p, "Flatten")) return 2;
  if (is_op(p, "Gemm")) return 2;
  if (is_op(p, "Gather") && p->attr_int("axis", 0) == 0 && p->input(1)) {
    const int64_t data = rank_of(p->input(0), depth + 1), index = rank_of(p->input(1), depth + 1);
    return data >= 1 && index >= 0 ? data - 1 + index : -1;
  }
  if (is_op(p, "MatMul") || is_ms(p, "FusedMatMul")) {
    return rank_of(p->input(1), depth + 1) == 2 ? rank_of(p->input(0), depth + 1) : -1;
  }
  if (p->domain.empty() && p->num_inputs() == 2 &&
      (p->op_type == "Add" || p->op_type == "Sub" || p->op_type == "Mul" || p->op_type == "Div")) {
    const int64_t a = rank_of(p->input(0), depth + 1), b = rank_of(p->input(1), depth + 1);
    return a >= 0 && b >= 0 ? std::max(a, b) : -1;
  }
  if (keeps_rank(p)) return rank_of(p->input(0), depth + 1);
  return -1;
}

// What a head's product reads: x, the weight as stored, and whether op(W) transposes it.
struct Head {
  Value* x = nullptr;
  Value* weight = nullptr;
  Value* bias = nullptr;
  bool trans_w = false;
  int64_t classes = -1;
  Node* transpose = nullptr;  // the weight's Transpose the product read, if any
  std::vector<Node*> nodes;   // product .. the node before the loss
};

// A product of x by a 2-D weight of known shape, read in its stored layout.
bool match_product(Node* n, Head& head) {
  bool trans = false;
  if (is_op(n, "MatMul") && n->num_inputs() == 2) {
    trans = false;
  } else if (is_ms(n, "FusedMatMul") && n->num_inputs() == 2) {
    if (n->attr_int("transA", 0) || n->attr_int("transBatchA", 0) ||
        n->attr_int("transBatchB", 0) || n->attr_float("alpha", 1.0) != 1.0)
      return false;
    trans = n->attr_int("transB", 0) != 0;
  } else if (is_op(n, "Gemm")) {
    if (n->attr_int("transA", 0) || n->attr_float("alpha", 1.0) != 1.0 ||
        (n->input(2) && n->attr_float("beta", 1.0) != 1.0))
      return false;
    trans = n->attr_int("transB", 0) != 0;
    head.bias = n->input(2);
  } else {
    return false;
  }
  Value* w = n->input(1);
  // MatMul(x, Transpose(W)) reads W itself (the Transpose stays for any other reader).
  if (Node* t = w ? w->producer : nullptr;
      is_op(t, "Transpose") && t->input(0) &&
      t->attr_ints("perm", {1, 0}) == std::vector<int64_t>{1, 0}) {
    std::vector<int64_t> dims;
    if (static_dims(t->input(0), dims) && dims.size() == 2) {
      w = t->input(0);
      trans = !trans;
      head.transpose = t;
    }
  }
  std::vector<int64_t> dims;
  if (!w || !static_dims(w, dims) || dims.size() != 2) return false;
  head.x = n->input(0);
  head.weight = w;
  head.trans_w = trans;
  head.classes = trans ? dims[0] : dims[1];
  const int64_t hidden = trans ? dims[1] : dims[0];
  if (!head.x ||
      (head.x->has_shape && (head.x->shape.empty() || (head.x->shape.back().value >= 0 &&
                                                       head.x->shape.back().value != hidden))))
    return false;
  if (is_op(n, "Gemm") && rank_of(head.x) != 2) return false;
  return is_float(n->output(0)->dtype) && head.x->dtype == n->output(0)->dtype &&
         w->dtype == n->output(0)->dtype;
}

// A [V] bias of the scores' dtype.
bool is_bias(const Value* b, int64_t classes, DType dtype) {
  std::vector<int64_t> dims;
  return b && static_dims(b, dims) && dims == std::vector<int64_t>{classes} && b->dtype == dtype;
}

// Walks up from the loss's scores to the head's product; true when the chain matches and
// every value in it is read by the next node alone.
bool match_head(const Graph& g, Value* scores, const std::vector<Value*>& keep, const Node* loss,
                Head& head) {
  const Node* reader = loss;
  Value* v = scores;
  bool reshaped = false;
  for (int depth = 0; depth < 8; ++depth) {
    Node* p = v->producer;
    if (!p || !plain(p) || !private_to(g, v, reader, keep) || p->output(0) != v) return false;
    head.nodes.insert(head.nodes.begin(), p);
    if (is_op(p, "Identity") ||
        (is_op(p, "Cast") && p->input(0) && p->input(0)->dtype == v->dtype)) {
      reader = p;
      v = p->input(0);
      continue;
    }
    if (is_op(p, "Reshape") && !reshaped) {
      const Tensor* target = constant_tensor(p->input(1));
      if (!target || target->rank() != 1 || target->numel() != 2) return false;
      head.classes = target->int_at(1);  // checked against the weight below
      reshaped = true;
      reader = p;
      v = p->input(0);
      continue;
    }
    const int64_t reshaped_to = reshaped ? head.classes : -1;
    if (is_op(p, "Add") && p->num_inputs() == 2) {
      // Add(product, bias) in either order.
      for (int side = 0; side < 2; ++side) {
        Value* prod = p->input(side);
        Value* bias = p->input(1 - side);
        Node* pp = prod ? prod->producer : nullptr;
        if (!pp || !plain(pp) || !private_to(g, prod, p, keep) || pp->output(0) != prod) continue;
        Head h;
        if (!match_product(pp, h) || h.bias || !is_bias(bias, h.classes, prod->dtype)) continue;
        if (reshaped_to >= 0 && reshaped_to != h.classes) return false;
        if (!reshaped && rank_of(h.x) != 2) return false;
        h.bias = bias;
        h.nodes = head.nodes;
        h.nodes.insert(h.nodes.begin(), pp);
        head = h;
        return true;
      }
      return false;
    }
    Head h;
    if (!match_product(p, h)) return false;
    if (h.bias && !is_bias(h.bias, h.classes, v->dtype)) return false;
    if (reshaped_to >= 0 && reshaped_to != h.classes) return false;
    if (!reshaped && rank_of(h.x) != 2) return false;  // SoftmaxCrossEntropyLoss's axis 1
    h.nodes = head.nodes;
    head = h;
    return true;
  }
  return false;
}

}  // namespace

namespace {
// The rows of a loss's labels where the graph knows them, else -1.
int64_t known_rows(const Value* labels) {
  if (!labels->has_shape) return -1;
  int64_t rows = 1;
  for (const Dim& d : labels->shape) {
    if (d.value < 0) return -1;
    rows *= d.value;
  }
  return rows;
}
}  // namespace

std::vector<std::string> fuse_linear_cross_entropy(Graph& graph, const std::vector<Value*>& keep,
                                                   int64_t min_logits_bytes) {
  std::vector<std::string> notes;
  const OpDef* def = find_op("ai.ortmodule", "FusedLinearCrossEntropy", graph.opset_version);
  if (!def) return notes;
  graph.rebuild_consumers();
  std::vector<Node*> transposes;
  for (Node* loss : graph.nodes()) {
    if (!is_op(loss, "SoftmaxCrossEntropyLoss") || !plain(loss)) continue;
    Value* scores = loss->input(0);
    Value* labels = loss->input(1);
    if (!scores || !labels || labels->dtype != DType::Int64 || loss->input(2)) continue;
    if (loss->output(1) &&
        (!loss->output(1)->consumers.empty() || is_kept(graph, loss->output(1), keep)))
      continue;
    const std::string reduction = loss->attr_string("reduction", "mean");
    if (reduction != "mean" && reduction != "sum" && reduction != "none") continue;
    Head head;
    if (!match_head(graph, scores, keep, loss, head)) continue;
    if (min_logits_bytes > 0) {
      const int64_t rows = known_rows(labels);
      if (rows < 0 ||
          rows * head.classes * static_cast<int64_t>(dtype_size(scores->dtype)) < min_logits_bytes)
        continue;
    }

    const std::string what = loss->describe();
    Value* out = loss->output(0);
    std::vector<Node*> removed = head.nodes;
    removed.push_back(loss);
    graph.remove_nodes(removed);
    Value* lse = graph.new_value(loss->name + "/lse");
    lse->dtype = out->dtype;
    std::vector<Value*> inputs = {head.x, head.weight, labels};
    if (head.bias) inputs.push_back(head.bias);
    Node* fused = graph.add_node("FusedLinearCrossEntropy", "ai.ortmodule", inputs, {out, lse},
                                 loss->name + "/fused_linear");
    fused->def = def;
    fused->source = loss->source;
    fused->attrs["trans_w"] = Attribute::make_int(head.trans_w ? 1 : 0);
    fused->attrs["reduction"] = Attribute::make_string(reduction);
    if (loss->has_attr("ignore_index"))
      fused->attrs["ignore_index"] = loss->attrs.at("ignore_index");
    if (head.transpose) transposes.push_back(head.transpose);
    notes.push_back("linear cross-entropy fusion: " + what + " and its " +
                    std::to_string(head.nodes.size()) +
                    " head node(s) computed in row blocks by one FusedLinearCrossEntropy over " +
                    std::to_string(head.classes) + " classes (the [rows, " +
                    std::to_string(head.classes) + "] logits are never stored)");
  }
  if (!notes.empty()) {
    // The weights' Transposes left without readers.
    graph.rebuild_consumers();
    std::vector<Node*> dead;
    for (Node* n : graph.nodes())
      if (std::count(transposes.begin(), transposes.end(), n) && n->output(0)->consumers.empty() &&
          !is_kept(graph, n->output(0), keep))
        dead.push_back(n);
    graph.remove_nodes(dead);
    graph.topological_sort();
  }
  return notes;
}

}  // namespace ortmodule
