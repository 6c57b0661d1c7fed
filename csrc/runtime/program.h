// A compiled program: the loaded ONNX graph, its gradient graph (when gradients
// are requested), the plan and the executor. Built once per graph-cache entry.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ir/graph.h"
#include "runtime/executor.h"

namespace ortmodule {

// "auto" linear cross-entropy fusion: where the head's logits would take 1 GiB or more. The
// fused kernel saves their memory but, on the CPU, takes longer than the unfused head.
constexpr int64_t kLinearCrossEntropyAutoBytes = int64_t{1} << 30;

struct ProgramOptions {
  std::vector<std::string> feed_initializers;  // initializers fed every run (parameters, buffers)
  std::vector<std::string> wrt;                // graph inputs that need gradients (may be empty)
  // {value, fed initializer}: forward's new value of a buffer, written back into it after
  // every forward run (running statistics, counters). The value need not be a graph output.
  std::vector<std::pair<std::string, std::string>> state_outputs;
  // Rewrites that change how results are computed but not what (passes/transpose_folding.h).
  // Off, the graph runs as loaded plus gradient building and CSE: the reference that tests
  // compare the rewritten graph against.
  bool graph_optimizations = true;
  // Label sparsity (passes/label_sparsity.h), part of the graph optimizations: "auto",
  // "always" or "never"; for "auto", the first call's values of integer graph inputs (by
  // name), from which the pass reads how many labels a loss ignores.
  std::string label_sparsity = "auto";
  // Linear cross-entropy fusion (passes/linear_cross_entropy_fusion.h), part of the graph
  // optimizations: "auto" (where the logits would hold at least kLinearCrossEntropyAutoBytes),
  // "always" or "never".
  std::string linear_cross_entropy = "auto";
  std::map<std::string, Tensor> sample_inputs;
};

// One graph pass as it ran on a program's graph (for reports: which passes fired).
struct PassRecord {
  std::string name;
  int nodes_before = 0;
  int nodes_after = 0;
  bool changed = false;  // the op types or their counts differ after the pass
};

class Program {
 public:
  Program(const std::string& onnx_bytes, const ProgramOptions& options);
  // From a graph already loaded (and possibly edited); options.feed_initializers are ignored.
  Program(std::unique_ptr<Graph> graph, const ProgramOptions& options);

  Executor& executor() { return *executor_; }
  const std::vector<std::string>& input_names() const { return input_names_; }
  // Per input: its default (an initializer the model also lists as an input), or undefined.
  const std::vector<Tensor>& input_defaults() const { return input_defaults_; }
  const std::vector<std::string>& output_names() const { return output_names_; }
  // Declared element type per input (Undefined where the model leaves it open).
  const std::vector<DType>& input_dtypes() const { return input_dtypes_; }
  // Position (in input_names) of each wrt input, in wrt order.
  const std::vector<int>& wrt_positions() const { return wrt_positions_; }
  // Per output: whether it carries a gradient into backward.
  const std::vector<bool>& output_differentiable() const { return output_differentiable_; }
  bool has_backward() const { return !wrt_positions_.empty(); }
  // Whether some step draws random numbers (Dropout) and so needs a seed per run.
  bool uses_randomness() const { return uses_randomness_; }
  // Positions (in input_names) of fed inputs that backward reads: they must not be
  // modified in place between forward and backward.
  const std::vector<int>& stashed_input_positions() const { return stashed_inputs_; }
  // The graph after gradient building, as ONNX bytes.
  std::string training_graph_onnx() const;
  // What the graph rewrites that depend on the first call's data decided, a line each
  // (ORTModule logs them).
  const std::vector<std::string>& notes() const { return notes_; }
  // The graph passes in the order they ran, gradient building among them.
  const std::vector<PassRecord>& passes() const { return passes_; }
  std::string plan_description() const { return executor_->plan().describe(); }
  // Nodes that constant folding replaced by initializers, of forward and of backward.
  std::pair<int, int> folded_constants() const { return {folded_forward_, folded_backward_}; }

 private:
  std::unique_ptr<Graph> graph_;
  std::unique_ptr<Executor> executor_;
  std::vector<std::string> input_names_, output_names_;
  std::vector<DType> input_dtypes_;
  std::vector<Tensor> input_defaults_;
  std::vector<int> wrt_positions_;
  std::vector<bool> output_differentiable_;
  std::vector<Value*> output_grads_, input_grads_;
  std::vector<int> stashed_inputs_;
  std::vector<std::string> notes_;
  std::vector<PassRecord> passes_;
  bool uses_randomness_ = false;
  int folded_forward_ = 0, folded_backward_ = 0;
};

}  // namespace ortmodule
