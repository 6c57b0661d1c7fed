#include "python/torch_boundary.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/Generator.h>
#include <ATen/record_function.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/utils.h>
#include <torch/csrc/autograd/graph_task.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <stdexcept>
#include <tuple>

#include "base/allocator.h"
#include "base/profiler.h"

namespace ortmodule {

namespace {

// The dtypes both sides know, in one table for both directions.
constexpr std::pair<at::ScalarType, DType> kDTypes[] = {
    {at::kFloat, DType::Float32},     {at::kDouble, DType::Float64}, {at::kHalf, DType::Float16},
    {at::kBFloat16, DType::BFloat16}, {at::kLong, DType::Int64},     {at::kInt, DType::Int32},
    {at::kChar, DType::Int8},         {at::kByte, DType::UInt8},     {at::kBool, DType::Bool},
    {at::kShort, DType::Int16},       {at::kUInt16, DType::UInt16},  {at::kUInt32, DType::UInt32},
    {at::kUInt64, DType::UInt64},
};
// Low-bit types, one element per byte on both sides. torch's int4/uint4/int2/uint2 are
// storage-only dtypes: each byte holds the element's bits in its low bits.
constexpr std::pair<at::ScalarType, DType> kLowBitDTypes[] = {
    {at::ScalarType::Float8_e4m3fn, DType::Float8E4M3FN},
    {at::ScalarType::Float8_e4m3fnuz, DType::Float8E4M3FNUZ},
    {at::ScalarType::Float8_e5m2, DType::Float8E5M2},
    {at::ScalarType::Float8_e5m2fnuz, DType::Float8E5M2FNUZ},
    {at::ScalarType::Float8_e8m0fnu, DType::Float8E8M0},
    {at::ScalarType::UInt4, DType::UInt4},
    {at::ScalarType::Int4, DType::Int4},
    {at::ScalarType::UInt2, DType::UInt2},
    {at::ScalarType::Int2, DType::Int2},
};

// Low-bit types torch has no one-element-per-byte dtype for: they cross as uint8 tensors
// holding each element's bit pattern in the low bits. An output of such a type comes out
// as uint8; a uint8 tensor fed to an input the model declares with such a type is read
// as that type.
bool crosses_as_uint8(DType t) {
  return t == DType::Float4E2M1 || t == DType::Float6E2M3 || t == DType::Float6E3M2;
}

// Error messages name the tensor as "<kind> '<name>'"; they are built only on failure.
std::string tensor_label(const char* kind, const std::string& name) {
  return std::string(kind) + " '" + name + "'";
}

DType dtype_from_torch(at::ScalarType t, const char* kind, const std::string& name) {
  for (const auto& [torch_type, dtype] : kDTypes)
    if (torch_type == t) return dtype;
  for (const auto& [torch_type, dtype] : kLowBitDTypes)
    if (torch_type == t) return dtype;
  throw std::invalid_argument(tensor_label(kind, name) + " has dtype " +
                              std::string(c10::toString(t)) +
                              ", which the engine does not support");
}

std::mutex g_observer_mutex;
std::atomic<bool> g_has_observer{false};
std::function<void(const char*)>& step_observer() {
  static auto* observer = new std::function<void(const char*)>();
  return *observer;
}

void notify_step_observer(const char* phase) {
  if (!g_has_observer.load(std::memory_order_relaxed)) return;
  std::function<void(const char*)> observer;
  {
    std::lock_guard<std::mutex> lock(g_observer_mutex);
    observer = step_observer();
  }
  if (observer) observer(phase);
}

uint64_t draw_seed() {
  auto gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  return gen.get<at::CPUGeneratorImpl>()->random64();
}

// A tensor backward reads, with its version at forward time: an in-place change in
// between would silently corrupt the gradient, so it is reported instead. Outputs are
// tracked through their version counter alone (holding the tensor would make a cycle
// through its grad_fn).
struct SavedVersion {
  c10::VariableVersion counter;
  uint32_t version = 0;
  bool is_output = false;
  int position = 0;  // in the program's inputs or outputs
};

// A stashed input whose memory torch may move between forward and backward: FSDP2 frees
// an unsharded parameter after forward (its storage resized to zero bytes) and all-gathers
// it again into the same storage, at a new address, before backward. Autograd reads a
// saved tensor's storage when backward runs; the engine does the same by pointing its
// storage at the torch storage's current memory (see rebind_inputs).
struct MovableInput {
  std::weak_ptr<Storage> storage;  // the engine's view of the input; while it lives, its
                                   // deleter keeps `tensor` alive
  c10::TensorImpl* tensor = nullptr;
  int position = 0;  // in the program's inputs
};

// What the backward nodes of one forward call share: the stash and the run in progress.
struct BackwardRun {
  std::shared_ptr<Program> program;
  std::shared_ptr<RunState> saved;  // the stash; null once a backward without retain_graph took it
  std::shared_ptr<RunState> working;  // the backward in progress
  std::vector<SavedVersion> versions;
  std::vector<MovableInput> movable;
  // Storages already handed to autograd during the backward in progress (see hand_out).
  std::vector<const Storage*> handed_out;
};

[[noreturn]] void throw_modified(const Program& program, const SavedVersion& saved) {
  const std::string label = saved.is_output
                                ? "output " + std::to_string(saved.position) + " ('" +
                                      program.output_names()[saved.position] + "') of the ORTModule"
                                : "input '" + program.input_names()[saved.position] + "'";
  throw std::runtime_error(
      "ortmodule: one of the variables needed for gradient computation has been modified by an "
      "inplace operation: " +
      label + ", which backward reads, was modified in place after the forward call (version " +
      std::to_string(saved.version) + " -> " + std::to_string(saved.counter.current_version()) +
      "); modify a copy (.clone()) or make the change after backward");
}

// AccumulateGrad may keep the tensor it receives as param.grad without copying it, so a
// gradient must not share memory with anything else: not with memory the engine does not
// own (an incoming gradient passed through, a constant) and not with another gradient
// of the same backward (two wrt inputs whose gradient nodes were merged).
// A freed storage's address may come back later in the same backward: that costs one
// copy, never a wrong gradient.
at::Tensor hand_out(const Tensor& grad, std::vector<const Storage*>& handed_out) {
  const Storage* storage = grad.storage().get();
  bool shared = !storage->writable;
  for (const Storage* s : handed_out) shared = shared || s == storage;
  if (shared) return to_torch(grad).clone();
  handed_out.push_back(storage);
  return to_torch(grad);
}

// Backward of one forward run, split into the plan's backward stages: one node per
// group of consecutive stages, chained through an extra output edge. A group ends after
// a stage whose gradients have hooks (DistributedDataParallel's all-reduce, a tensor
// hook, a post-accumulate hook): the node returns the gradients that are final after it,
// so autograd runs their AccumulateGrad nodes (highest priority in its ready queue) and
// the hooks on them before the next group. Other stages share a node up to a size
// (see attach_backward), since every node costs autograd's per-node bookkeeping. Dependencies,
// hooks, retain_graph and torch.autograd.grad(inputs=...) then follow autograd's own rules. The
// first node's inputs are the differentiable outputs.
struct ProgramBackward : public torch::autograd::Node {
  std::shared_ptr<BackwardRun> run;
  size_t first_stage = 0;  // the plan's backward stages [first_stage, end_stage)
  size_t end_stage = 0;
  bool last = false;
  std::vector<int> output_slot;  // first node: autograd input index -> program output index
  // First node: outputs the gradient graph treats as differentiable (their dtype was
  // unknown when it was built) that turned out not to be floating point. Autograd gives
  // them no gradient, so backward gets zeros. {program output, sizes, dtype and device}
  std::vector<std::tuple<int, std::vector<int64_t>, at::TensorOptions>> untracked_outputs;

  std::string name() const override {
    return first_stage == 0 ? "ortmodule::ProgramBackward" : "ortmodule::ProgramBackwardStage";
  }

  torch::autograd::variable_list apply(torch::autograd::variable_list&& grads) override {
    PhaseTimer timer("boundary.backward");
    Program& program = *run->program;
    if (first_stage == 0) begin(program, grads);
    if (!run->working || run->working->next_stage != first_stage) {
      throw std::logic_error("internal error: ortmodule backward stage " +
                             std::to_string(first_stage) + " ran out of order");
    }
    torch::autograd::variable_list result(num_outputs());
    size_t j = 0;
    for (size_t stage = first_stage; stage < end_stage; ++stage) {
      std::vector<Tensor> stage_grads = program.executor().run_backward_stage(*run->working, stage);
      for (const Tensor& g : stage_grads) {
        if (g.defined() && should_compute_output(j)) result[j] = hand_out(g, run->handed_out);
        ++j;
      }
    }
    if (last) {
      run->working.reset();
      run->handed_out.clear();
      notify_step_observer("backward");
    }
    return result;  // the edge to the next node gets an undefined tensor
  }

  // The zeros standing for an output's gradient autograd does not give: on the CPU, memory
  // that costs nothing unless read (base/allocator.h: zero_storage); backward mostly skips
  // or leaves out such zeros (runtime/zero_gradients.h).
  static Tensor zero_gradient(const torch::autograd::InputMetadata& meta, const std::string& name) {
    if (!meta.options().device().is_cpu())
      return from_torch(meta.zeros_like(), "gradient of output", name);
    const auto sizes = meta.shape_as_dim_vector();
    const DType dtype =
        dtype_from_torch(meta.options().dtype().toScalarType(), "gradient of output", name);
    Shape shape;
    for (const c10::SymInt& d : sizes) shape.push_back(d.expect_int());
    return Tensor(zero_storage(tensor_bytes_checked(shape_numel_checked(shape), dtype)), dtype,
                  shape);
  }

  void begin(Program& program, const torch::autograd::variable_list& grads) {
    if (torch::autograd::GradMode::is_enabled()) {
      throw std::runtime_error(
          "ortmodule: second-order gradients are not supported: backward through an ORTModule "
          "ran with create_graph=True (a gradient of a gradient), but the gradients the engine "
          "computes are not differentiable themselves. Compute second-order gradients with the "
          "plain module (ORTModule(model).module), or call backward without create_graph=True");
    }
    if (!run->saved) {
      throw std::runtime_error(
          "ortmodule: trying to backward through the graph a second time: backward already ran "
          "through this ORTModule forward call and freed its saved values; pass "
          "retain_graph=True to the first backward if you need to backward twice");
    }
    for (const SavedVersion& v : run->versions)
      if (v.counter.current_version() != v.version) throw_modified(program, v);
    rebind_inputs(program);
    std::vector<Tensor> output_grads(program.output_names().size());
    // Outputs nobody differentiated get zeros, which backward skips where only they flow.
    std::vector<bool> zero_outputs(output_grads.size(), false);
    for (size_t i = 0; i < grads.size(); ++i) {
      const int slot = output_slot[i];
      zero_outputs[slot] = !grads[i].defined();
      const std::string& name = program.output_names()[slot];
      output_grads[slot] = grads[i].defined() ? from_torch(grads[i], "gradient of output", name)
                                              : zero_gradient(input_metadata(i), name);
    }
    for (const auto& [slot, sizes, options] : untracked_outputs) {
      output_grads[slot] =
          from_torch(at::zeros(sizes, options), "gradient of output", program.output_names()[slot]);
      zero_outputs[slot] = true;
    }
    if (torch::autograd::get_current_graph_task_keep_graph()) {
      // retain_graph: run on a copy of the stash so a later backward finds it intact.
      run->working = std::make_shared<RunState>(*run->saved);
    } else {
      // Free stashed values as backward consumes them, and the rest when it ends.
      run->working = std::move(run->saved);
    }
    run->handed_out.clear();
    program.executor().begin_backward(*run->working, output_grads, zero_outputs);
  }

  // Points each stashed input's engine storage at its torch tensor's memory now.
  void rebind_inputs(const Program& program) const {
    for (const MovableInput& m : run->movable) {
      std::shared_ptr<Storage> storage = m.storage.lock();
      if (!storage) continue;  // no longer in the stash
      const c10::StorageImpl* torch_storage = m.tensor->storage().unsafeGetStorageImpl();
      const size_t needed = m.tensor->storage_offset() * m.tensor->itemsize() + storage->bytes;
      if (torch_storage->nbytes() < needed) {
        throw std::runtime_error(
            "ortmodule: input '" + program.input_names()[m.position] +
            "', which backward reads, has had its memory freed since the forward call (its "
            "storage holds " +
            std::to_string(torch_storage->nbytes()) + " bytes, backward needs " +
            std::to_string(needed) +
            "); a parameter resharded after forward must be gathered again before backward "
            "(fully_shard does this when the ORTModule is inside the module it shards)");
      }
      storage->data = m.tensor->mutable_data();
    }
  }

  void release_variables() override {
    if (first_stage == 0) run->saved.reset();
  }
};

// Whether `t` shares memory with a value backward reads.
bool shares_stash(const Tensor& t, const RunState& state, const Plan& plan) {
  for (int id : plan.stash) {
    const Tensor& s = state.slots[id];
    if (s.defined() && s.storage() == t.storage()) return true;
  }
  return false;
}

// Whether autograd runs hooks when the gradient along `edge` arrives.
bool has_hooks(const torch::autograd::Edge& edge) {
  torch::autograd::Node* f = edge.function.get();
  if (f == nullptr) return false;
  return !f->pre_hooks().empty() || !f->post_hooks().empty() || !f->tensor_pre_hooks().empty() ||
         !f->retains_grad_hooks().empty() || f->tensor_post_acc_grad_hooks() != nullptr;
}

// torch's handle to an autograd node, read from its Edge: std::shared_ptr in torch 2.11,
// c10::intrusive_ptr in later releases. NodeHandle<T> is that handle to a T, and make_node
// creates one, so the same code builds against the whole supported range.
template <typename Handle, typename T>
struct RebindHandle;
template <template <typename...> class Ptr, typename Node, typename... Rest, typename T>
struct RebindHandle<Ptr<Node, Rest...>, T> {
  using type = Ptr<T>;
};
template <typename T>
using NodeHandle = typename RebindHandle<decltype(torch::autograd::Edge::function), T>::type;

template <typename T>
std::shared_ptr<T> make_node(std::shared_ptr<T>*) {
  return std::make_shared<T>();
}
template <typename T>
c10::intrusive_ptr<T> make_node(c10::intrusive_ptr<T>*) {
  return c10::make_intrusive<T>();
}

// Builds the chain of backward nodes for one forward call and attaches the outputs.
void attach_backward(const std::shared_ptr<Program>& program, std::shared_ptr<RunState> state,
                     const std::vector<at::Tensor>& inputs,
                     const std::vector<Tensor>& engine_inputs, const std::vector<Tensor>& outs,
                     std::vector<at::Tensor>& results) {
  const Plan& plan = program->executor().plan();
  auto run = std::make_shared<BackwardRun>();
  run->program = program;
  for (int p : program->stashed_input_positions()) {
    const c10::VariableVersion& counter = torch::autograd::impl::version_counter(inputs[p]);
    run->versions.push_back({counter, counter.current_version(), false, p});
    // Inputs read in place (not a contiguous copy made by from_torch) may move.
    const Tensor& engine_input = engine_inputs[p];
    if (engine_input.defined() && engine_input.raw() == inputs[p].data_ptr()) {
      run->movable.push_back({engine_input.storage(), inputs[p].unsafeGetTensorImpl(), p});
    }
  }
  for (size_t i = 0; i < outs.size(); ++i) {
    if (!shares_stash(outs[i], *state, plan)) continue;
    const c10::VariableVersion& counter = torch::autograd::impl::version_counter(results[i]);
    run->versions.push_back({counter, counter.current_version(), true, static_cast<int>(i)});
  }
  run->saved = std::move(state);

  const std::vector<int>& positions = program->wrt_positions();
  const std::vector<BackwardStage>& stages = plan.backward_stages;
  // Groups of stages, each ending after a stage with a hooked gradient, once its
  // gradients reach kGroupBytes (so that, when they are added to existing .grad, the
  // memory they hold until the node returns stays small), or at the end.
  constexpr size_t kGroupBytes = size_t{1} << 20;
  std::vector<std::pair<size_t, size_t>> groups;
  std::vector<torch::autograd::edge_list> group_edges(1);
  size_t bytes = 0;
  for (size_t k = 0, first = 0; k < stages.size(); ++k) {
    bool ends = k + 1 == stages.size();
    for (int w : stages[k].wrt) {
      const at::Tensor& input = inputs[positions[w]];
      bytes += input.nbytes();
      group_edges.back().push_back(torch::autograd::impl::gradient_edge(input));
      ends = ends || has_hooks(group_edges.back().back());
    }
    if (!ends && bytes < kGroupBytes) continue;
    groups.emplace_back(first, k + 1);
    if (k + 1 < stages.size()) group_edges.emplace_back();
    first = k + 1;
    bytes = 0;
  }
  std::vector<NodeHandle<ProgramBackward>> nodes(groups.size());
  for (size_t g = 0; g < groups.size(); ++g) {
    nodes[g] = make_node<ProgramBackward>(static_cast<NodeHandle<ProgramBackward>*>(nullptr));
    nodes[g]->run = run;
    nodes[g]->first_stage = groups[g].first;
    nodes[g]->end_stage = groups[g].second;
    nodes[g]->last = g + 1 == groups.size();
  }
  // Last node first: autograd requires a node's children to be complete before it
  // gets parents (topological numbers).
  for (size_t g = groups.size(); g-- > 0;) {
    if (g + 1 < groups.size()) {
      nodes[g + 1]->add_input_metadata(torch::autograd::Node::undefined_input());
      group_edges[g].emplace_back(nodes[g + 1], 0);
    }
    nodes[g]->set_next_edges(std::move(group_edges[g]));
  }
  const std::vector<bool>& differentiable = program->output_differentiable();
  for (size_t i = 0; i < results.size(); ++i) {
    if (!differentiable[i]) continue;
    if (!results[i].is_floating_point()) {
      nodes[0]->untracked_outputs.emplace_back(static_cast<int>(i), results[i].sizes().vec(),
                                               results[i].options());
      continue;
    }
    nodes[0]->output_slot.push_back(static_cast<int>(i));
    torch::autograd::set_history(results[i], nodes[0]);
  }
}

}  // namespace

at::ScalarType dtype_to_torch(DType t) {
  if (crosses_as_uint8(t)) return at::kByte;
  for (const auto& [torch_type, dtype] : kDTypes)
    if (dtype == t) return torch_type;
  for (const auto& [torch_type, dtype] : kLowBitDTypes)
    if (dtype == t) return torch_type;
  throw std::logic_error("tensor with undefined dtype");
}

Tensor from_torch(const at::Tensor& t_in, const char* kind, const std::string& name) {
  if (!t_in.defined()) throw std::invalid_argument(tensor_label(kind, name) + " is undefined");
  Device device;
  if (t_in.device().is_cuda()) {
    require_cuda_backend(tensor_label(kind, name) + " on " + t_in.device().str());
    device = Device::cuda(t_in.device().index());
  } else if (!t_in.device().is_cpu()) {
    throw std::invalid_argument(tensor_label(kind, name) + " is on " + t_in.device().str() +
                                "; the engine runs on the CPU and on CUDA devices only");
  }
  // Autograd's efficient zero tensors (the gradient of sign, of an unused output) have no
  // memory to read: they become real zeros.
  at::Tensor t = t_in._is_zerotensor()
                     ? at::zeros(t_in.sizes(), t_in.options().device(t_in.device()))
                     : t_in.resolve_conj().resolve_neg().contiguous();
  DType dt = dtype_from_torch(t.scalar_type(), kind, name);
  Shape shape(t.sizes().begin(), t.sizes().end());
  auto storage = std::make_shared<Storage>(t.data_ptr(), t.nbytes(), nullptr);
  storage->writable = false;
  storage->device = device;
  // The deleter holds a reference to the torch tensor: its memory lives as long as the
  // engine uses it. (A raw pointer keeps the std::function free of a heap allocation.)
  c10::TensorImpl* impl = t.unsafeReleaseTensorImpl();
  storage->deleter = [impl](void*) { c10::intrusive_ptr<c10::TensorImpl>::reclaim(impl); };
  return Tensor(std::move(storage), dt, std::move(shape));
}

at::Tensor to_torch(const Tensor& t) {
  at::TensorOptions options = at::TensorOptions().dtype(dtype_to_torch(t.dtype()));
  if (t.device().is_cuda())
    options =
        options.device(at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(t.device().index)));
  // The torch tensor's context holds the engine storage (one allocation, no std::function).
  auto* holder = new std::shared_ptr<Storage>(t.storage());
  return at::for_blob(t.raw(), t.shape())
      .context(holder, [](void* h) { delete static_cast<std::shared_ptr<Storage>*>(h); })
      .options(options)
      .make_tensor();
}

namespace {

// The caller passes every input, or only those without a default (graph inputs that the
// model also lists as initializers take the initializer's value when left out): `given`
// itself, or `full` filled with every input.
const std::vector<at::Tensor>& complete_inputs(const Program& program,
                                               const std::vector<at::Tensor>& given,
                                               std::vector<at::Tensor>& full) {
  const std::vector<std::string>& names = program.input_names();
  const std::vector<Tensor>& defaults = program.input_defaults();
  if (given.size() == names.size()) return given;
  size_t required = 0;
  for (const Tensor& d : defaults) required += d.defined() ? 0 : 1;
  if (given.size() != required) {
    std::string message = "program expects " + std::to_string(names.size()) + " inputs";
    if (required != names.size()) {
      message += " (or the " + std::to_string(required) +
                 " without a default; the others are initializers of the model)";
    }
    throw std::invalid_argument(message + ", got " + std::to_string(given.size()));
  }
  full.clear();
  full.reserve(names.size());
  size_t next = 0;
  for (const Tensor& d : defaults) full.push_back(d.defined() ? to_torch(d) : given[next++]);
  return full;
}

}  // namespace

std::vector<at::Tensor> run_program(const std::shared_ptr<Program>& program,
                                    const std::vector<at::Tensor>& given) {
  PhaseTimer timer("boundary.forward");
  RECORD_FUNCTION("ortmodule::forward", c10::ArrayRef<const c10::IValue>{});
  const std::vector<std::string>& names = program->input_names();
  std::vector<at::Tensor> full;
  const std::vector<at::Tensor>& inputs = complete_inputs(*program, given, full);
  std::vector<Tensor> engine_inputs;
  engine_inputs.reserve(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    engine_inputs.push_back(from_torch(inputs[i], "input", names[i]));
    const DType declared = program->input_dtypes()[i];
    if (crosses_as_uint8(declared) && engine_inputs.back().dtype() == DType::UInt8) {
      const Tensor& t = engine_inputs.back();
      engine_inputs.back() = Tensor(t.storage(), declared, t.shape());
    }
  }

  // One device per call: the engine never moves user tensors between devices.
  for (size_t i = 1; i < inputs.size(); ++i) {
    if (engine_inputs[i].device() == engine_inputs[0].device()) continue;
    throw std::invalid_argument(
        "input '" + names[i] + "' is on " + engine_inputs[i].device().str() + " but input '" +
        names[0] + "' is on " + engine_inputs[0].device().str() +
        "; the module's parameters, buffers and inputs must be on one device (move the module "
        "with .to(device) and pass inputs on that device)");
  }
  bool needs_graph = false;
  if (torch::autograd::GradMode::is_enabled()) {
    for (int p : program->wrt_positions()) needs_graph = needs_graph || inputs[p].requires_grad();
  }
  if (needs_graph && !program->has_backward()) {
    throw std::logic_error("program was built without gradients but inputs require grad");
  }
  std::shared_ptr<RunState> state;
  std::vector<Tensor> outs;
  {
    // Buffers written back in place must not trip autograd's version checks.
    at::NoGradGuard no_grad;
    // Only graphs with random ops draw from torch's generator, so the user's random
    // stream advances exactly as in eager mode.
    const uint64_t seed = program->uses_randomness() ? draw_seed() : 0;
    outs = program->executor().forward(engine_inputs, seed, needs_graph ? &state : nullptr);
  }
  std::vector<at::Tensor> results;
  results.reserve(outs.size());
  for (const Tensor& o : outs) results.push_back(to_torch(o));
  if (needs_graph) attach_backward(program, std::move(state), inputs, engine_inputs, outs, results);
  notify_step_observer("forward");
  return results;
}

void set_step_observer(std::function<void(const char* phase)> observer) {
  std::lock_guard<std::mutex> lock(g_observer_mutex);
  g_has_observer = static_cast<bool>(observer);
  step_observer() = std::move(observer);
}

}  // namespace ortmodule
