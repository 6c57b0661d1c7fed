// Bridge nodes: TorchCall runs a callable on the host framework (a custom
// torch.autograd.Function, an ATen op the engine lacks) and TorchCallGrad its backward
// through the host's autograd; StopGradient is the identity whose output carries no
// gradient (Tensor.detach).
//
// TorchCall(inputs...) -> (outputs..., [state])   attributes name the callable
// TorchCallGrad(state, output grads..., graph inputs read...) -> (input grads...)
// Output shapes are known only once the callable has run: the kernels provide the
// outputs themselves.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <stdexcept>

#include "grad/grad_context.h"
#include "ops/host_bridge.h"
#include "ops/op_utils.h"
#include "ops/ops.h"

namespace ortmodule {

namespace {

std::atomic<HostBridge*> installed_host{nullptr};

}  // namespace

void set_host_bridge(HostBridge* host) { installed_host.store(host); }

HostBridge& host_bridge(const Node& node) {
  HostBridge* host = installed_host.load();
  if (!host) {
    throw std::runtime_error(node.describe() +
                             " runs on PyTorch, but no PyTorch bridge is installed in this "
                             "process; run the graph through the ortmodule Python package");
  }
  return *host;
}

std::vector<OutputInfo> shape_torch_call(const OpContext& ctx) {
  OutputInfo from_kernel;
  from_kernel.alias_of = -2;
  return std::vector<OutputInfo>(ctx.node.outputs.size(), from_kernel);
}

void cpu_torch_call(OpContext& ctx) {
  const Node& n = ctx.node;
  std::vector<bool> requires_grad(ctx.num_inputs(), false);
  if (const Attribute* a = n.attr("requires_grad")) {
    for (size_t i = 0; i < a->ints.size() && i < requires_grad.size(); ++i)
      requires_grad[i] = a->ints[i] != 0;
  }
  // The gradient rule adds the state output after the callable's outputs.
  const int64_t state = n.attr_int("state_output", -1);
  const size_t expected = state >= 0 ? static_cast<size_t>(state) : n.outputs.size();
  std::shared_ptr<void> handle;
  std::vector<Tensor> results =
      host_bridge(n).forward(n, ctx.inputs, requires_grad, state >= 0 ? &handle : nullptr);
  if (results.size() != expected) {
    ctx.fail("the PyTorch callable returned " + std::to_string(results.size()) +
             " tensors where the exported graph has " + std::to_string(expected));
  }
  for (size_t i = 0; i < results.size(); ++i) ctx.out(i) = std::move(results[i]);
  if (state >= 0) ctx.out(static_cast<size_t>(state)) = Tensor::opaque(std::move(handle));
}

void cpu_torch_call_grad(OpContext& ctx) {
  const Tensor& state = ctx.in(0);
  if (!state.handle()) ctx.fail("the forward call's state is missing");
  const size_t num_grads = static_cast<size_t>(ctx.node.attr_int("num_output_grads", 0));
  if (ctx.inputs.size() < 1 + num_grads) ctx.fail("fewer inputs than output gradients");
  std::vector<const Tensor*> output_grads(
      ctx.inputs.begin() + 1, ctx.inputs.begin() + 1 + static_cast<std::ptrdiff_t>(num_grads));
  std::vector<bool> wanted(ctx.outputs.size());
  for (size_t i = 0; i < wanted.size(); ++i) wanted[i] = ctx.node.output(i) != nullptr;
  std::vector<Tensor> grads =
      host_bridge(ctx.node).backward(ctx.node, state.handle(), output_grads, wanted);
  for (size_t i = 0; i < grads.size() && i < ctx.outputs.size(); ++i) {
    if (wanted[i] && !grads[i].defined())
      ctx.fail("no gradient came back for input " + std::to_string(i));
    ctx.out(i) = std::move(grads[i]);
  }
}

// The host computes the gradients with its own autograd; the engine passes the output
// gradients in and the state of the forward call that recorded the graph.
void grad_torch_call(GradContext& g) {
  Node& n = g.node();
  const size_t num_results = n.outputs.size();
  std::vector<int64_t> requires_grad;
  std::vector<bool> wanted;
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    requires_grad.push_back(g.needs_grad(i) ? 1 : 0);
    wanted.push_back(g.needs_grad(i));
  }
  Value* state = g.forward_output(num_results, "torch_call_state");
  state->dtype = DType::UInt8;
  n.attrs["state_output"] = Attribute::make_int(static_cast<int64_t>(num_results));
  n.attrs["requires_grad"] = Attribute::make_ints(requires_grad);
  std::vector<Value*> inputs{state};
  for (size_t i = 0; i < num_results; ++i) inputs.push_back(g.output_grad(i));
  // Graph inputs the call read (parameters, buffers, user inputs), which the call may have
  // saved for backward: read here too, they get the stash's in-place modification check
  // (their memory is owned by PyTorch, so this keeps nothing alive).
  for (Value* in : n.inputs)
    if (in && !in->producer && !in->initializer.defined()) inputs.push_back(in);
  std::vector<Value*> grads =
      g.emit_multi("TorchCallGrad", inputs, wanted,
                   {{"num_output_grads", Attribute::make_int(static_cast<int64_t>(num_results))}},
                   "ai.ortmodule");
  for (size_t i = 0; i < grads.size(); ++i) g.set_input_grad(i, grads[i]);
}

}  // namespace ortmodule
