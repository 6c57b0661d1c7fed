#include "passes/elementwise_fusion.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "kernels/cpu/fused_elementwise.h"
#include "ops/op_table.h"

namespace ortmodule {
namespace {

using Op = ElementwiseOpcode;

// The opcode of a fusible op of the default or com.microsoft domain (kCount: not fusible).
Op opcode_of(const Node& n) {
  static const std::unordered_map<std::string, Op> kDefault = {
      {"Add", Op::kAdd},         {"Sub", Op::kSub},
      {"Mul", Op::kMul},         {"Div", Op::kDiv},
      {"Pow", Op::kPow},         {"Neg", Op::kNeg},
      {"Sqrt", Op::kSqrt},       {"Reciprocal", Op::kReciprocal},
      {"Exp", Op::kExp},         {"Tanh", Op::kTanh},
      {"Sigmoid", Op::kSigmoid}, {"Erf", Op::kErf},
      {"Relu", Op::kRelu},       {"Where", Op::kWhere},
      {"Identity", Op::kCopy},   {"Sum", Op::kAdd}};
  static const std::unordered_map<std::string, Op> kMicrosoft = {
      {"SigmoidGrad", Op::kSigmoidGrad},
      {"TanhGrad", Op::kTanhGrad},
      {"ReluGrad", Op::kReluGrad},
      {"GeluGrad", Op::kGeluGrad},
      {"FastGeluGrad", Op::kGeluTanhGrad}};
  // The engine's own GeluGrad (Gelu's gradient rule) names its form in `approximate`.
  if (n.domain == "ai.ortmodule" && n.op_type == "GeluGrad") {
    const std::string mode = n.attr_string("approximate", "none");
    return mode == "none" ? Op::kGeluGrad : mode == "tanh" ? Op::kGeluTanhGrad : Op::kCount;
  }
  const auto& table = n.domain.empty() ? kDefault : kMicrosoft;
  if (!n.domain.empty() && n.domain != "com.microsoft") return Op::kCount;
  auto it = table.find(n.op_type);
  return it == table.end() ? Op::kCount : it->second;
}

// Ops whose first output has the dtype of their first input (the rest are left unknown
// unless the graph declares them).
bool keeps_input_dtype(const Node& n) {
  static const std::unordered_set<std::string> kOps = {"Add",
                                                       "Sub",
                                                       "Mul",
                                                       "Div",
                                                       "Pow",
                                                       "Neg",
                                                       "Sqrt",
                                                       "Reciprocal",
                                                       "Exp",
                                                       "Log",
                                                       "Tanh",
                                                       "Sigmoid",
                                                       "Erf",
                                                       "Relu",
                                                       "Abs",
                                                       "Sin",
                                                       "Cos",
                                                       "Gelu",
                                                       "MatMul",
                                                       "Gemm",
                                                       "FusedMatMul",
                                                       "FusedMatMulSumToShape",
                                                       "SumToShape",
                                                       "ScalarLike",
                                                       "Reshape",
                                                       "Transpose",
                                                       "Expand",
                                                       "Identity",
                                                       "Squeeze",
                                                       "Unsqueeze",
                                                       "Slice",
                                                       "SliceGrad",
                                                       "Concat",
                                                       "ConcatGrad",
                                                       "Split",
                                                       "Gather",
                                                       "GatherND",
                                                       "Softmax",
                                                       "LogSoftmax",
                                                       "SoftmaxGrad_13",
                                                       "ScaledMaskedSoftmax",
                                                       "ScaledMaskedSoftmaxGrad",
                                                       "LayerNormalization",
                                                       "LayerNormalizationGrad",
                                                       "ReduceMean",
                                                       "ReduceSum",
                                                       "ReduceGrad",
                                                       "Sum",
                                                       "SigmoidGrad",
                                                       "TanhGrad",
                                                       "ReluGrad",
                                                       "GeluGrad",
                                                       "StopGradient"};
  return kOps.count(n.op_type) != 0;
}

// Dtypes of the values, from the graph's declarations, constants and the rules above.
std::unordered_map<const Value*, DType> infer_dtypes(const Graph& g) {
  static const std::unordered_set<std::string> kBoolOps = {
      "Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual", "And",
      "Or",    "Not",  "Xor",         "IsNaN",   "IsInf"};
  std::unordered_map<const Value*, DType> dtype;
  auto of = [&](const Value* v) {
    if (!v) return DType::Undefined;
    if (v->dtype != DType::Undefined) return v->dtype;
    if (v->initializer.defined()) return v->initializer.dtype();
    auto it = dtype.find(v);
    return it == dtype.end() ? DType::Undefined : it->second;
  };
  for (const Node* n : g.nodes()) {
    Value* out = n->output(0);
    if (!out || of(out) != DType::Undefined) continue;
    DType d = DType::Undefined;
    if (n->op_type == "Constant") {
      const Attribute* a = n->attr("value");
      if (a && a->kind == Attribute::Kind::Tensor) d = a->t.dtype();
    } else if (n->op_type == "Cast") {
      d = static_cast<DType>(n->attr_int("to", 0));
    } else if (n->op_type == "CastLike") {
      d = of(n->input(1));
    } else if (n->op_type == "Where") {
      d = of(n->input(1));
    } else if (n->op_type == "Shape" || n->op_type == "Size") {
      d = DType::Int64;
    } else if (kBoolOps.count(n->op_type)) {
      d = DType::Bool;
    } else if (keeps_input_dtype(*n)) {
      d = of(n->input(0));
    }
    dtype[out] = d;
  }
  return dtype;
}

bool is_float(DType d) { return d == DType::Float32 || d == DType::Float64; }

class Fuser {
 public:
  Fuser(Graph& g, const std::vector<Value*>& keep, const std::vector<Value*>& output_grads)
      : g_(g), keep_(keep.begin(), keep.end()), dtype_(infer_dtypes(g)) {
    keep_.insert(g.outputs().begin(), g.outputs().end());
    // Backward: the nodes that depend on an output gradient (as the planner splits them).
    std::unordered_set<const Value*> dependent;
    for (Value* v : output_grads)
      if (v) dependent.insert(v);
    for (Node* n : g.nodes()) {
      bool dep = n->run_in_backward;
      for (Value* in : n->inputs) dep = dep || (in && dependent.count(in));
      if (!dep) continue;
      backward_.insert(n);
      for (Value* out : n->outputs)
        if (out) dependent.insert(out);
    }
  }

  ElementwiseFusionCounts run() {
    ElementwiseFusionCounts counts;
    std::vector<Node*> order = g_.nodes();
    for (auto it = order.rbegin(); it != order.rend(); ++it) {
      Node* root = *it;
      if (removed_.count(root) || !fusible(*root)) continue;
      std::vector<Node*> tree;
      collect(root, &tree);
      // A lone round trip, or one op with a Cast read or written, is worth a node too: one
      // pass instead of two.
      if (tree.size() < 2 && !round_trip_inner(*root) && !narrowing_cast(*root) &&
          !reads_widened(tree))
        continue;
      (backward_.count(root) ? counts.backward_nodes : counts.forward_nodes) +=
          static_cast<int>(tree.size());
      ++counts.fused_nodes;
      replace(root, tree);
    }
    if (counts.fused_nodes) {
      g_.rebuild_consumers();
      g_.topological_sort();
    }
    return counts;
  }

 private:
  DType dtype(const Value* v) const {
    auto it = dtype_.find(v);
    return it == dtype_.end() ? (v ? v->dtype : DType::Undefined) : it->second;
  }

  static bool is_16_bit(DType d) { return d == DType::BFloat16 || d == DType::Float16; }

  // A Cast (or CastLike) of one output whose input may be read, or whose output written, by a
  // tree on `side`'s side of the split in its place. With `recompute_copy`, also backward's
  // recompute copy of a forward Cast (passes/recompute.h): a tree that reads the copy's
  // output reads the forward input it widens, which backward keeps anyway.
  bool cast_joins(const Node* c, const Node* side, bool recompute_copy = false) const {
    if (!c || !c->domain.empty() || c->outputs.size() != 1 || !c->output(0)) return false;
    const size_t arity = c->op_type == "Cast" ? 1 : c->op_type == "CastLike" ? 2 : 0;
    return arity && c->inputs.size() == arity && c->input(0) && c->checkpoint_region < 0 &&
           (!c->recomputes || recompute_copy) && !removed_.count(c) &&
           backward_.count(c) == backward_.count(side);
  }

  // Where leaf v (read by a node of root's tree, and by nothing else) is a Cast to float32 of
  // a 16-bit value: the Cast, whose input the tree then widens as it reads it.
  Node* widening_cast(const Value* v, const Node* root) const {
    Node* c = v ? v->producer : nullptr;
    if (!cast_joins(c, root, /*recompute_copy=*/true) || dtype(v) != DType::Float32 ||
        !is_16_bit(dtype(c->input(0))) || v->consumers.size() != 1 || keep_.count(v))
      return nullptr;
    return c;
  }
  bool reads_widened(const std::vector<Node*>& tree) const {
    std::unordered_set<const Node*> members(tree.begin(), tree.end());
    for (const Node* n : tree)
      for (const Value* v : operands(*n))
        if (v && !(v->producer && members.count(v->producer)) && widening_cast(v, tree.back()))
          return true;
    return false;
  }

  // Where root's float32 result is read only by a Cast (or CastLike) to a 16-bit type: that
  // Cast, whose output the tree then writes, rounded once.
  Node* narrowing_cast(const Node& root) const {
    const Value* y = root.output(0);
    if (!y || dtype(y) != DType::Float32 || y->consumers.size() != 1 || keep_.count(y))
      return nullptr;
    Node* c = y->consumers[0];
    if (!cast_joins(c, &root) || c->input(0) != y || !is_16_bit(dtype(c->output(0))))
      return nullptr;
    return c;
  }

  // Where n is Cast(to float32) (or CastLike to a float32 value: a Cast's gradient) of
  // Cast(to bfloat16 or float16) of a float32 value, and nothing else reads the 16-bit value
  // (the rounding autocast puts between two 16-bit ops that compute in float32), the inner
  // Cast: the pair is one kRound* instruction.
  Node* round_trip_inner(const Node& n) const {
    const size_t arity = n.op_type == "Cast" ? 1 : n.op_type == "CastLike" ? 2 : 0;
    if (!arity || !n.domain.empty() || n.inputs.size() != arity || n.outputs.size() != 1 ||
        !n.output(0) || dtype(n.output(0)) != DType::Float32)
      return nullptr;
    const Value* v = n.input(0);
    if (!v || !v->producer || v->consumers.size() != 1 || keep_.count(v)) return nullptr;
    Node* p = v->producer;
    const DType low = dtype(v);
    if (p->op_type != "Cast" || !p->domain.empty() || p->inputs.size() != 1 ||
        (low != DType::BFloat16 && low != DType::Float16) || !p->input(0) ||
        dtype(p->input(0)) != DType::Float32 || p->checkpoint_region >= 0 || p->recomputes ||
        backward_.count(p) != backward_.count(&n))
      return nullptr;
    return p;
  }

  Op op_of(const Node& n) const {
    if (const Node* inner = round_trip_inner(n))
      return dtype(inner->output(0)) == DType::BFloat16 ? Op::kRoundBFloat16 : Op::kRoundFloat16;
    return opcode_of(n);
  }

  // What n's instruction reads: its inputs, or for a round trip the inner Cast's input.
  const std::vector<Value*>& operands(const Node& n) const {
    const Node* inner = round_trip_inner(n);
    return inner ? inner->inputs : n.inputs;
  }

  bool fusible(const Node& n) const {
    const Op op = op_of(n);
    if (op == Op::kCount || n.checkpoint_region >= 0 || n.recomputes) return false;
    // Sum (of gradient contributions) adds its inputs left to right, as its kernel does.
    const std::vector<Value*>& ins = operands(n);
    const size_t arity = n.op_type == "Sum" ? std::max<size_t>(ins.size(), 1)
                                            : static_cast<size_t>(elementwise_opcode_arity(op));
    if (ins.size() != arity || n.outputs.size() != 1 || !n.output(0)) return false;
    const DType out = dtype(n.output(0));
    if (!is_float(out)) return false;
    for (size_t k = 0; k < arity; ++k) {
      const Value* in = ins[k];
      const DType want = op == Op::kWhere && k == 0 ? DType::Bool : out;
      if (!in || dtype(in) != want) return false;
    }
    return true;
  }

  // Whether the producer of v joins `consumer`'s tree (reader: the node that reads v, the
  // consumer itself or the inner Cast of a round trip).
  bool absorbable(const Value* v, const Node* consumer, const Node* reader) const {
    const Node* p = v->producer;
    return p && fusible(*p) && v->consumers.size() == 1 && v->consumers[0] == reader &&
           !keep_.count(v) && backward_.count(p) == backward_.count(consumer);
  }

  // The tree rooted at n, producers before consumers.
  void collect(Node* n, std::vector<Node*>* tree) const {
    const bool where = op_of(*n) == Op::kWhere;
    const Node* inner = round_trip_inner(*n);
    const std::vector<Value*>& ins = operands(*n);
    for (size_t k = where ? 1 : 0; k < ins.size(); ++k)
      if (absorbable(ins[k], n, inner ? inner : n)) collect(ins[k]->producer, tree);
    tree->push_back(n);
  }

  void replace(Node* root, const std::vector<Node*>& tree) {
    // The round trips' inner Casts, and each node's operands, before the graph changes.
    std::vector<Node*> removed = tree;
    std::unordered_map<const Node*, std::vector<Value*>> reads;
    std::unordered_map<const Node*, Op> ops;
    for (Node* n : tree) {
      if (Node* inner = round_trip_inner(*n)) removed.push_back(inner);
      reads[n] = operands(*n);
      ops[n] = op_of(*n);
    }
    std::vector<Value*> leaves;
    std::unordered_map<const Value*, int64_t> reg, leaf_reg;
    std::unordered_set<const Node*> members(tree.begin(), tree.end());
    // A leaf Cast to float32 of a 16-bit value is read as that value, widened.
    auto leaf = [&](Value* v) {
      auto it = reg.find(v);
      if (it != reg.end()) return it->second;
      Value* stored = v;
      if (Node* c = widening_cast(v, root)) {
        stored = c->inputs[0];
        removed.push_back(c);
      }
      auto known = leaf_reg.find(stored);
      if (known != leaf_reg.end()) return reg[v] = known->second;
      leaves.push_back(stored);
      return reg[v] = leaf_reg[stored] = static_cast<int64_t>(leaves.size()) - 1;
    };
    // Leaves first (their registers precede the instructions'), then one instruction per
    // node in tree order.
    for (Node* n : tree)
      for (Value* in : reads.at(n))
        if (!in->producer || !members.count(in->producer)) leaf(in);
    std::vector<int64_t> program;
    int64_t next = static_cast<int64_t>(leaves.size());  // the register the next instruction writes
    auto emit = [&](Op op, int64_t a, int64_t b, int64_t c) {
      program.insert(program.end(), {static_cast<int64_t>(op), a, b, c});
      return next++;
    };
    for (Node* n : tree) {
      const Op op = ops.at(n);
      std::vector<int64_t> regs;
      for (Value* v : reads.at(n))
        regs.push_back(v->producer && members.count(v->producer) ? reg.at(v) : leaf(v));
      int64_t out = -1;
      if (n->op_type == "Sum") {
        out = regs.size() == 1 ? emit(Op::kCopy, regs[0], -1, -1)
                               : emit(Op::kAdd, regs[0], regs[1], -1);
        for (size_t k = 2; k < regs.size(); ++k) out = emit(Op::kAdd, out, regs[k], -1);
      } else {
        regs.resize(3, -1);
        out = emit(op, regs[0], regs[1], regs[2]);
      }
      reg[n->output(0)] = out;
    }
    // A Cast to 16 bits of the result: the tree writes the Cast's output, rounded once.
    Value* y = root->output(0);
    Node* narrow = narrowing_cast(*root);
    if (narrow) {
      y = narrow->output(0);
      removed.push_back(narrow);
    }
    const std::string name = root->name, source = root->source;
    bool run_in_backward = false;
    for (Node* n : removed) run_in_backward = run_in_backward || n->run_in_backward;
    removed_.insert(removed.begin(), removed.end());
    g_.remove_nodes(removed);
    Node* fused = g_.add_node("FusedElementwise", "ai.ortmodule", leaves, {y}, name + "/fused");
    fused->attrs["program"] = Attribute::make_ints(program);
    if (narrow) fused->attrs["to"] = Attribute::make_int(static_cast<int64_t>(dtype(y)));
    fused->def = find_op("ai.ortmodule", "FusedElementwise", g_.opset_version);
    fused->source = source;
    fused->run_in_backward = run_in_backward;
    if (backward_.count(root)) backward_.insert(fused);
    dtype_[y] = dtype(y);
  }

  Graph& g_;
  std::unordered_set<const Value*> keep_;
  std::unordered_map<const Value*, DType> dtype_;
  std::unordered_set<const Node*> backward_;
  // Nodes already replaced (tree members, round trips' inner Casts, Casts read or written
  // in place by a tree).
  std::unordered_set<const Node*> removed_;
};

}  // namespace

ElementwiseFusionCounts fuse_elementwise(Graph& graph, const std::vector<Value*>& keep,
                                         const std::vector<Value*>& output_grads) {
  if (graph.opset_version < 7) return {};  // legacy broadcasting rules
  if (!find_op("ai.ortmodule", "FusedElementwise", graph.opset_version)) return {};
  graph.rebuild_consumers();
  return Fuser(graph, keep, output_grads).run();
}

}  // namespace ortmodule
