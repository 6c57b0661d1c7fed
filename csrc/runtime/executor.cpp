#include "runtime/executor.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <stdexcept>

#include "ops/op_utils.h"
#include "runtime/allocator.h"
#include "runtime/profiler.h"

namespace ortmodule {

namespace {

bool releases(const PlanStep& step, int id) {
  return std::binary_search(step.release_after.begin(), step.release_after.end(), id);
}

}  // namespace

namespace {

// Whatever attributes or shape-tensor inputs a model gives, an output is only allocated
// with non-negative dims, an element count that fits int64 and a byte size the allocator
// accepts; the error names the node.
void check_output(const OpContext& ctx, size_t i, const OutputInfo& info) {
  const std::string what = "output " + std::to_string(i) + " shape";
  const int64_t numel = check_shape(ctx, info.shape, what);
  if (info.alias_of >= 0) return;
  if (dtype_size(info.dtype) == 0) {
    ctx.fail("output " + std::to_string(i) + " has no element type (got " + dtype_name(info.dtype) +
             ")");
  }
  const size_t bytes = tensor_bytes_checked(numel, info.dtype);
  if (bytes > allocator_limit()) {
    ctx.fail(what + " " + shape_str(info.shape) + " needs " +
             (bytes == SIZE_MAX ? std::string("more than SIZE_MAX") : std::to_string(bytes)) +
             " bytes, above the allocation limit of " + std::to_string(allocator_limit()) +
             " bytes; the model asks for an absurd size");
  }
}

// Shape rule, output allocation and kernel of one step, without its releases.
void execute_step(const PlanStep& step, std::vector<Tensor>& slots, uint64_t seed) {
  const bool timed = profiling_enabled();
  const auto start =
      timed ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
  OpContext ctx{*step.node, {}, {}, seed};
  ctx.inputs.reserve(step.inputs.size());
  for (int id : step.inputs) {
    if (id < 0) {
      ctx.inputs.push_back(nullptr);
      continue;
    }
    if (!slots[id].defined()) {
      throw std::logic_error("internal error: input " + std::to_string(id) + " of " +
                             step.node->describe() + " was not computed");
    }
    ctx.inputs.push_back(&slots[id]);
  }
  std::vector<OutputInfo> infos = step.def->shape(ctx);
  ctx.outputs.resize(step.outputs.size());
  for (size_t i = 0; i < step.outputs.size(); ++i) {
    if (step.outputs[i] < 0) continue;
    if (i >= infos.size()) {
      ctx.fail("has " + std::to_string(step.outputs.size()) + " outputs but the op produces " +
               std::to_string(infos.size()));
    }
    const OutputInfo& info = infos[i];
    if (info.alias_of >= 0) {
      check_output(ctx, i, info);
      if (static_cast<size_t>(info.alias_of) >= ctx.num_inputs() ||
          shape_numel(info.shape) != ctx.in(info.alias_of).numel()) {
        ctx.fail("output " + std::to_string(i) + " of shape " + shape_str(info.shape) +
                 " cannot be a view of input " + std::to_string(info.alias_of));
      }
      ctx.outputs[i] = ctx.in(info.alias_of).view(info.shape);
      continue;
    }
    if (info.alias_of == -2) continue;  // the kernel provides the output
    check_output(ctx, i, info);
    int k = step.def->inplace_input;
    if (i == 0 && k >= 0 && static_cast<size_t>(k) < step.inputs.size() && step.inputs[k] >= 0 &&
        releases(step, step.inputs[k])) {
      Tensor& src = slots[step.inputs[k]];
      if (src.storage()->writable && src.storage().use_count() == 1 && src.dtype() == info.dtype &&
          src.numel() == shape_numel(info.shape)) {
        ctx.outputs[i] = Tensor(src.storage(), info.dtype, info.shape);
        continue;
      }
    }
    ctx.outputs[i] = Tensor::empty(info.dtype, info.shape);
  }
  step.def->cpu(ctx);
  for (size_t i = 0; i < step.outputs.size(); ++i)
    if (step.outputs[i] >= 0) slots[step.outputs[i]] = std::move(ctx.outputs[i]);
  if (timed) {
    std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
    record_op_time(step.node->op_type, elapsed.count());
  }
}

void release_after(const PlanStep& step, std::vector<Tensor>& slots) {
  for (int id : step.release_after) slots[id] = Tensor();
}

std::vector<int64_t> shape_key(const std::vector<Tensor>& inputs) {
  std::vector<int64_t> key;
  for (const Tensor& t : inputs) {
    key.push_back(static_cast<int64_t>(t.dtype()));
    key.push_back(static_cast<int64_t>(t.rank()));
    key.insert(key.end(), t.shape().begin(), t.shape().end());
  }
  return key;
}

}  // namespace

void run_step(const PlanStep& step, std::vector<Tensor>& slots, uint64_t seed) {
  execute_step(step, slots, seed);
  release_after(step, slots);
}

Executor::Executor(Plan plan) : plan_(std::move(plan)) {
  num_shape_cached_ = plan_.num_shape_cached();
}

ShapeCacheStats Executor::shape_cache_stats() const {
  std::lock_guard<std::mutex> lock(cache_mutex_);
  return stats_;
}

std::shared_ptr<const Executor::ShapeCacheEntry> Executor::find_shape_entry(
    const std::vector<int64_t>& key) {
  std::lock_guard<std::mutex> lock(cache_mutex_);
  for (size_t i = 0; i < shape_cache_.size(); ++i) {
    if (shape_cache_[i]->key != key) continue;
    std::shared_ptr<const ShapeCacheEntry> hit = shape_cache_[i];
    shape_cache_.erase(shape_cache_.begin() + static_cast<std::ptrdiff_t>(i));
    shape_cache_.insert(shape_cache_.begin(), hit);
    return hit;
  }
  return nullptr;
}

void Executor::finish_shape_run(std::shared_ptr<const ShapeCacheEntry> entry,
                                int64_t steps_skipped) {
  std::lock_guard<std::mutex> lock(cache_mutex_);
  stats_.steps_skipped += steps_skipped;
  if (!entry) {
    ++stats_.hits;
    return;
  }
  ++stats_.misses;
  shape_cache_.insert(shape_cache_.begin(), std::move(entry));
  if (shape_cache_.size() > kShapeCacheEntries) shape_cache_.resize(kShapeCacheEntries);
}

void Executor::run_forward_steps(const std::vector<Tensor>& inputs, std::vector<Tensor>& slots,
                                 uint64_t seed) {
  if (num_shape_cached_ == 0) {
    run_steps(plan_.forward, slots, seed);
    return;
  }
  std::vector<int64_t> key = shape_key(inputs);
  std::shared_ptr<const ShapeCacheEntry> hit = find_shape_entry(key);
  std::shared_ptr<ShapeCacheEntry> fresh;
  if (!hit) {
    fresh = std::make_shared<ShapeCacheEntry>();
    fresh->key = std::move(key);
    fresh->steps.resize(static_cast<size_t>(num_shape_cached_));
  }
  size_t index = 0, bytes = 0;
  int64_t skipped = 0;
  for (const PlanStep& step : plan_.forward) {
    if (!step.shape_cached) {
      run_step(step, slots, seed);
      continue;
    }
    const size_t k = index++;
    if (hit && hit->steps[k].stored) {
      const std::vector<Tensor>& outs = hit->steps[k].outputs;
      for (size_t i = 0; i < step.outputs.size(); ++i)
        if (step.outputs[i] >= 0) slots[step.outputs[i]] = outs[i];
      release_after(step, slots);
      ++skipped;
      continue;
    }
    execute_step(step, slots, seed);
    if (fresh) {
      CachedStep& cached = fresh->steps[k];
      cached.outputs.resize(step.outputs.size());
      size_t step_bytes = 0;
      for (size_t i = 0; i < step.outputs.size(); ++i) {
        int id = step.outputs[i];
        // Outputs nothing reads are released by the step itself; keep none of them.
        if (id < 0 || std::binary_search(step.release_after.begin(), step.release_after.end(), id))
          continue;
        cached.outputs[i] = slots[id];
        step_bytes += slots[id].nbytes();
      }
      cached.stored = bytes + step_bytes <= kShapeCacheBytesPerEntry;
      if (cached.stored) {
        bytes += step_bytes;
        for (const Tensor& t : cached.outputs)
          if (t.defined()) t.storage()->writable = false;
      } else {
        cached.outputs.clear();
      }
    }
    release_after(step, slots);
  }
  finish_shape_run(std::move(fresh), skipped);
}

void Executor::run_steps(const std::vector<PlanStep>& steps, std::vector<Tensor>& slots,
                         uint64_t seed) {
  for (const PlanStep& step : steps) run_step(step, slots, seed);
}

std::vector<Tensor> Executor::forward(const std::vector<Tensor>& inputs, uint64_t seed,
                                      std::shared_ptr<RunState>* state_out) {
  if (inputs.size() != plan_.inputs.size()) {
    throw std::invalid_argument("expected " + std::to_string(plan_.inputs.size()) +
                                " inputs, got " + std::to_string(inputs.size()));
  }
  auto state = std::make_shared<RunState>();
  state->seed = seed;
  std::vector<Tensor>& slots = state->slots;
  slots.resize(plan_.num_values);
  for (size_t i = 0; i < inputs.size(); ++i) slots[plan_.inputs[i]] = inputs[i];
  for (const auto& c : plan_.constants) slots[c.first] = c.second;
  run_forward_steps(inputs, slots, seed);

  std::vector<Tensor> outputs;
  outputs.reserve(plan_.outputs.size());
  for (int id : plan_.outputs) outputs.push_back(slots[id]);
  for (const auto& wb : plan_.writebacks) {
    const Tensor& src = slots[wb.first];
    const Tensor& dst = inputs[wb.second];
    if (src.nbytes() != dst.nbytes() || src.dtype() != dst.dtype()) {
      throw std::runtime_error("state update '" + plan_.value_names[wb.first] + "' has shape " +
                               shape_str(src.shape()) + " but the buffer it updates has " +
                               shape_str(dst.shape()));
    }
    if (src.raw() != dst.raw()) std::memcpy(dst.raw(), src.raw(), src.nbytes());
  }
  for (int id : plan_.release_after_outputs) slots[id] = Tensor();
  // Fed inputs that backward does not read are not kept alive by the state.
  for (int id : plan_.inputs)
    if (!std::binary_search(plan_.stash.begin(), plan_.stash.end(), id)) slots[id] = Tensor();
  for (const auto& c : plan_.constants)
    if (!std::binary_search(plan_.stash.begin(), plan_.stash.end(), c.first))
      slots[c.first] = Tensor();
  if (state_out) *state_out = state;
  return outputs;
}

void Executor::begin_backward(RunState& state, const std::vector<Tensor>& output_grads) {
  if (state.backward_started) {
    throw std::runtime_error(
        "backward through the same forward run twice; the saved values were already freed");
  }
  if (output_grads.size() != plan_.outputs.size()) {
    throw std::invalid_argument("expected " + std::to_string(plan_.outputs.size()) +
                                " output gradients, got " + std::to_string(output_grads.size()));
  }
  std::vector<Tensor>& slots = state.slots;
  for (size_t i = 0; i < output_grads.size(); ++i) {
    int id = plan_.output_grads[i];
    if (id >= 0) {
      if (!output_grads[i].defined()) {
        throw std::invalid_argument("gradient of output " + std::to_string(i) + " is missing");
      }
      slots[id] = output_grads[i];
    }
  }
  state.backward_started = true;
  state.next_stage = 0;
}

std::vector<Tensor> Executor::run_backward_stage(RunState& state, size_t stage) {
  if (!state.backward_started || state.backward_done || stage != state.next_stage) {
    throw std::logic_error("internal error: backward stage " + std::to_string(stage) +
                           " run out of order (next is " + std::to_string(state.next_stage) + ")");
  }
  const BackwardStage& s = plan_.backward_stages[stage];
  const size_t begin = stage == 0 ? 0 : plan_.backward_stages[stage - 1].end;
  for (size_t i = begin; i < s.end; ++i) run_step(plan_.backward[i], state.slots, state.seed);
  std::vector<Tensor> grads;
  grads.reserve(s.wrt.size());
  for (int k : s.wrt) {
    const int id = plan_.input_grads[k];
    grads.push_back(id >= 0 ? state.slots[id] : Tensor());
  }
  if (++state.next_stage == plan_.backward_stages.size()) {
    state.slots.clear();
    state.backward_done = true;
  }
  return grads;
}

std::vector<Tensor> Executor::backward(RunState& state, const std::vector<Tensor>& output_grads) {
  begin_backward(state, output_grads);
  std::vector<Tensor> grads(plan_.input_grads.size());
  for (size_t stage = 0; stage < plan_.backward_stages.size(); ++stage) {
    std::vector<Tensor> part = run_backward_stage(state, stage);
    const std::vector<int>& wrt = plan_.backward_stages[stage].wrt;
    for (size_t j = 0; j < wrt.size(); ++j) grads[wrt[j]] = std::move(part[j]);
  }
  return grads;
}

}  // namespace ortmodule
