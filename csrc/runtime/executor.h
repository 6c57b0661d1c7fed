// Runs a Plan. A forward run returns a RunState holding the stash; backward
// consumes it. Several forward runs may be outstanding (gradient accumulation,
// recomputation), each with its own state.
//
// Per signature (the dtypes and shapes of the fed inputs) the executor keeps one entry:
// - Shape-cached steps (PlanStep::shape_cached) compute values that depend only on the
//   signature. Their outputs are kept, and later forward runs with the same signature
//   take them from the entry instead of running the steps. Cached tensors are marked
//   non-writable and stay referenced by the entry, so no in-place kernel overwrites them.
// - Shape-memo steps (PlanStep::shape_memo) have output shapes that depend only on the
//   signature: their shape rules run on the first run of a signature and the recorded
//   output infos are reused afterwards. Backward's memo is also keyed on the dtypes and
//   shapes of the output gradients. Every other step runs its shape rule every time.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "ops/dispatch.h"
#include "plan/plan.h"

namespace ortmodule {

// The shape rules' results of one run's shape-memo steps, per step in plan order (empty
// for the other steps).
using StepOutputInfos = std::vector<std::vector<OutputInfo>>;

struct BackwardShapes {
  std::vector<int64_t> grad_key;  // dtype, rank and dims of every output gradient
  StepOutputInfos steps;          // one per plan.backward step
};

struct CachedStep {
  bool stored = false;          // false: the step runs anyway (outputs too large to keep)
  std::vector<Tensor> outputs;  // per step output; undefined where nothing reads it
};

struct SignatureEntry {
  std::vector<int64_t> key;        // dtype, rank and dims of every fed input
  std::vector<CachedStep> cached;  // one per shape-cached step, in plan order
  StepOutputInfos forward_shapes;  // one per plan.forward step
  // Set by the first backward of this signature that runs to the end; read and replaced
  // through std::atomic_load/std::atomic_store (forward and backward runs may overlap).
  mutable std::shared_ptr<const BackwardShapes> backward_shapes;
};

struct RunState {
  std::vector<Tensor> slots;  // indexed by value id; only the stash is live after forward
  size_t next_stage = 0;      // of plan.backward_stages; set by begin_backward
  bool backward_started = false;
  uint64_t seed = 0;  // of the forward run: recomputed random ops draw the same
  bool backward_done = false;
  std::shared_ptr<const SignatureEntry> signature;        // of the forward run
  std::shared_ptr<const BackwardShapes> backward_shapes;  // memo this backward reuses
  std::shared_ptr<BackwardShapes> recording;              // memo this backward records
  // Backward: per value id, whether it is known to be all zeros (zero_gradients.h); empty
  // when every output gradient was given.
  std::vector<char> zero;
};

struct ShapeCacheStats {
  int64_t hits = 0;             // forward runs whose signature had an entry
  int64_t misses = 0;           // forward runs that computed and cached the shape steps
  int64_t steps_skipped = 0;    // shape-cached steps not run, summed over forward runs
  int64_t shape_rules_run = 0;  // shape rules evaluated, forward and backward
  int64_t zero_steps = 0;       // backward steps that handed on zeros instead of computing
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
  // `zero_outputs[i]`: output i's gradient is zeros that autograd did not give (the output
  // was not differentiated); the steps that only carry it are skipped (zero_gradients.h).
  void begin_backward(RunState& state, const std::vector<Tensor>& output_grads,
                      const std::vector<bool>& zero_outputs = {});
  std::vector<Tensor> run_backward_stage(RunState& state, size_t stage);
  // Bytes of activations the stash held after a forward run that kept it (distinct storages
  // the engine allocated; parameters and inputs are not counted): measured on
  // the first such run and, while profiling is on, on every one; -1 before any.
  int64_t stash_bytes() const { return stash_bytes_.load(std::memory_order_relaxed); }

 private:
  void measure_stash(const RunState& state);

  static constexpr size_t kSignatureEntries = 4;
  static constexpr size_t kShapeCacheBytesPerEntry = size_t(64) << 20;

  void run_forward_steps(const std::vector<Tensor>& inputs, RunState& state);
  std::shared_ptr<const SignatureEntry> find_entry(const std::vector<Tensor>& inputs);
  void finish_forward(std::shared_ptr<const SignatureEntry> fresh, int64_t steps_skipped);

  Plan plan_;
  int num_shape_cached_ = 0;
  bool uses_signatures_ = false;  // some step is shape-cached or shape-memo
  // Per backward stage: gradient values handed out after it that no later step reads; the
  // state drops them then, so a gradient lives only as long as its receiver keeps it.
  std::vector<std::vector<int>> stage_releases_;
  mutable std::mutex cache_mutex_;  // forward runs may overlap (the GIL is released)
  std::vector<std::shared_ptr<const SignatureEntry>> entries_;  // most recent first
  ShapeCacheStats stats_;
  std::atomic<int64_t> shape_rules_run_{0};
  std::atomic<int64_t> zero_steps_{0};
  DeviceCopies device_copies_;
  std::atomic<int64_t> stash_bytes_{-1};
};

// Runs one step: shape rule, output allocation (views and in-place reuse), kernel.
void run_step(const PlanStep& step, std::vector<Tensor>& slots, uint64_t seed);

}  // namespace ortmodule
