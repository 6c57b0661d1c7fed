// Runs a Plan. A forward run returns a RunState holding the stash; backward
// consumes it. Several forward runs may be outstanding (gradient accumulation,
// recomputation), each with its own state.
//
// Shape-cached steps (PlanStep::shape_cached) compute values that depend only on
// the fed inputs' shapes. Their outputs are kept, keyed by those shapes, and later
// forward runs with the same shapes take them from the cache instead of running the
// steps. Cached tensors are marked non-writable and stay referenced by the cache, so
// no in-place kernel ever overwrites them.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "plan/plan.h"

namespace ortmodule {

struct RunState {
  std::vector<Tensor> slots;  // indexed by value id; only the stash is live after forward
  size_t next_stage = 0;      // of plan.backward_stages; set by begin_backward
  bool backward_started = false;
  uint64_t seed = 0;  // of the forward run: recomputed random ops draw the same
  bool backward_done = false;
};

struct ShapeCacheStats {
  int64_t hits = 0;           // forward runs whose input shapes were cached
  int64_t misses = 0;         // forward runs that computed and cached the shape steps
  int64_t steps_skipped = 0;  // shape-cached steps not run, summed over forward runs
};

class Executor {
 public:
  explicit Executor(Plan plan);
  const Plan& plan() const { return plan_; }
  ShapeCacheStats shape_cache_stats() const;

  // inputs: one per plan.inputs, in feed order. Returns the graph outputs.
  // Buffer updates (plan.writebacks) are copied into the fed input tensors.
  std::vector<Tensor> forward(const std::vector<Tensor>& inputs, uint64_t seed,
                              std::shared_ptr<RunState>* state);
  // output_grads: one per plan.outputs (undefined where plan.output_grads is -1).
  // Returns one gradient per wrt input (undefined where it is zero).
  std::vector<Tensor> backward(RunState& state, const std::vector<Tensor>& output_grads);
  // The same, stage by stage (plan.backward_stages): begin_backward takes the output
  // gradients; run_backward_stage runs the next stage and returns the gradients of its
  // wrt inputs, in the stage's order. The state is freed after the last stage.
  void begin_backward(RunState& state, const std::vector<Tensor>& output_grads);
  std::vector<Tensor> run_backward_stage(RunState& state, size_t stage);

 private:
  struct CachedStep {
    bool stored = false;          // false: the step runs anyway (outputs too large to keep)
    std::vector<Tensor> outputs;  // per step output; undefined where nothing reads it
  };
  struct ShapeCacheEntry {
    std::vector<int64_t> key;       // dtype, rank and dims of every fed input
    std::vector<CachedStep> steps;  // one per shape-cached step, in plan order
  };
  static constexpr size_t kShapeCacheEntries = 4;
  static constexpr size_t kShapeCacheBytesPerEntry = size_t(64) << 20;

  void run_steps(const std::vector<PlanStep>& steps, std::vector<Tensor>& slots, uint64_t seed);
  void run_forward_steps(const std::vector<Tensor>& inputs, std::vector<Tensor>& slots,
                         uint64_t seed);
  std::shared_ptr<const ShapeCacheEntry> find_shape_entry(const std::vector<int64_t>& key);
  void finish_shape_run(std::shared_ptr<const ShapeCacheEntry> entry, int64_t steps_skipped);

  Plan plan_;
  int num_shape_cached_ = 0;
  mutable std::mutex cache_mutex_;  // forward runs may overlap (the GIL is released)
  std::vector<std::shared_ptr<const ShapeCacheEntry>> shape_cache_;  // most recent first
  ShapeCacheStats stats_;
};

// Runs one step: shape rule, output allocation (views and in-place reuse), kernel.
void run_step(const PlanStep& step, std::vector<Tensor>& slots, uint64_t seed);

}  // namespace ortmodule
