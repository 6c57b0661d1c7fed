#include "runtime/executor.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <stdexcept>

#include "base/allocator.h"
#include "base/profiler.h"
#include "ops/dispatch.h"
#include "ops/op_utils.h"
#include "runtime/zero_gradients.h"

namespace ortmodule {

namespace {

bool releases(const PlanStep& step, int id) {
  return std::binary_search(step.release_after.begin(), step.release_after.end(), id);
}

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

// Runs the shape rule and checks every output it describes.
std::vector<OutputInfo> run_shape_rule(const PlanStep& step, const OpContext& ctx) {
  std::vector<OutputInfo> infos = step.def->shape(ctx);
  for (size_t i = 0; i < step.outputs.size(); ++i) {
    if (step.outputs[i] < 0) continue;
    if (i >= infos.size()) {
      ctx.fail("has " + std::to_string(step.outputs.size()) + " outputs but the op produces " +
               std::to_string(infos.size()));
    }
    const OutputInfo& info = infos[i];
    if (info.alias_of == -2) continue;  // the kernel provides the output
    check_output(ctx, i, info);
    if (info.alias_of >= 0 && (static_cast<size_t>(info.alias_of) >= ctx.num_inputs() ||
                               shape_numel(info.shape) != ctx.in(info.alias_of).numel())) {
      ctx.fail("output " + std::to_string(i) + " of shape " + shape_str(info.shape) +
               " cannot be a view of input " + std::to_string(info.alias_of));
    }
  }
  return infos;
}

// Where a step's output infos come from: its signature's memo, or its shape rule (whose
// result is then recorded when `record` is set).
struct StepShapes {
  const std::vector<OutputInfo>* known = nullptr;
  std::vector<OutputInfo>* record = nullptr;
  std::atomic<int64_t>* rules_run = nullptr;
  DeviceCopies* device_copies = nullptr;  // the executor's kept device copies of constants
};

// The argument vectors of OpContext, kept per thread so that a step allocates none.
// A kernel that runs another executor on the same thread takes the (then empty) spare
// vectors and gives them back; the outer step restores its own afterwards.
struct ContextVectors {
  std::vector<const Tensor*> inputs;
  std::vector<Tensor> outputs;
};
ContextVectors& spare_context_vectors() {
  thread_local ContextVectors spare;
  return spare;
}

// Shape rule (or its memo), output allocation and kernel of one step, without its releases.
// With `zero` (the step's outputs are known zeros, zero_gradients.h), outputs are zero-filled
// instead of computed, where all of them are floating point and allocated here; returns
// whether that was done.
// How a step is reported: which table the profiler times its kernel into, and the hooks
// of an outside profiler listening during this run (base/profiler.h), if any.
struct StepReport {
  bool backward = false;
  const OpEventHooks* events = nullptr;
};

bool execute_step(const PlanStep& step, std::vector<Tensor>& slots, uint64_t seed,
                  StepShapes shapes, StepReport report, bool zero = false,
                  const std::vector<bool>* zero_inputs = nullptr) {
  const OpEvent event(report.events, step.node->op_type, step.node->name);
  OpContext ctx{*step.node, {}, {}, seed};
  ContextVectors& spare = spare_context_vectors();
  ctx.inputs.swap(spare.inputs);
  ctx.outputs.swap(spare.outputs);
  ctx.inputs.clear();
  ctx.outputs.clear();
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
  // Device: the inputs' (ops/dispatch.h); inputs a kernel reads elsewhere are moved.
  const Device device = step_device(ctx);
  const KernelFn kernel = select_kernel(ctx, device);
  std::vector<Tensor> moved;
  place_inputs(ctx, device, moved, shapes.device_copies);
  std::vector<OutputInfo> computed;
  if (!shapes.known) {
    computed = run_shape_rule(step, ctx);
    if (shapes.rules_run) shapes.rules_run->fetch_add(1, std::memory_order_relaxed);
    if (shapes.record) *shapes.record = computed;
  }
  const std::vector<OutputInfo>& infos = shapes.known ? *shapes.known : computed;
  for (size_t i = 0; zero && i < step.outputs.size(); ++i)
    if (step.outputs[i] >= 0)
      zero =
          infos[i].alias_of != -2 && (infos[i].alias_of >= 0 || dtype_is_floating(infos[i].dtype));
  const Tensor* passed = zero ? nullptr : leave_out_zero_addends(ctx, zero_inputs, infos, device);
  ctx.outputs.resize(step.outputs.size());
  for (size_t i = 0; i < step.outputs.size(); ++i) {
    if (step.outputs[i] < 0) continue;
    const OutputInfo& info = infos[i];
    if (passed) {
      ctx.outputs[i] = *passed;
      continue;
    }
    if (info.alias_of >= 0) {
      ctx.outputs[i] = ctx.in(info.alias_of).view(info.shape);
      continue;
    }
    if (info.alias_of == -2) continue;
    if (zero) {
      ctx.outputs[i] = Tensor::zeros(info.dtype, info.shape, device);
      continue;
    }
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
    ctx.outputs[i] = Tensor::empty(info.dtype, info.shape, device);
  }
  if (zero || passed) {
    // No kernel: the outputs are the zeros allocated above (or views of zero inputs), or the
    // one input that is not zero.
  } else if (profiling_enabled()) {
    const auto start = std::chrono::steady_clock::now();
    kernel(ctx);
    std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
    record_op_time(step.node->op_type, elapsed.count(), report.backward);
  } else {
    kernel(ctx);
  }
  for (size_t i = 0; i < step.outputs.size(); ++i)
    if (step.outputs[i] >= 0) slots[step.outputs[i]] = std::move(ctx.outputs[i]);
  ctx.inputs.clear();
  ctx.outputs.clear();
  ctx.inputs.swap(spare.inputs);
  ctx.outputs.swap(spare.outputs);
  return zero;
}

void release_after(const PlanStep& step, std::vector<Tensor>& slots) {
  for (int id : step.release_after) slots[id] = Tensor();
}

void append_key(std::vector<int64_t>& key, const Tensor& t) {
  key.push_back(static_cast<int64_t>(t.dtype()));
  key.push_back(static_cast<int64_t>(t.rank()));
  key.insert(key.end(), t.shape().begin(), t.shape().end());
}

std::vector<int64_t> signature_key(const std::vector<Tensor>& tensors) {
  std::vector<int64_t> key;
  for (const Tensor& t : tensors)
    if (t.defined())
      append_key(key, t);
    else
      key.push_back(-1);
  return key;
}

// signature_key(tensors) == key, without building the key.
bool matches_key(const std::vector<int64_t>& key, const std::vector<Tensor>& tensors) {
  size_t pos = 0;
  for (const Tensor& t : tensors) {
    if (!t.defined()) {
      if (pos >= key.size() || key[pos++] != -1) return false;
      continue;
    }
    const Shape& shape = t.shape();
    if (key.size() - pos < 2 + shape.size()) return false;
    if (key[pos] != static_cast<int64_t>(t.dtype()) ||
        key[pos + 1] != static_cast<int64_t>(shape.size()))
      return false;
    if (!std::equal(shape.begin(), shape.end(), key.begin() + static_cast<std::ptrdiff_t>(pos + 2)))
      return false;
    pos += 2 + shape.size();
  }
  return pos == key.size();
}

}  // namespace

void run_step(const PlanStep& step, std::vector<Tensor>& slots, uint64_t seed) {
  execute_step(step, slots, seed, StepShapes{}, StepReport{false, op_event_listener()});
  release_after(step, slots);
}

Executor::Executor(Plan plan) : plan_(std::move(plan)) {
  // Constants never change: a device reads its kept copy of them (DeviceCopies).
  for (auto& c : plan_.constants)
    if (c.second.defined() && c.second.storage()) {
      c.second.storage()->writable = false;
      c.second.storage()->immutable = true;
    }
  num_shape_cached_ = plan_.num_shape_cached();
  for (const auto* part : {&plan_.forward, &plan_.backward})
    for (const PlanStep& step : *part) uses_signatures_ = uses_signatures_ || step.shape_memo;
  uses_signatures_ = uses_signatures_ || num_shape_cached_ > 0;
  stage_releases_.resize(plan_.backward_stages.size());
  for (size_t k = 0; k < plan_.backward_stages.size(); ++k) {
    const size_t end = plan_.backward_stages[k].end;
    for (int w : plan_.backward_stages[k].wrt) {
      const int id = plan_.input_grads[w];
      bool read_later = id < 0;
      for (size_t i = end; i < plan_.backward.size() && !read_later; ++i)
        for (int in : plan_.backward[i].inputs) read_later = read_later || in == id;
      for (size_t later = k + 1; later < plan_.backward_stages.size() && !read_later; ++later)
        for (int v : plan_.backward_stages[later].wrt)
          read_later = read_later || plan_.input_grads[v] == id;
      if (!read_later) stage_releases_[k].push_back(id);
    }
  }
}

ShapeCacheStats Executor::shape_cache_stats() const {
  std::lock_guard<std::mutex> lock(cache_mutex_);
  ShapeCacheStats stats = stats_;
  stats.shape_rules_run = shape_rules_run_.load();
  stats.zero_steps = zero_steps_.load();
  return stats;
}

std::shared_ptr<const SignatureEntry> Executor::find_entry(const std::vector<Tensor>& inputs) {
  std::lock_guard<std::mutex> lock(cache_mutex_);
  for (size_t i = 0; i < entries_.size(); ++i) {
    if (!matches_key(entries_[i]->key, inputs)) continue;
    std::shared_ptr<const SignatureEntry> hit = entries_[i];
    if (i > 0) {
      entries_.erase(entries_.begin() + static_cast<std::ptrdiff_t>(i));
      entries_.insert(entries_.begin(), hit);
    }
    return hit;
  }
  return nullptr;
}

void Executor::finish_forward(std::shared_ptr<const SignatureEntry> fresh, int64_t steps_skipped) {
  std::lock_guard<std::mutex> lock(cache_mutex_);
  stats_.steps_skipped += steps_skipped;
  if (!fresh) {
    ++stats_.hits;
    return;
  }
  ++stats_.misses;
  entries_.insert(entries_.begin(), std::move(fresh));
  if (entries_.size() > kSignatureEntries) entries_.resize(kSignatureEntries);
}

void Executor::run_forward_steps(const std::vector<Tensor>& inputs, RunState& state) {
  std::vector<Tensor>& slots = state.slots;
  const StepReport report{false, op_event_listener()};
  if (!uses_signatures_) {
    for (const PlanStep& step : plan_.forward) {
      execute_step(step, slots, state.seed, StepShapes{}, report);
      release_after(step, slots);
    }
    return;
  }
  std::shared_ptr<const SignatureEntry> hit = find_entry(inputs);
  std::shared_ptr<SignatureEntry> fresh;
  if (!hit) {
    fresh = std::make_shared<SignatureEntry>();
    fresh->key = signature_key(inputs);
    fresh->cached.resize(static_cast<size_t>(num_shape_cached_));
    fresh->forward_shapes.resize(plan_.forward.size());
  }
  size_t cached_index = 0, bytes = 0;
  int64_t skipped = 0;
  for (size_t s = 0; s < plan_.forward.size(); ++s) {
    const PlanStep& step = plan_.forward[s];
    StepShapes shapes{nullptr, nullptr, &shape_rules_run_, &device_copies_};
    if (step.shape_memo) {
      if (hit)
        shapes.known = &hit->forward_shapes[s];
      else
        shapes.record = &fresh->forward_shapes[s];
    }
    if (!step.shape_cached) {
      execute_step(step, slots, state.seed, shapes, report);
      release_after(step, slots);
      continue;
    }
    const size_t k = cached_index++;
    if (hit && hit->cached[k].stored) {
      const std::vector<Tensor>& outs = hit->cached[k].outputs;
      for (size_t i = 0; i < step.outputs.size(); ++i)
        if (step.outputs[i] >= 0) slots[step.outputs[i]] = outs[i];
      release_after(step, slots);
      ++skipped;
      continue;
    }
    execute_step(step, slots, state.seed, shapes, report);
    if (fresh) {
      CachedStep& cached = fresh->cached[k];
      cached.outputs.resize(step.outputs.size());
      size_t step_bytes = 0;
      for (size_t i = 0; i < step.outputs.size(); ++i) {
        int id = step.outputs[i];
        // Outputs nothing reads are released by the step itself; keep none of them.
        if (id < 0 || releases(step, id)) continue;
        cached.outputs[i] = slots[id];
        step_bytes += slots[id].nbytes();
      }
      cached.stored = bytes + step_bytes <= kShapeCacheBytesPerEntry;
      if (cached.stored) {
        bytes += step_bytes;
        for (const Tensor& t : cached.outputs)
          if (t.defined()) {
            t.storage()->writable = false;
            t.storage()->immutable = true;
          }
      } else {
        cached.outputs.clear();
      }
    }
    release_after(step, slots);
  }
  state.signature = hit ? hit : fresh;
  finish_forward(std::move(fresh), skipped);
}

std::vector<Tensor> Executor::forward(const std::vector<Tensor>& inputs, uint64_t seed,
                                      std::shared_ptr<RunState>* state_out) {
  PhaseTimer timer("executor.forward");
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
  run_forward_steps(inputs, *state);

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
    if (src.raw() != dst.raw()) copy_tensor_data(dst, src);
  }
  for (int id : plan_.release_after_outputs) slots[id] = Tensor();
  // Fed inputs that backward does not read are not kept alive by the state.
  for (int id : plan_.inputs)
    if (!std::binary_search(plan_.stash.begin(), plan_.stash.end(), id)) slots[id] = Tensor();
  for (const auto& c : plan_.constants)
    if (!std::binary_search(plan_.stash.begin(), plan_.stash.end(), c.first))
      slots[c.first] = Tensor();
  if (state_out) {
    if (stash_bytes_.load(std::memory_order_relaxed) < 0 || profiling_enabled())
      measure_stash(*state);
    *state_out = std::move(state);
  }
  return outputs;
}

void Executor::measure_stash(const RunState& state) {
  std::vector<const Storage*> seen;
  int64_t bytes = 0;
  for (int id : plan_.stash) {
    const Tensor& t = state.slots[id];
    // Parameters, inputs and constants backward reads are not the engine's memory.
    if (!t.defined() || !t.storage() || !t.storage()->writable) continue;
    const Storage* s = t.storage().get();
    if (std::find(seen.begin(), seen.end(), s) != seen.end()) continue;
    seen.push_back(s);
    bytes += static_cast<int64_t>(s->bytes);
  }
  stash_bytes_.store(bytes, std::memory_order_relaxed);
}

void Executor::begin_backward(RunState& state, const std::vector<Tensor>& output_grads,
                              const std::vector<bool>& zero_outputs) {
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
  state.zero.clear();
  for (size_t i = 0; i < zero_outputs.size() && i < output_grads.size(); ++i) {
    if (!zero_outputs[i] || plan_.output_grads[i] < 0) continue;
    state.zero.resize(slots.size(), 0);
    state.zero[plan_.output_grads[i]] = 1;
  }
  state.backward_shapes.reset();
  state.recording.reset();
  if (state.signature) {
    // Only the gradients backward reads take part in its shapes.
    std::shared_ptr<const BackwardShapes> memo =
        std::atomic_load(&state.signature->backward_shapes);
    std::vector<Tensor> read(output_grads.size());
    for (size_t i = 0; i < output_grads.size(); ++i)
      if (plan_.output_grads[i] >= 0) read[i] = output_grads[i];
    if (memo && matches_key(memo->grad_key, read)) {
      state.backward_shapes = std::move(memo);
    } else {
      state.recording = std::make_shared<BackwardShapes>();
      state.recording->grad_key = signature_key(read);
      state.recording->steps.resize(plan_.backward.size());
    }
  }
  state.backward_started = true;
  state.next_stage = 0;
}

std::vector<Tensor> Executor::run_backward_stage(RunState& state, size_t stage) {
  PhaseTimer timer("executor.backward");
  if (!state.backward_started || state.backward_done || stage != state.next_stage) {
    throw std::logic_error("internal error: backward stage " + std::to_string(stage) +
                           " run out of order (next is " + std::to_string(state.next_stage) + ")");
  }
  const BackwardStage& s = plan_.backward_stages[stage];
  const size_t begin = stage == 0 ? 0 : plan_.backward_stages[stage - 1].end;
  const StepReport report{true, op_event_listener()};
  for (size_t i = begin; i < s.end; ++i) {
    const PlanStep& step = plan_.backward[i];
    StepShapes shapes{nullptr, nullptr, &shape_rules_run_, &device_copies_};
    if (step.shape_memo && state.backward_shapes) shapes.known = &state.backward_shapes->steps[i];
    if (step.shape_memo && state.recording) shapes.record = &state.recording->steps[i];
    bool zero = false;
    thread_local std::vector<bool> read;
    if (!state.zero.empty()) {
      read.assign(step.inputs.size(), false);
      for (size_t k = 0; k < step.inputs.size(); ++k)
        read[k] = step.inputs[k] >= 0 && state.zero[step.inputs[k]];
      zero = outputs_are_zero(*step.node, read);
    }
    if (execute_step(step, state.slots, state.seed, shapes, report, zero,
                     state.zero.empty() ? nullptr : &read)) {
      for (int id : step.outputs)
        if (id >= 0) state.zero[id] = 1;
      zero_steps_.fetch_add(1, std::memory_order_relaxed);
    }
    release_after(step, state.slots);
  }
  std::vector<Tensor> grads;
  grads.reserve(s.wrt.size());
  for (int k : s.wrt) {
    const int id = plan_.input_grads[k];
    grads.push_back(id >= 0 ? state.slots[id] : Tensor());
  }
  for (int id : stage_releases_[stage]) state.slots[id] = Tensor();
  if (++state.next_stage == plan_.backward_stages.size()) {
    state.slots.clear();
    state.backward_done = true;
    if (state.recording) {
      std::atomic_store(&state.signature->backward_shapes,
                        std::shared_ptr<const BackwardShapes>(std::move(state.recording)));
    }
    state.backward_shapes.reset();
    state.signature.reset();
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
