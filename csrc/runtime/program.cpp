#include "runtime/program.h"

#include <algorithm>
#include <stdexcept>
#include <unordered_set>

#include "grad/gradient_builder.h"
#include "onnx/saver.h"
#include "ops/load_model.h"
#include "passes/attention_fusion.h"
#include "passes/attention_mask_window.h"
#include "passes/attention_softmax_fusion.h"
#include "passes/constant_folding.h"
#include "passes/cse.h"
#include "passes/elementwise_fusion.h"
#include "passes/gelu_fusion.h"
#include "passes/label_sparsity.h"
#include "passes/linear_cross_entropy_fusion.h"
#include "passes/low_precision.h"
#include "passes/matmul_bias_fusion.h"
#include "passes/metadata_reads.h"
#include "passes/recompute.h"
#include "passes/rmsnorm_fusion.h"
#include "passes/rotary_fusion.h"
#include "passes/silu_mul_fusion.h"
#include "passes/transpose_folding.h"

namespace ortmodule {

namespace {
std::unique_ptr<Graph> load_for_program(const std::string& onnx_bytes,
                                        const ProgramOptions& options) {
  LoadOptions load;
  load.feed_initializers = options.feed_initializers;
  return load_model(onnx_bytes, load);
}
// Op type -> node count: a pass changed the graph where these differ before and after it.
std::map<std::string, int> op_histogram(const Graph& graph) {
  std::map<std::string, int> counts;
  for (const Node* n : graph.nodes()) ++counts[n->op_type];
  return counts;
}

// Runs `pass` over the graph and records whether it changed the node set (for reports).
template <typename Pass>
void run_pass(const char* name, Graph& graph, std::vector<PassRecord>& log, Pass&& pass) {
  const std::map<std::string, int> before = op_histogram(graph);
  pass();
  const std::map<std::string, int> after = op_histogram(graph);
  PassRecord record{name, 0, 0, before != after};
  for (const auto& kv : before) record.nodes_before += kv.second;
  for (const auto& kv : after) record.nodes_after += kv.second;
  log.push_back(std::move(record));
}

}  // namespace

Program::Program(const std::string& onnx_bytes, const ProgramOptions& options)
    : Program(load_for_program(onnx_bytes, options), options) {}

Program::Program(std::unique_ptr<Graph> graph, const ProgramOptions& options)
    : graph_(std::move(graph)) {
  compute_low_precision_in_float32(*graph_);
  for (Value* v : graph_->inputs()) {
    input_names_.push_back(v->name);
    input_dtypes_.push_back(v->dtype);
    input_defaults_.push_back(v->input_default);
  }
  for (Value* v : graph_->outputs()) output_names_.push_back(v->name);

  PlanRequest request;
  for (const auto& [value, target] : options.state_outputs) {
    Value* produced = graph_->find_value(value);
    Value* fed = graph_->find_value(target);
    if (!produced || !fed) {
      throw std::invalid_argument("state update '" + value + "' -> '" + target +
                                  "' names a value the graph does not have");
    }
    request.state_updates.push_back({produced, fed});
  }
  std::vector<Value*> state_values;
  for (const auto& update : request.state_updates) state_values.push_back(update.first);
  // Parameters and buffers fed per call keep the shapes they were exported with for as long
  // as the graph is used (a changed shape is a new graph), so their Shape and Size fold.
  std::unordered_set<const Value*> static_shape_values;
  for (const std::string& name : options.feed_initializers)
    if (const Value* v = graph_->find_value(name)) static_shape_values.insert(v);
  // Before gradient building, so that backward is built from the fused forward.
  if (options.graph_optimizations) {
    // First, so that the fusions below and gradient building treat the copied rows alike.
    run_pass("label_sparsity", *graph_, passes_, [&] {
      notes_ = apply_label_sparsity(
          *graph_, {options.label_sparsity, options.sample_inputs, !options.wrt.empty()},
          state_values);
    });
    run_pass("gelu_fusion", *graph_, passes_, [&] { fuse_tanh_gelu(*graph_, state_values); });
    run_pass("attention_softmax_fusion", *graph_, passes_,
             [&] { fuse_attention_softmax(*graph_, state_values); });
    run_pass("attention_fusion", *graph_, passes_, [&] { fuse_attention(*graph_, state_values); });
    run_pass("attention_mask_window", *graph_, passes_, [&] { window_attention_masks(*graph_); });
    run_pass("rmsnorm_fusion", *graph_, passes_, [&] { fuse_rmsnorm(*graph_, state_values); });
    run_pass("rotary_fusion", *graph_, passes_, [&] { fuse_rotary(*graph_, state_values); });
    run_pass("silu_mul_fusion", *graph_, passes_, [&] { fuse_silu_mul(*graph_, state_values); });
    run_pass("transpose_folding", *graph_, passes_, [&] {
      fold_transposes_into_matmuls(*graph_, /*for_gradient_building=*/!options.wrt.empty(),
                                   state_values);
    });
    // After label sparsity (its gathered rows fuse alike) and transpose folding (a tied
    // embedding's head is then one FusedMatMul).
    if (options.linear_cross_entropy != "never") {
      const int64_t min_bytes =
          options.linear_cross_entropy == "always" ? 0 : kLinearCrossEntropyAutoBytes;
      run_pass("linear_cross_entropy_fusion", *graph_, passes_, [&] {
        for (std::string& note : fuse_linear_cross_entropy(*graph_, state_values, min_bytes))
          notes_.push_back(std::move(note));
      });
    }
  }
  if (!options.wrt.empty()) {
    std::vector<Value*> wrt;
    for (const std::string& name : options.wrt) {
      int position = -1;
      for (size_t i = 0; i < input_names_.size(); ++i)
        if (input_names_[i] == name) position = static_cast<int>(i);
      if (position < 0)
        throw std::invalid_argument("gradient requested for '" + name +
                                    "', which is not a graph input");
      wrt_positions_.push_back(position);
      wrt.push_back(graph_->inputs()[position]);
    }
    const std::vector<Node*> forward = graph_->nodes();
    GradientGraphInfo info;
    run_pass("gradient_building", *graph_, passes_,
             [&] { info = build_gradient_graph(*graph_, wrt); });
    // Gradient nodes of bfloat16/float16 values (sums of several contributions) compute in
    // float32 too, rounded like autograd's accumulation in the value's dtype.
    compute_low_precision_in_float32(*graph_);
    if (options.graph_optimizations) {
      // Before CSE and recompute: the gradients of Casts read forward values for their dtype
      // only, which must not keep those values (or their recomputation) alive.
      run_pass("cast_like_simplification", *graph_, passes_,
               [&] { simplify_cast_like_targets(*graph_); });
      // Likewise the gradients' Shape reads (of Casts' outputs, under autocast).
      run_pass("shape_read_simplification", *graph_, passes_,
               [&] { simplify_shape_reads(*graph_); });
      // Transposes that gradient rules put in front of products (Gemm's, or a product's
      // gradient reading a forward Transpose that stays for another reader).
      std::vector<Value*> keep = state_values;
      for (Value* g : info.input_grads)
        if (g) keep.push_back(g);
      run_pass("transpose_folding (backward)", *graph_, passes_, [&] {
        fold_transposes_into_matmuls(*graph_, /*for_gradient_building=*/false, keep);
      });
    }
    std::unordered_map<Value*, Value*> replaced;
    run_pass("common_subexpressions", *graph_, passes_,
             [&] { eliminate_common_subexpressions(*graph_, &replaced); });
    for (auto* list : {&info.output_grads, &info.input_grads})
      for (Value*& v : *list) {
        auto it = v ? replaced.find(v) : replaced.end();
        if (it != replaced.end()) v = it->second;
      }
    const std::unordered_set<const Node*> forward_nodes(forward.begin(), forward.end());
    // Before the products fuse with their activations, so that a fused product keeps only
    // its pre-activation for backward and backward recomputes the activation's output.
    if (options.graph_optimizations) {
      run_pass("activation_recompute", *graph_, passes_,
               [&] { recompute_cheap_activations(*graph_, forward_nodes, info.output_grads); });
      run_pass("gelu_recompute_into_grad", *graph_, passes_,
               [&] { fold_gelu_recompute_into_grad(*graph_); });
    }
    if (options.graph_optimizations) {
      std::vector<Value*> keep = state_values;
      for (auto* list : {&info.output_grads, &info.input_grads})
        for (Value* g : *list)
          if (g) keep.push_back(g);
      ConstantFoldingResult folding;
      run_pass("constant_folding", *graph_, passes_, [&] {
        folding = fold_constants(*graph_, static_shape_values, keep, forward_nodes);
      });
      folded_forward_ = folding.folded_forward;
      folded_backward_ = folding.folded_backward;
      // Once gradients are built, so that backward is built from the plain nodes' rules. The
      // product nodes are rewritten in place, so forward_nodes still names forward.
      run_pass("matmul_bias_fusion", *graph_, passes_, [&] { fuse_matmul_bias(*graph_, keep); });
      run_pass("cast_recompute", *graph_, passes_,
               [&] { recompute_widening_casts(*graph_, forward_nodes, info.output_grads); });
    }
    run_pass("checkpoint_recompute", *graph_, passes_,
             [&] { recompute_checkpoint_regions(*graph_, forward_nodes, info.output_grads); });
    request.output_grads = output_grads_ = info.output_grads;
    request.input_grads = input_grads_ = info.input_grads;
    for (Value* g : info.output_grads) output_differentiable_.push_back(g != nullptr);
  } else {
    output_differentiable_.assign(output_names_.size(), false);
    if (options.graph_optimizations) {
      run_pass("shape_read_simplification", *graph_, passes_,
               [&] { simplify_shape_reads(*graph_); });
      const std::vector<Node*> forward = graph_->nodes();
      run_pass("constant_folding", *graph_, passes_, [&] {
        folded_forward_ =
            fold_constants(*graph_, static_shape_values, state_values,
                           std::unordered_set<const Node*>(forward.begin(), forward.end()))
                .folded_forward;
      });
      run_pass("matmul_bias_fusion", *graph_, passes_,
               [&] { fuse_matmul_bias(*graph_, state_values); });
    }
  }
  if (options.graph_optimizations) {
    std::vector<Value*> keep = state_values;
    for (Value* g : input_grads_)
      if (g) keep.push_back(g);
    // Again once the products took in their biases and activations (a Shape of their
    // outputs' Casts now reads the products').
    run_pass("shape_read_simplification", *graph_, passes_, [&] { simplify_shape_reads(*graph_); });
    run_pass("elementwise_fusion", *graph_, passes_,
             [&] { fuse_elementwise(*graph_, keep, output_grads_); });
  }
  executor_ = std::make_unique<Executor>(make_plan(*graph_, request));
  const Plan& plan = executor_->plan();
  for (const PlanStep& step : plan.forward) uses_randomness_ |= step.def->random;
  for (size_t i = 0; i < plan.inputs.size(); ++i)
    if (std::binary_search(plan.stash.begin(), plan.stash.end(), plan.inputs[i]))
      stashed_inputs_.push_back(static_cast<int>(i));
  // Backward must read the value forward read, not the one written back after it (eager
  // PyTorch reports this as an in-place modification of a saved tensor).
  for (const auto& wb : plan.writebacks) {
    if (std::binary_search(plan.stash.begin(), plan.stash.end(), plan.inputs[wb.second])) {
      throw std::runtime_error("buffer '" + input_names_[wb.second] +
                               "' is updated in place by forward but backward needs its value "
                               "from before the update; update a copy or detach it");
    }
  }
}

std::string Program::training_graph_onnx() const {
  // Each output gradient is shaped like its output, each input gradient like its input.
  std::vector<const Value*> output_like, input_like;
  if (output_grads_.size() == graph_->outputs().size())
    output_like.assign(graph_->outputs().begin(), graph_->outputs().end());
  for (int position : wrt_positions_) input_like.push_back(graph_->inputs()[position]);
  return save_onnx_model(*graph_, output_grads_, input_grads_, output_like, input_like);
}

}  // namespace ortmodule
