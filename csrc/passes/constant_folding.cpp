#include "passes/constant_folding.h"

#include <algorithm>
#include <cstdint>
#include <exception>
#include <memory>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "ops/op_table.h"

namespace ortmodule {
namespace {

// Whether running `n` once at build time gives what every call would: a deterministic op
// with a CPU kernel and no effect besides its outputs.
bool foldable_op(const Node& n) {
  return n.def && n.def->cpu && n.def->shape && !n.def->random && !n.def->host_call &&
         n.def->state_writeback.empty() && !n.outputs.empty();
}

bool is_shape_query(const Node& n) {
  return n.domain.empty() && (n.op_type == "Shape" || n.op_type == "Size");
}

// A stand-in for a value of known shape whose data Shape and Size never read.
Tensor shape_only(const Value* v) {
  Shape dims;
  for (const Dim& d : v->shape) dims.push_back(d.value);
  return Tensor(std::make_shared<Storage>(), v->dtype, dims);
}

bool fully_static(const Value* v) {
  if (!v->has_shape) return false;
  for (const Dim& d : v->shape)
    if (d.value < 0) return false;
  return true;
}

// Runs `n` on `inputs` with its CPU kernel; false (and no outputs) when the node cannot run
// now (its shape rule or kernel refuses: the error then surfaces when the graph runs, as
// without folding) or an output would be larger than max_elements.
bool evaluate(const Node& n, const std::vector<const Tensor*>& inputs, std::vector<Tensor>& out,
              int64_t max_elements = kMaxFoldedElements) {
  OpContext ctx{n, inputs, {}, 0};
  try {
    std::vector<OutputInfo> infos = n.def->shape(ctx);
    if (infos.size() < n.outputs.size()) return false;
    ctx.outputs.resize(n.outputs.size());
    for (size_t i = 0; i < n.outputs.size(); ++i) {
      const OutputInfo& info = infos[i];
      if (info.alias_of == -2) continue;  // the kernel provides the output
      for (int64_t d : info.shape)
        if (d < 0) return false;
      if (shape_numel(info.shape) > max_elements) return false;
      if (info.alias_of >= 0) {
        if (static_cast<size_t>(info.alias_of) >= inputs.size() || !inputs[info.alias_of])
          return false;
        const Tensor& src = *inputs[info.alias_of];
        if (src.numel() != shape_numel(info.shape)) return false;
        ctx.outputs[i] = src.view(info.shape);
      } else {
        ctx.outputs[i] = Tensor::empty(info.dtype, info.shape);
      }
    }
    n.def->cpu(ctx);
  } catch (const std::exception&) {
    return false;
  }
  for (size_t i = 0; i < n.outputs.size(); ++i) {
    if (!n.outputs[i]) continue;
    if (!ctx.outputs[i].defined() || ctx.outputs[i].numel() > max_elements) return false;
  }
  out = std::move(ctx.outputs);
  return true;
}

}  // namespace

Tensor evaluate_constant(const Value* v, int64_t max_elements) {
  // The nodes v depends on, producers before readers (a depth-first post-order).
  std::vector<const Node*> order;
  std::unordered_set<const Node*> seen;
  std::vector<std::pair<const Node*, size_t>> stack;
  auto visit = [&](const Value* x) {
    if (!x || x->initializer.defined()) return true;
    if (!x->producer || !foldable_op(*x->producer)) return false;
    if (seen.insert(x->producer).second) stack.push_back({x->producer, 0});
    return true;
  };
  if (!visit(v)) return Tensor();
  while (!stack.empty()) {
    auto& [n, next] = stack.back();
    if (next < n->inputs.size()) {
      if (!visit(n->inputs[next++])) return Tensor();
      continue;
    }
    order.push_back(n);
    stack.pop_back();
  }
  // Each computed value is released once its last reader in `order` has run.
  std::unordered_map<const Value*, int> reads;
  for (const Node* n : order)
    for (const Value* in : n->inputs)
      if (in && !in->initializer.defined()) ++reads[in];
  std::unordered_map<const Value*, Tensor> known;
  for (const Node* n : order) {
    std::vector<const Tensor*> inputs;
    for (const Value* in : n->inputs)
      inputs.push_back(!in ? nullptr : in->initializer.defined() ? &in->initializer : &known[in]);
    std::vector<Tensor> outputs;
    if (!evaluate(*n, inputs, outputs, max_elements)) return Tensor();
    for (const Value* in : n->inputs)
      if (in && !in->initializer.defined() && --reads[in] == 0 && in != v) known.erase(in);
    for (size_t i = 0; i < n->outputs.size(); ++i)
      if (n->outputs[i] && (reads.count(n->outputs[i]) || n->outputs[i] == v))
        known[n->outputs[i]] = std::move(outputs[i]);
  }
  if (v->initializer.defined()) return v->initializer;
  auto it = known.find(v);
  return it == known.end() ? Tensor() : it->second;
}

ConstantFoldingResult fold_constants(Graph& graph,
                                     const std::unordered_set<const Value*>& static_shape_values,
                                     const std::vector<Value*>& keep,
                                     const std::unordered_set<const Node*>& forward) {
  ConstantFoldingResult result;
  std::unordered_set<const Value*> kept(keep.begin(), keep.end());
  kept.insert(graph.outputs().begin(), graph.outputs().end());
  std::unordered_map<const Value*, Tensor> known;  // values computed at build time
  auto constant = [&](const Value* v) -> const Tensor* {
    if (!v) return nullptr;
    if (v->initializer.defined()) return &v->initializer;
    auto it = known.find(v);
    return it == known.end() ? nullptr : &it->second;
  };
  std::vector<Node*> folded;
  for (Node* n : graph.nodes()) {
    if (!foldable_op(*n)) continue;
    bool outputs_free = true;
    for (const Value* out : n->outputs)
      if (out && kept.count(out)) outputs_free = false;
    if (!outputs_free) continue;
    std::vector<Tensor> stand_ins;
    stand_ins.reserve(n->inputs.size());  // inputs points into it
    std::vector<const Tensor*> inputs;
    bool all_known = true;
    for (const Value* in : n->inputs) {
      const Tensor* t = constant(in);
      if (!t && in && is_shape_query(*n) && static_shape_values.count(in) && fully_static(in)) {
        stand_ins.push_back(shape_only(in));
        t = &stand_ins.back();
      }
      if (in && !t) all_known = false;
      inputs.push_back(t);
    }
    if (!all_known) continue;
    std::vector<Tensor> outputs;
    if (!evaluate(*n, inputs, outputs)) continue;
    const bool is_constant_node = n->domain.empty() && n->op_type == "Constant";
    for (size_t i = 0; i < n->outputs.size(); ++i)
      if (n->outputs[i]) known[n->outputs[i]] = std::move(outputs[i]);
    // A Constant node already is a constant; it goes only if folding leaves it unread.
    if (is_constant_node) continue;
    folded.push_back(n);
    ++(forward.count(n) ? result.folded_forward : result.folded_backward);
  }
  for (Node* n : folded) {
    for (Value* out : n->outputs) {
      if (!out) continue;
      Tensor t = std::move(known[out]);
      t.storage()->writable = false;
      out->dtype = t.dtype();
      out->has_shape = true;
      out->shape.clear();
      for (int64_t d : t.shape()) out->shape.push_back(Dim{d, ""});
      out->initializer = std::move(t);
    }
  }
  graph.remove_nodes(folded);
  // Dead nodes, readers first so that a chain goes in one sweep.
  std::vector<Node*> dead;
  std::unordered_set<const Node*> dropped;
  const std::vector<Node*> order = graph.nodes();
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    Node* n = *it;
    if (!n->def || n->def->random || n->def->host_call || !n->def->state_writeback.empty())
      continue;
    bool read = false;
    for (const Value* out : n->outputs) {
      if (!out) continue;
      if (kept.count(out)) read = true;
      for (const Node* c : out->consumers) read = read || !dropped.count(c);
    }
    if (read) continue;
    dead.push_back(n);
    dropped.insert(n);
  }
  result.removed_dead = static_cast<int>(dead.size());
  graph.remove_nodes(dead);
  return result;
}

}  // namespace ortmodule
