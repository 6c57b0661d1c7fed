// Execution plan: a static node order split into a forward and a backward part,
// with value lifetimes. Every value is released right after its last use, except
// graph outputs (handed to the caller) and the stash (forward values backward
// reads), which live until backward has consumed them.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "ir/graph.h"
#include "ops/op_table.h"

namespace ortmodule {

struct PlanStep {
  const Node* node = nullptr;
  const OpDef* def = nullptr;
  std::vector<int> inputs;         // value ids, -1 for omitted
  std::vector<int> outputs;        // value ids, -1 for omitted
  std::vector<int> release_after;  // value ids whose last use is this step
  // Forward only: the outputs depend on nothing but the fed inputs' shapes (and
  // constants), so the executor reuses them while those shapes repeat (shape_cache.h).
  bool shape_cached = false;
  // The output shapes (and dtypes, views) depend only on the fed inputs' dtypes and shapes
  // (and, in backward, the output gradients'): the executor runs the shape rule once per
  // such signature and reuses its result (executor.h). False for steps whose output shape
  // reads a value computed from data, and for random and host-call steps.
  bool shape_memo = false;
};

// A contiguous run of backward steps, after which some wrt gradients are final. Backward
// runs stage by stage so that each gradient can be handed out as soon as nothing more
// contributes to it (DistributedDataParallel then reduces it while backward goes on).
struct BackwardStage {
  size_t end = 0;        // runs plan.backward steps [previous stage's end, end)
  std::vector<int> wrt;  // indices into input_grads whose values are final after the stage
};

struct Plan {
  int num_values = 0;
  std::vector<PlanStep> forward;
  std::vector<PlanStep> backward;
  std::vector<int> inputs;                      // fed graph inputs, in feed order
  std::vector<int> outputs;                     // forward graph outputs
  std::vector<int> output_grads;                // backward inputs, one per output (-1: none)
  std::vector<int> input_grads;                 // backward results, one per wrt input (-1: zero)
  std::vector<BackwardStage> backward_stages;   // in order, covering all of backward
  std::vector<int> stash;                       // kept from forward for backward
  std::vector<int> release_after_outputs;       // outputs not in the stash, dropped once returned
  std::vector<std::pair<int, int>> writebacks;  // {produced value, fed input index}
  std::vector<std::pair<int, Tensor>> constants;
  std::vector<std::string> value_names;

  int num_shape_cached() const;
  std::string describe() const;  // human-readable dump, for tests and debugging
};

struct PlanRequest {
  std::vector<Value*> output_grads;  // from the gradient builder (empty: inference)
  std::vector<Value*> input_grads;
  std::vector<std::pair<Value*, Value*>> state_updates;  // {new value, fed graph input}
};

Plan make_plan(const Graph& graph, const PlanRequest& request);

}  // namespace ortmodule
