// Runs a Plan. A forward run returns a RunState holding the stash; backward
// consumes it. Several forward runs may be outstanding (gradient accumulation,
// recomputation), each with its own state.
#pragma once

#include <memory>
#include <vector>

#include "plan/plan.h"

namespace ortmodule {

struct RunState {
  std::vector<Tensor> slots;  // indexed by value id; only the stash is live after forward
  bool backward_done = false;
};

class Executor {
 public:
  explicit Executor(Plan plan) : plan_(std::move(plan)) {}
  const Plan& plan() const { return plan_; }

  // inputs: one per plan.inputs, in feed order. Returns the graph outputs.
  // Buffer updates (plan.writebacks) are copied into the fed input tensors.
  std::vector<Tensor> forward(const std::vector<Tensor>& inputs, uint64_t seed,
                              std::shared_ptr<RunState>* state);
  // output_grads: one per plan.outputs (undefined where plan.output_grads is -1).
  // Returns one gradient per wrt input (undefined where it is zero).
  std::vector<Tensor> backward(RunState& state, const std::vector<Tensor>& output_grads);

 private:
  void run_steps(const std::vector<PlanStep>& steps, std::vector<Tensor>& slots, uint64_t seed);
  Plan plan_;
};

// Runs one step: shape rule, output allocation (views and in-place reuse), kernel.
void run_step(const PlanStep& step, std::vector<Tensor>& slots, uint64_t seed);

}  // namespace ortmodule
