// The op table: one row per op, naming everything the engine needs to know about
// it (shape rule, CPU kernel, CUDA kernel, gradient rule, in-place eligibility,
// gradient-check tolerance). The registry, the per-op tests (through
// op_table() in the bindings) and the docs are generated from it.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "ir/graph.h"

namespace ortmodule {

class GradContext;

struct OutputInfo {
  DType dtype = DType::Undefined;
  Shape shape;
  int alias_of = -1;  // >= 0: output is a view of that input (same memory, this shape)
};

// What a shape rule and a kernel see of one node execution.
struct OpContext {
  const Node& node;
  std::vector<const Tensor*> inputs;  // nullptr for omitted optional inputs
  std::vector<Tensor> outputs;        // allocated by the executor from the shape rule
  uint64_t seed = 0;                  // for random ops, drawn from torch's generator

  size_t num_inputs() const { return inputs.size(); }
  bool has_input(size_t i) const { return i < inputs.size() && inputs[i] != nullptr; }
  const Tensor& in(size_t i) const;  // throws naming the node when absent
  bool has_output(size_t i) const { return i < outputs.size() && outputs[i].defined(); }
  Tensor& out(size_t i) {
    if (i >= outputs.size()) fail("output " + std::to_string(i) + " is required but missing");
    return outputs[i];
  }
  [[noreturn]] void fail(const std::string& message) const;
};

using ShapeFn = std::vector<OutputInfo> (*)(const OpContext&);
using KernelFn = void (*)(OpContext&);
using GradFn = void (*)(GradContext&);

struct OpDef {
  std::string domain;  // "" = ONNX default domain, "com.microsoft", "ai.ortmodule"
  std::string op_type;
  int since_version = 1;
  int until_version = 1 << 30;
  ShapeFn shape = nullptr;
  KernelFn cpu = nullptr;
  // The CUDA twin (csrc/kernels/cuda, declared in ops/cuda_ops.h). Null in a build without
  // CUDA kernels even where the row names one (cuda_twin).
  KernelFn cuda = nullptr;
  bool cuda_twin = false;  // the row names a CUDA kernel (whether or not this build has it)
  // Inputs a CUDA step reads on the host (shape-like int64 tensors its shape rule reads):
  // bit i set for input i; bit 31 covers input 31 and every later one (variadic shape
  // inputs). They are brought to the host; other inputs to the step's device.
  uint32_t cuda_host_inputs = 0;
  // Reads only its inputs' shapes (Shape, Size): runs on the host whatever their device.
  bool reads_shapes_only = false;
  // Computes on the host whatever its inputs' device (Constant, and ops whose every input is
  // a shape or a scalar: ConstantOfShape, Range, BroadcastGradientArgs): inputs on a device
  // are brought to the host, and consumers on a device take the output there.
  bool runs_on_host = false;
  // Inputs whose values never reach an output differentiably (bit i for input i): CastLike's
  // target, read for its dtype only. A value computed from a parameter feeding only such
  // inputs (a bound cast like the input, as torch.onnx writes Clip's) needs no gradient.
  uint32_t no_grad_inputs = 0;
  GradFn grad = nullptr;       // nullptr: no gradient rule
  bool differentiable = true;  // false: outputs never carry gradients (Shape, Constant, ...)
  // Piecewise constant (Floor, Sign): no gradient flows through it, but as in PyTorch its
  // floating-point outputs require grad where an input does (their gradient is zero).
  bool zero_gradient = false;
  int inplace_input = -1;  // output 0 may take over this input's buffer at its last use
  // Leading outputs that carry gradients (-1: all). The others (running statistics, saved
  // mean/inv_std, indices, masks, log_prob) are returned without autograd history; a gradient
  // arriving at one of them through another node is refused by the gradient builder.
  int grad_outputs = -1;
  double grad_rtol = 1e-5;  // finite-difference check tolerances (double precision)
  double grad_atol = 1e-6;
  bool internal = false;  // emitted only by the gradient builder / graph rewrites
  bool random = false;    // draws random numbers: needs a per-run seed, never merged by CSE
  // Runs on the host framework (bridge nodes): outputs shaped by the call, effects the
  // engine cannot see; never merged by CSE, shape-cached or recomputed.
  bool host_call = false;
  // Outputs whose values are written back into an input after forward:
  // {output index, input index} (BatchNormalization running statistics).
  std::vector<std::pair<int, int>> state_writeback;
};

const std::vector<OpDef>& op_table();
// The row for (domain, op_type) valid at `opset`, or nullptr.
const OpDef* find_op(const std::string& domain, const std::string& op_type, int64_t opset);
// Sorted "Op (domain)" names, for error messages.
std::string supported_ops_list();

}  // namespace ortmodule
