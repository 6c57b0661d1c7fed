#include "plan/plan.h"

#include <algorithm>
#include <functional>
#include <map>
#include <sstream>
#include <stdexcept>
#include <unordered_map>
#include <unordered_set>

#include "plan/shape_cache.h"

namespace ortmodule {
namespace {

int id_of(const Value* v) { return v ? v->id : -1; }

PlanStep make_step(const Node* n) {
  PlanStep s;
  s.node = n;
  s.def = n->def;
  for (Value* in : n->inputs) s.inputs.push_back(id_of(in));
  for (Value* out : n->outputs) s.outputs.push_back(id_of(out));
  return s;
}

// Assigns release points: each value in `candidates` is released after the last step
// of `steps` that reads or writes it, unless it is in `keep`.
void assign_releases(std::vector<PlanStep>& steps, const std::unordered_set<int>& keep) {
  std::unordered_map<int, size_t> last_use;
  for (size_t i = 0; i < steps.size(); ++i) {
    for (int id : steps[i].inputs)
      if (id >= 0) last_use[id] = i;
    for (int id : steps[i].outputs)
      if (id >= 0) last_use[id] = std::max(last_use[id], i);
  }
  for (const auto& kv : last_use)
    if (!keep.count(kv.first)) steps[kv.second].release_after.push_back(kv.first);
  for (PlanStep& s : steps) std::sort(s.release_after.begin(), s.release_after.end());
}

// Groups the wrt gradients by the step after which each is final: the last step that
// writes it (0 when no backward step does: a zero gradient or one passed through).
std::vector<BackwardStage> make_backward_stages(const std::vector<PlanStep>& steps,
                                                const std::vector<int>& input_grads) {
  std::unordered_map<int, size_t> final_after;
  for (size_t i = 0; i < steps.size(); ++i)
    for (int id : steps[i].outputs)
      if (id >= 0) final_after[id] = i + 1;
  std::map<size_t, std::vector<int>> by_end;
  for (size_t k = 0; k < input_grads.size(); ++k) {
    auto it = final_after.find(input_grads[k]);
    by_end[it == final_after.end() ? 0 : it->second].push_back(static_cast<int>(k));
  }
  std::vector<BackwardStage> stages;
  for (auto& [end, wrt] : by_end) {
    // Gradients final before any step ride along with the first stage that runs steps.
    if (!stages.empty() && stages.back().end == 0) {
      stages.back().end = end;
      stages.back().wrt.insert(stages.back().wrt.end(), wrt.begin(), wrt.end());
      continue;
    }
    stages.push_back({end, std::move(wrt)});
  }
  if (stages.empty()) stages.push_back({});
  stages.back().end = steps.size();  // steps after the last gradient (none after DCE)
  return stages;
}

// Backward work that does not depend on output gradients (recomputation) runs right
// before the first step that reads it, so recomputed values live only while needed. Such
// work that no step reads (it makes a gradient, or a state update, itself) stays where it is.
void schedule_just_in_time(std::vector<PlanStep>& steps) {
  std::unordered_map<int, size_t> made_by;  // value id -> index of the deferred step
  for (size_t i = 0; i < steps.size(); ++i)
    if (steps[i].node->run_in_backward)
      for (int id : steps[i].outputs)
        if (id >= 0) made_by[id] = i;
  if (made_by.empty()) return;
  std::vector<char> read(steps.size(), 0);  // deferred steps whose outputs a step reads
  for (const PlanStep& s : steps)
    for (int id : s.inputs) {
      auto it = id >= 0 ? made_by.find(id) : made_by.end();
      if (it != made_by.end()) read[it->second] = 1;
    }
  std::vector<PlanStep> ordered;
  std::vector<char> placed(steps.size(), 0);
  std::function<void(size_t)> place = [&](size_t i) {
    if (placed[i]) return;
    placed[i] = 1;
    for (int id : steps[i].inputs) {
      auto it = id >= 0 ? made_by.find(id) : made_by.end();
      if (it != made_by.end()) place(it->second);
    }
    ordered.push_back(steps[i]);
  };
  for (size_t i = 0; i < steps.size(); ++i)
    if (!steps[i].node->run_in_backward || !read[i]) place(i);
  steps = std::move(ordered);
}

// Shape and Size read only their input's shape. The gradient builder adds them at the end
// of forward (the shapes that backward's reductions sum to), where they would keep every
// activation they read alive until forward ends; each runs right after its input is made.
void schedule_shape_reads_early(std::vector<PlanStep>& steps) {
  auto reads_shape_only = [](const PlanStep& s) {
    return s.node->domain.empty() && (s.node->op_type == "Shape" || s.node->op_type == "Size") &&
           s.inputs.size() == 1 && s.inputs[0] >= 0;
  };
  std::unordered_map<int, size_t> made_by;  // value id -> index of the step producing it
  for (size_t i = 0; i < steps.size(); ++i)
    for (int id : steps[i].outputs)
      if (id >= 0) made_by[id] = i;
  const size_t kBeforeAll = steps.size();
  std::unordered_map<size_t, std::vector<size_t>> after;  // producer (or kBeforeAll) -> reads
  for (size_t i = 0; i < steps.size(); ++i) {
    if (!reads_shape_only(steps[i])) continue;
    auto it = made_by.find(steps[i].inputs[0]);
    after[it == made_by.end() ? kBeforeAll : it->second].push_back(i);
  }
  if (after.empty()) return;
  std::vector<PlanStep> ordered;
  ordered.reserve(steps.size());
  std::function<void(size_t)> emit_reads_of = [&](size_t producer) {
    auto it = after.find(producer);
    if (it == after.end()) return;
    for (size_t r : it->second) {
      ordered.push_back(steps[r]);
      emit_reads_of(r);  // a Shape of a Shape
    }
  };
  emit_reads_of(kBeforeAll);
  for (size_t i = 0; i < steps.size(); ++i) {
    if (reads_shape_only(steps[i])) continue;
    ordered.push_back(steps[i]);
    emit_reads_of(i);
  }
  steps = std::move(ordered);
}

}  // namespace

Plan make_plan(const Graph& graph, const PlanRequest& request) {
  Plan plan;
  plan.num_values = static_cast<int>(graph.num_values());
  for (size_t i = 0; i < graph.num_values(); ++i)
    plan.value_names.push_back(graph.value_by_id(i)->name);
  for (Value* v : graph.inputs()) plan.inputs.push_back(v->id);
  for (Value* v : graph.outputs()) plan.outputs.push_back(v->id);
  for (Value* v : request.output_grads) plan.output_grads.push_back(id_of(v));
  for (Value* v : request.input_grads) plan.input_grads.push_back(id_of(v));

  const std::vector<Node*> nodes = graph.nodes();
  for (const Node* n : nodes)
    if (!n->def)
      throw std::runtime_error("internal error: " + n->describe() + " has no kernel at opset " +
                               std::to_string(graph.opset_version) +
                               " (a graph pass or gradient rule made it); please report it");
  // Backward = nodes that depend on an output gradient.
  std::unordered_set<const Value*> grad_dependent;
  for (Value* g : request.output_grads)
    if (g) grad_dependent.insert(g);
  std::unordered_set<const Node*> is_backward;
  for (Node* n : nodes) {
    bool dep = n->run_in_backward;
    for (Value* in : n->inputs) dep = dep || (in && grad_dependent.count(in));
    if (!dep) continue;
    is_backward.insert(n);
    for (Value* out : n->outputs)
      if (out) grad_dependent.insert(out);
  }

  // Keep only nodes that contribute to something wanted (dead code elimination).
  std::unordered_set<const Value*> wanted(graph.outputs().begin(), graph.outputs().end());
  for (Value* g : request.input_grads)
    if (g) wanted.insert(g);
  for (const auto& update : request.state_updates) wanted.insert(update.first);
  std::unordered_map<const Value*, int> input_index;
  for (size_t i = 0; i < graph.inputs().size(); ++i)
    input_index[graph.inputs()[i]] = static_cast<int>(i);
  std::unordered_set<const Node*> live;
  for (auto it = nodes.rbegin(); it != nodes.rend(); ++it) {
    Node* n = *it;
    bool needed = !n->def->state_writeback.empty();
    for (Value* out : n->outputs) needed = needed || (out && wanted.count(out));
    if (!needed) continue;
    live.insert(n);
    for (Value* in : n->inputs)
      if (in) wanted.insert(in);
  }

  for (Node* n : nodes) {
    if (!live.count(n)) continue;
    (is_backward.count(n) ? plan.backward : plan.forward).push_back(make_step(n));
    for (const auto& wb : n->def->state_writeback) {
      Value* produced = n->output(wb.first);
      Value* target = n->input(wb.second);
      if (!produced || !target) continue;
      auto it = input_index.find(target);
      if (it != input_index.end()) plan.writebacks.push_back({produced->id, it->second});
    }
  }

  for (const auto& [produced, target] : request.state_updates) {
    auto it = input_index.find(target);
    if (it == input_index.end())
      throw std::invalid_argument("state update of '" + target->name + "' is not a fed input");
    bool written = false;  // already written back by its op (BatchNormalization)
    for (const auto& wb : plan.writebacks) written = written || wb.second == it->second;
    if (!written) plan.writebacks.push_back({produced->id, it->second});
  }

  schedule_shape_reads_early(plan.forward);
  schedule_just_in_time(plan.backward);

  // Constants used by live nodes.
  std::unordered_set<int> seen;
  for (const auto* part : {&plan.forward, &plan.backward}) {
    for (const PlanStep& s : *part) {
      for (int id : s.inputs) {
        if (id < 0 || seen.count(id)) continue;
        const Value* v = graph.value_by_id(id);
        if (v->initializer.defined()) {
          plan.constants.push_back({id, v->initializer});
          seen.insert(id);
        }
      }
    }
  }

  // The stash: values available after forward (fed inputs, constants, forward
  // results) that backward reads.
  std::unordered_set<int> produced_in_backward;
  for (int id : plan.output_grads)
    if (id >= 0) produced_in_backward.insert(id);
  for (const PlanStep& s : plan.backward)
    for (int id : s.outputs)
      if (id >= 0) produced_in_backward.insert(id);
  std::unordered_set<int> stash;
  for (const PlanStep& s : plan.backward)
    for (int id : s.inputs)
      if (id >= 0 && !produced_in_backward.count(id)) stash.insert(id);
  for (int id : plan.input_grads)
    if (id >= 0 && !produced_in_backward.count(id)) stash.insert(id);  // gradient passes through
  plan.stash.assign(stash.begin(), stash.end());
  std::sort(plan.stash.begin(), plan.stash.end());

  std::unordered_set<int> keep_forward(stash.begin(), stash.end());
  for (int id : plan.outputs) keep_forward.insert(id);
  for (const auto& wb : plan.writebacks) keep_forward.insert(wb.first);
  assign_releases(plan.forward, keep_forward);
  for (int id : plan.outputs)
    if (!stash.count(id)) plan.release_after_outputs.push_back(id);
  for (const auto& wb : plan.writebacks)
    if (!stash.count(wb.first)) plan.release_after_outputs.push_back(wb.first);

  std::unordered_set<int> keep_backward;
  for (int id : plan.input_grads)
    if (id >= 0) keep_backward.insert(id);
  assign_releases(plan.backward, keep_backward);
  plan.backward_stages = make_backward_stages(plan.backward, plan.input_grads);
  mark_shape_cached_steps(graph, plan);
  return plan;
}

int Plan::num_shape_cached() const {
  return static_cast<int>(std::count_if(forward.begin(), forward.end(),
                                        [](const PlanStep& s) { return s.shape_cached; }));
}

std::string Plan::describe() const {
  std::ostringstream os;
  auto dump = [&](const char* title, const std::vector<PlanStep>& steps) {
    os << title << ":\n";
    for (const PlanStep& s : steps) {
      os << "  " << s.node->op_type << " '" << s.node->name << "'"
         << (s.shape_cached ? " [shape-cached]" : "") << (s.node->recomputes ? " [recompute]" : "")
         << " releases";
      for (int id : s.release_after) os << " " << value_names[id];
      os << "\n";
    }
  };
  dump("forward", forward);
  dump("backward", backward);
  os << "shape-cached: " << num_shape_cached() << " of " << forward.size()
     << " forward steps run once per set of input shapes\n";
  os << "stash:";
  for (int id : stash) os << " " << value_names[id];
  os << "\nbackward stages (steps run, gradients final):";
  for (const BackwardStage& stage : backward_stages)
    os << " " << stage.end << ":" << stage.wrt.size();
  os << "\n";
  return os.str();
}

}  // namespace ortmodule
