#include "passes/label_sparsity.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <set>
#include <sstream>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "ops/op_table.h"
#include "passes/constant_value.h"

namespace ortmodule {
namespace {

bool is_op(const Node* n, const char* op) { return n && n->op_type == op && n->domain.empty(); }
bool is_ms(const Node* n, const char* op) {
  return n && n->op_type == op && n->domain == "com.microsoft";
}

// Element-wise ops of one data input (any further inputs are constants, checked below).
const std::set<std::string>& unary_ops() {
  static const std::set<std::string> ops = {
      "Identity", "Cast",     "Relu",        "Gelu",      "Tanh",     "Sigmoid",    "Erf", "Neg",
      "Exp",      "Log",      "Sqrt",        "Abs",       "Softplus", "LeakyRelu",  "Elu", "Selu",
      "Celu",     "Softsign", "HardSigmoid", "HardSwish", "Mish",     "Reciprocal", "Clip"};
  return ops;
}
const std::set<std::string>& binary_ops() {
  static const std::set<std::string> ops = {"Add", "Sub", "Mul", "Div", "Pow", "Max", "Min"};
  return ops;
}

// The dims of a value known without running the graph: a constant's, a graph input's
// (parameters keep their exported shapes), through Identity, Cast and a 2-D Transpose.
bool static_dims(const Value* v, std::vector<int64_t>& dims, int depth = 0) {
  if (!v || depth > 4) return false;
  if (const Tensor* t = constant_tensor(v)) {
    dims = t->shape();
    return true;
  }
  const Node* p = v->producer;
  if (!p) {
    if (!v->has_shape) return false;
    dims.clear();
    for (const Dim& d : v->shape) {
      if (d.value < 0) return false;
      dims.push_back(d.value);
    }
    return true;
  }
  if (is_op(p, "Identity") || is_op(p, "Cast")) return static_dims(p->input(0), dims, depth + 1);
  if (is_op(p, "Transpose") && static_dims(p->input(0), dims, depth + 1) && dims.size() == 2) {
    const std::vector<int64_t> perm = p->attr_ints("perm", {1, 0});
    if (perm != std::vector<int64_t>{1, 0}) return false;
    std::swap(dims[0], dims[1]);
    return true;
  }
  return false;
}

// A value every row reads alike: static dims of rank <= 1, or [1, k]. Its last dim (1 for a
// scalar) goes to `last`.
bool row_constant(const Value* v, int64_t& last) {
  std::vector<int64_t> dims;
  if (!static_dims(v, dims) || dims.size() > 2 || (dims.size() == 2 && dims[0] != 1)) return false;
  last = dims.empty() ? 1 : dims.back();
  return true;
}

// The last dim of a broadcast of two last dims (-1: unknown).
int64_t broadcast_last(int64_t a, int64_t b) {
  if (a == 1) return b;
  if (b == 1) return a;
  return a >= 0 ? a : b;
}

// How a row-wise node maps rows: its data inputs (the others are row constants) and the
// last dim of its output 0 given its inputs' last dims.
struct RowStep {
  std::vector<int> data;
  bool reshapes = false;  // Reshape / Flatten: rows keep their order, the leading dims change
};

class Walk {
 public:
  Walk(const Graph& g, const std::vector<Value*>& keep) : graph_(g), keep_(keep) {}

  // The value the rows of v come from through row-wise nodes (v itself when its producer is
  // not one). `rank2`: v is known to be 2-D.
  Value* source_of(Value* v, bool rank2) {
    auto it = source_.find(v);
    if (it != source_.end()) return it->second;
    Value* result = v;
    last_[v] = v->has_shape && !v->shape.empty() ? v->shape.back().value : -1;
    reshaped_[v] = false;
    RowStep step;
    Node* n = v->producer;
    if (n && n->output(0) == v && row_step(n, rank2, step)) {
      Value* common = nullptr;
      bool ok = true, reshaped = step.reshapes;
      for (int i : step.data) {
        Value* s = source_of(n->input(i), rank2 && !step.reshapes);
        if (common && s != common) ok = false;
        common = s;
        reshaped = reshaped || reshaped_[n->input(i)];
      }
      // Two data inputs broadcast against each other only where both keep the source's
      // leading dims.
      if (step.data.size() > 1 && reshaped) ok = false;
      const int64_t last = ok ? output_last(n, step) : -1;
      if (ok && common && (!step.reshapes || last >= 0)) {
        steps_[n] = step;
        result = common;
        last_[v] = last;
        reshaped_[v] = reshaped;
      }
    }
    source_[v] = result;
    return result;
  }

  const RowStep& step_of(const Node* n) const { return steps_.at(n); }

  int64_t last(const Value* v) const {
    auto it = last_.find(v);
    return it == last_.end() ? -1 : it->second;
  }

  // Row-wise nodes between `source` and `v` (v's producer included), in graph order.
  std::vector<Node*> region(Value* v, Value* source) {
    std::unordered_set<Node*> seen;
    std::vector<Value*> stack = {v};
    while (!stack.empty()) {
      Value* u = stack.back();
      stack.pop_back();
      if (u == source || source_[u] != source || !u->producer || !seen.insert(u->producer).second)
        continue;
      for (int i : steps_.at(u->producer).data) stack.push_back(u->producer->input(i));
    }
    std::vector<Node*> nodes;
    for (Node* n : graph_.nodes())
      if (seen.count(n)) nodes.push_back(n);
    return nodes;
  }

  bool row_step(const Node* n, bool rank2, RowStep& step) const {
    if (!n->def || n->def->random || n->def->host_call) return false;
    for (size_t i = 1; i < n->outputs.size(); ++i)
      if (n->outputs[i] && (!n->outputs[i]->consumers.empty() || is_kept(n->outputs[i])))
        return false;
    int64_t side = 0;
    const size_t inputs = n->num_inputs();
    if (n->domain.empty() && unary_ops().count(n->op_type)) {
      for (size_t i = 1; i < inputs; ++i)
        if (n->input(i) && !row_constant(n->input(i), side)) return false;
      step.data = {0};
      return inputs >= 1;
    }
    if (is_ms(n, "Gelu") || is_ms(n, "FastGelu") || is_ms(n, "QuickGelu") || is_ms(n, "BiasGelu")) {
      for (size_t i = 1; i < inputs; ++i)
        if (n->input(i) && !row_constant(n->input(i), side)) return false;
      step.data = {0};
      return inputs >= 1;
    }
    if (n->domain.empty() && binary_ops().count(n->op_type)) {
      if (inputs != 2) return false;
      const bool c0 = row_constant(n->input(0), side), c1 = row_constant(n->input(1), side);
      if (c0 && c1) return false;
      step.data = c1 ? std::vector<int>{0} : c0 ? std::vector<int>{1} : std::vector<int>{0, 1};
      return true;
    }
    std::vector<int64_t> dims;
    if (is_op(n, "MatMul")) {
      step.data = {0};
      return static_dims(n->input(1), dims) && dims.size() == 2;
    }
    if (is_ms(n, "FusedMatMul")) {
      step.data = {0};
      return n->attr_int("transA", 0) == 0 && n->attr_int("transBatchA", 0) == 0 &&
             n->attr_int("transBatchB", 0) == 0 && static_dims(n->input(1), dims) &&
             dims.size() == 2;
    }
    if (is_op(n, "Gemm")) {
      step.data = {0};
      return n->attr_int("transA", 0) == 0 && static_dims(n->input(1), dims) && dims.size() == 2 &&
             (!n->input(2) || row_constant(n->input(2), side));
    }
    if (is_op(n, "LayerNormalization") || is_ms(n, "SimplifiedLayerNormalization")) {
      for (size_t i = 1; i < inputs; ++i)
        if (n->input(i) && !row_constant(n->input(i), side)) return false;
      step.data = {0};
      return n->attr_int("axis", -1) == -1;
    }
    if (is_op(n, "Softmax") || is_op(n, "LogSoftmax")) {
      const int64_t axis = n->attr_int("axis", graph_.opset_version >= 13 ? -1 : 1);
      step.data = {0};
      return axis == -1 || (axis == 1 && rank2);
    }
    if (is_op(n, "Reshape")) {
      const Tensor* target = constant_tensor(n->input(1));
      step.data = {0};
      step.reshapes = true;
      return target && target->rank() == 1 && target->numel() >= 1 &&
             target->int_at(target->numel() - 1) > 0;
    }
    if (is_op(n, "Flatten") && n->attr_int("axis", 1) == -1) {
      step.data = {0};
      step.reshapes = true;
      return true;
    }
    return false;
  }

 private:
  bool is_kept(const Value* v) const {
    const auto& outs = graph_.outputs();
    return std::find(outs.begin(), outs.end(), v) != outs.end() ||
           std::find(keep_.begin(), keep_.end(), v) != keep_.end();
  }

  // The last dim of n's output 0 (-1: unknown) from its inputs' last dims.
  int64_t output_last(const Node* n, const RowStep& step) const {
    std::vector<int64_t> dims;
    int64_t side = 0;
    if (is_op(n, "MatMul") && static_dims(n->input(1), dims)) return dims[1];
    if ((is_ms(n, "FusedMatMul") || is_op(n, "Gemm")) && static_dims(n->input(1), dims))
      return n->attr_int("transB", 0) ? dims[0] : dims[1];
    if (is_op(n, "Reshape")) {
      const Tensor* target = constant_tensor(n->input(1));
      const int64_t want = target->int_at(target->numel() - 1);
      return last(n->input(0)) == want ? want : -1;  // rows keep their order only then
    }
    int64_t result = last(n->input(step.data[0]));
    // A normalization over the last axis: as wide as its scale.
    if ((is_op(n, "LayerNormalization") || is_ms(n, "SimplifiedLayerNormalization")) &&
        row_constant(n->input(1), side) && side > 1)
      result = broadcast_last(result, side);
    for (size_t i = 0; i < n->num_inputs(); ++i) {
      const bool data =
          std::find(step.data.begin(), step.data.end(), static_cast<int>(i)) != step.data.end();
      if (!n->input(i)) continue;
      if (data) {
        result = broadcast_last(result, last(n->input(i)));
      } else if (binary_ops().count(n->op_type) && row_constant(n->input(i), side)) {
        result = broadcast_last(result, side);
      }
    }
    return result;
  }

  const Graph& graph_;
  const std::vector<Value*>& keep_;
  std::unordered_map<const Value*, Value*> source_;
  std::unordered_map<const Value*, int64_t> last_;
  std::unordered_map<const Value*, bool> reshaped_;
  std::unordered_map<const Node*, RowStep> steps_;
};

// The graph input the labels are read from (through Identity, Cast, reshapes, Slice and
// Pad, as a causal language model's shifted labels are), or null.
const Value* label_input(const Graph& g, const Value* v) {
  for (int depth = 0; v && depth < 16; ++depth) {
    const Node* p = v->producer;
    if (!p) {
      const auto& ins = g.inputs();
      return std::find(ins.begin(), ins.end(), v) != ins.end() ? v : nullptr;
    }
    static const std::set<std::string> through = {"Identity", "Cast",      "Reshape", "Flatten",
                                                  "Squeeze",  "Unsqueeze", "Slice",   "Pad"};
    if (!p->domain.empty() || !through.count(p->op_type)) return nullptr;
    v = p->input(0);
  }
  return nullptr;
}

bool is_graph_output_or_kept(const Graph& g, const Value* v, const std::vector<Value*>& keep) {
  const auto& outs = g.outputs();
  return std::find(outs.begin(), outs.end(), v) != outs.end() ||
         std::find(keep.begin(), keep.end(), v) != keep.end();
}

std::string percent(double fraction) {
  std::ostringstream s;
  s << std::lround(fraction * 100) << "%";
  return s.str();
}

Node* add(Graph& g, const char* op, const std::vector<Value*>& inputs, Value* output,
          const std::string& name, const std::string& source) {
  Node* n = g.add_node(op, "", inputs, {output}, name);
  n->def = find_op("", op, g.opset_version);
  n->source = source;
  return n;
}

Value* new_value(Graph& g, const std::string& name, DType dtype) {
  Value* v = g.new_value(name);
  v->dtype = dtype;
  return v;
}

}  // namespace

std::vector<std::string> apply_label_sparsity(Graph& graph, const LabelSparsityOptions& options,
                                              const std::vector<Value*>& keep) {
  std::vector<std::string> notes;
  if (options.mode == "never") return notes;
  for (const char* op : {"Equal", "Not", "NonZero", "Reshape", "Gather", "Flatten"})
    if (!find_op("", op, graph.opset_version) || graph.opset_version < 13) return notes;
  graph.rebuild_consumers();
  int rewritten = 0;
  for (Node* loss : graph.nodes()) {
    if (!is_op(loss, "SoftmaxCrossEntropyLoss") && !is_op(loss, "NegativeLogLikelihoodLoss"))
      continue;
    const std::string what = loss->describe();
    Value* scores = loss->input(0);
    Value* labels = loss->input(1);
    const std::string reduction = loss->attr_string("reduction", "mean");
    if (!scores || !labels || !loss->has_attr("ignore_index") ||
        (reduction != "mean" && reduction != "sum"))
      continue;
    if (loss->output(1) && (!loss->output(1)->consumers.empty() ||
                            is_graph_output_or_kept(graph, loss->output(1), keep)))
      continue;
    // Rank-1 labels (and so 2-D scores): a Reshape to one dim, or an input of rank 1.
    const Value* lv = labels;
    while (is_op(lv->producer, "Identity") || is_op(lv->producer, "Cast"))
      lv = lv->producer->input(0);
    const Node* lp = lv->producer;
    const Tensor* target = is_op(lp, "Reshape") ? constant_tensor(lp->input(1)) : nullptr;
    const bool rank1 =
        (target && target->numel() == 1) || (!lp && lv->has_shape && lv->shape.size() == 1);
    if (!rank1 || (labels->dtype != DType::Int64 && labels->dtype != DType::Int32)) continue;
    const int64_t ignore = loss->attr_int("ignore_index", 0);

    // The row-wise region above the loss. Where something else reads its values too (the
    // scores a model also returns), forward computes it for every row as well, and its
    // backward for every row then hands on zeros unless that output is differentiated
    // (runtime/zero_gradients.h).
    Walk walk(graph, keep);
    Value* source = walk.source_of(scores, true);
    std::vector<Node*> region = walk.region(scores, source);
    std::unordered_set<const Node*> in_region(region.begin(), region.end());
    bool shared = scores->consumers.size() > 1 || is_graph_output_or_kept(graph, scores, keep);
    for (const Node* n : region)
      for (const Node* c : n->output(0)->consumers)
        shared = shared || (!in_region.count(c) && c != loss) ||
                 is_graph_output_or_kept(graph, n->output(0), keep);
    if (shared && !options.backward) {
      region.clear();
      source = scores;
    }
    const bool copied = shared && !region.empty();
    std::ostringstream note;
    note << "label sparsity: " << what;
    if (options.mode == "auto") {
      const Value* input = label_input(graph, labels);
      auto sample = input ? options.samples.find(input->name) : options.samples.end();
      if (sample == options.samples.end() || !sample->second.defined() ||
          sample->second.numel() == 0) {
        note << ": its labels are not an input of this call, so how many rows it ignores is "
                "unknown; left as is (label_sparsity=\"always\" gathers them anyway)";
        notes.push_back(note.str());
        continue;
      }
      const Tensor& t = sample->second;
      int64_t kept = 0;
      for (int64_t i = 0; i < t.numel(); ++i) kept += t.int_at(i) != ignore;
      const double density = static_cast<double>(kept) / static_cast<double>(t.numel());
      const double limit = copied ? kLabelDensityShared : kLabelDensityAlone;
      note << ": " << percent(density) << " of the first call's labels ('" << input->name
           << "') are not " << ignore;
      if (density > limit) {
        note << ", above the " << percent(limit) << " below which gathering pays"
             << (copied ? " (the rows' full scores are read elsewhere too)" : "") << "; left as is";
        notes.push_back(note.str());
        continue;
      }
    }

    // The kept rows' indices, and their labels.
    const std::string base = loss->name + "/kept_rows";
    Tensor ignore_t = Tensor::empty(labels->dtype, {});
    if (labels->dtype == DType::Int64)
      ignore_t.data<int64_t>()[0] = ignore;
    else
      ignore_t.data<int32_t>()[0] = static_cast<int32_t>(ignore);
    Value* ignore_v = graph.add_constant(base + "/ignore_index", ignore_t);
    Tensor flat = Tensor::empty(DType::Int64, {1});
    flat.data<int64_t>()[0] = -1;
    Value* flat_v = graph.add_constant(base + "/flat", flat);
    Value* ignored = new_value(graph, base + "/ignored", DType::Bool);
    Value* kept = new_value(graph, base + "/kept", DType::Bool);
    Value* nonzero = new_value(graph, base + "/nonzero", DType::Int64);
    Value* index = new_value(graph, base + "/index", DType::Int64);
    Value* kept_labels = new_value(graph, base + "/labels", labels->dtype);
    add(graph, "Equal", {labels, ignore_v}, ignored, base + "/equal", loss->source);
    add(graph, "Not", {ignored}, kept, base + "/not", loss->source);
    add(graph, "NonZero", {kept}, nonzero, base + "/nonzero", loss->source);
    add(graph, "Reshape", {nonzero, flat_v}, index, base + "/index", loss->source);
    add(graph, "Gather", {labels, index}, kept_labels, base + "/gather_labels", loss->source)
        ->attrs["axis"] = Attribute::make_int(0);

    // The source's rows, gathered, then the region's nodes copied onto them.
    std::unordered_map<const Value*, Value*> gathered;
    Value* rows = new_value(graph, base + "/source_rows", source->dtype);
    add(graph, "Flatten", {source}, rows, base + "/flatten", loss->source)->attrs["axis"] =
        Attribute::make_int(-1);
    Value* kept_rows = new_value(graph, base + "/source", source->dtype);
    add(graph, "Gather", {rows, index}, kept_rows, base + "/gather", loss->source)->attrs["axis"] =
        Attribute::make_int(0);
    gathered[source] = kept_rows;
    for (Node* n : region) {
      const RowStep& step = walk.step_of(n);
      if (step.reshapes) {  // rows are 2-D already
        gathered[n->output(0)] = gathered.at(n->input(0));
        continue;
      }
      std::vector<Value*> inputs = n->inputs;
      for (int i : step.data) inputs[i] = gathered.at(n->input(i));
      Value* out = new_value(graph, n->output(0)->name + "/kept_rows", n->output(0)->dtype);
      Node* copy = graph.add_node(n->op_type, n->domain, inputs, {out}, n->name + "/kept_rows");
      copy->attrs = n->attrs;
      copy->def = n->def;
      copy->source = n->source;
      copy->checkpoint_region = n->checkpoint_region;
      gathered[n->output(0)] = out;
    }
    loss->inputs[0] = gathered.at(scores);
    loss->inputs[1] = kept_labels;
    ++rewritten;

    // The original region where nothing reads it any more.
    graph.rebuild_consumers();
    std::unordered_set<const Node*> dead;
    for (auto it = region.rbegin(); it != region.rend(); ++it) {
      bool unread = true;
      for (const Value* out : (*it)->outputs) {
        if (!out) continue;
        unread = unread && !is_graph_output_or_kept(graph, out, keep);
        for (const Node* c : out->consumers) unread = unread && dead.count(c);
      }
      if (unread) dead.insert(*it);
    }
    std::vector<Node*> unread_nodes;
    for (Node* n : region)
      if (dead.count(n)) unread_nodes.push_back(n);
    graph.remove_nodes(unread_nodes);
    graph.rebuild_consumers();
    note << (options.mode == "auto" ? "; " : ": ") << "the loss reads the kept rows, gathered ";
    if (region.empty())
      note << "from its scores";
    else
      note << "before the " << region.size() << " row-wise node(s) feeding it";
    if (copied)
      note << " (their results for every row are read elsewhere too, such as the logits a model "
              "returns: forward computes those as well, and backward skips them unless that "
              "output is differentiated)";
    notes.push_back(note.str());
  }
  if (rewritten) graph.topological_sort();
  return notes;
}

}  // namespace ortmodule
