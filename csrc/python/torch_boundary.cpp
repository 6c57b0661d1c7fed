#include "python/torch_boundary.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/Generator.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/utils.h>
#include <torch/csrc/autograd/graph_task.h>

#include <mutex>
#include <stdexcept>
#include <tuple>

namespace ortmodule {

namespace {

// The dtypes both sides know, in one table for both directions.
constexpr std::pair<at::ScalarType, DType> kDTypes[] = {
    {at::kFloat, DType::Float32},     {at::kDouble, DType::Float64}, {at::kHalf, DType::Float16},
    {at::kBFloat16, DType::BFloat16}, {at::kLong, DType::Int64},     {at::kInt, DType::Int32},
    {at::kChar, DType::Int8},         {at::kByte, DType::UInt8},     {at::kBool, DType::Bool},
};

// Error messages name the tensor as "<kind> '<name>'"; they are built only on failure.
std::string tensor_label(const char* kind, const std::string& name) {
  return std::string(kind) + " '" + name + "'";
}

DType dtype_from_torch(at::ScalarType t, const char* kind, const std::string& name) {
  for (const auto& [torch_type, dtype] : kDTypes)
    if (torch_type == t) return dtype;
  throw std::invalid_argument(tensor_label(kind, name) + " has dtype " +
                              std::string(c10::toString(t)) +
                              ", which the engine does not support");
}

uint64_t draw_seed() {
  auto gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  return gen.get<at::CPUGeneratorImpl>()->random64();
}

// Backward of one forward run. Its next edges are the program inputs; its inputs
// (in autograd's sense) are the differentiable outputs.
struct ProgramBackward : public torch::autograd::Node {
  std::shared_ptr<Program> program;
  std::shared_ptr<RunState> state;
  std::vector<int> output_slot;  // autograd input index -> program output index
  // Inputs backward reads, with their version at forward time: an in-place change
  // in between would silently corrupt the gradient, so it is reported instead.
  std::vector<std::pair<at::Tensor, uint32_t>> saved_versions;
  std::vector<int> saved_positions;  // their program input positions, for the error message
  size_t program_outputs = 0;
  // Outputs the gradient graph treats as differentiable (their dtype was unknown when it
  // was built) that turned out not to be floating point: autograd gives them no
  // gradient, so backward gets zeros. {program output, sizes, dtype}
  std::vector<std::tuple<int, std::vector<int64_t>, at::ScalarType>> untracked_outputs;

  std::string name() const override { return "ortmodule::ProgramBackward"; }

  torch::autograd::variable_list apply(torch::autograd::variable_list&& grads) override {
    if (!state) {
      throw std::runtime_error(
          "ortmodule: backward ran twice through the same forward call, but its saved values "
          "were freed after the first backward; pass retain_graph=True to the first backward");
    }
    for (size_t i = 0; i < saved_versions.size(); ++i) {
      const auto& [tensor, version] = saved_versions[i];
      if (tensor._version() != version) {
        throw std::runtime_error("ortmodule: input '" + program->input_names()[saved_positions[i]] +
                                 "', which backward needs, was modified in place "
                                 "after the forward call (version " +
                                 std::to_string(version) + " -> " +
                                 std::to_string(tensor._version()) +
                                 "); modify a copy or move the change after backward");
      }
    }
    std::vector<Tensor> output_grads(program_outputs);
    for (size_t i = 0; i < grads.size(); ++i) {
      const int slot = output_slot[i];
      output_grads[slot] =
          from_torch(grads[i].defined() ? grads[i] : input_metadata(i).zeros_like(),
                     "gradient of output", program->output_names()[slot]);
    }
    for (const auto& [slot, sizes, dtype] : untracked_outputs) {
      output_grads[slot] = from_torch(at::zeros(sizes, at::TensorOptions(dtype)),
                                      "gradient of output", program->output_names()[slot]);
    }
    std::vector<Tensor> input_grads;
    if (torch::autograd::get_current_graph_task_keep_graph()) {
      // retain_graph: run on a copy of the stash so a later backward finds it intact.
      RunState copy = *state;
      input_grads = program->executor().backward(copy, output_grads);
    } else {
      // Free stashed values as backward consumes them, and the rest when it ends.
      std::shared_ptr<RunState> s = std::move(state);
      input_grads = program->executor().backward(*s, output_grads);
    }
    torch::autograd::variable_list result(num_outputs());
    const std::vector<int>& positions = program->wrt_positions();
    for (size_t k = 0; k < positions.size(); ++k) {
      if (!input_grads[k].defined() || !should_compute_output(positions[k])) continue;
      result[positions[k]] = to_torch(input_grads[k]);
    }
    return result;
  }

  void release_variables() override {
    state.reset();
    saved_versions.clear();
  }
};

}  // namespace

at::ScalarType dtype_to_torch(DType t) {
  for (const auto& [torch_type, dtype] : kDTypes)
    if (dtype == t) return torch_type;
  throw std::logic_error("tensor with undefined dtype");
}

Tensor from_torch(const at::Tensor& t_in, const char* kind, const std::string& name) {
  if (!t_in.defined()) throw std::invalid_argument(tensor_label(kind, name) + " is undefined");
  if (!t_in.device().is_cpu()) {
    throw std::invalid_argument(tensor_label(kind, name) + " is on " + t_in.device().str() +
                                "; this build of the engine runs on the CPU only");
  }
  at::Tensor t = t_in.contiguous();
  DType dt = dtype_from_torch(t.scalar_type(), kind, name);
  auto holder = std::make_shared<at::Tensor>(t);
  auto storage = std::make_shared<Storage>(t.data_ptr(), t.nbytes(), [holder](void*) {});
  storage->writable = false;
  return Tensor(storage, dt, Shape(t.sizes().begin(), t.sizes().end()));
}

at::Tensor to_torch(const Tensor& t) {
  std::shared_ptr<Storage> storage = t.storage();
  std::vector<int64_t> shape(t.shape().begin(), t.shape().end());
  return at::from_blob(
      t.raw(), shape, [storage](void*) {}, at::TensorOptions().dtype(dtype_to_torch(t.dtype())));
}

std::vector<at::Tensor> run_program(const std::shared_ptr<Program>& program,
                                    const std::vector<at::Tensor>& inputs) {
  const std::vector<std::string>& names = program->input_names();
  if (inputs.size() != names.size()) {
    throw std::invalid_argument("program expects " + std::to_string(names.size()) +
                                " inputs, got " + std::to_string(inputs.size()));
  }
  std::vector<Tensor> engine_inputs;
  engine_inputs.reserve(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i)
    engine_inputs.push_back(from_torch(inputs[i], "input", names[i]));

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
  if (!needs_graph) return results;

  auto node = c10::make_intrusive<ProgramBackward>();
  node->program = program;
  node->state = std::move(state);
  node->program_outputs = outs.size();
  node->set_next_edges(torch::autograd::collect_next_edges(inputs));
  for (int p : program->stashed_input_positions()) {
    node->saved_versions.emplace_back(inputs[p], inputs[p]._version());
    node->saved_positions.push_back(p);
  }
  const std::vector<bool>& differentiable = program->output_differentiable();
  for (size_t i = 0; i < results.size(); ++i) {
    if (!differentiable[i]) continue;
    if (!results[i].is_floating_point()) {
      node->untracked_outputs.emplace_back(static_cast<int>(i), results[i].sizes().vec(),
                                           results[i].scalar_type());
      continue;
    }
    node->output_slot.push_back(static_cast<int>(i));
    torch::autograd::set_history(results[i], node);
  }
  return results;
}

}  // namespace ortmodule
