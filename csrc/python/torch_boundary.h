// The only place where torch tensors meet engine tensors: zero-copy conversion
// both ways and the autograd node that runs the backward part of a Program.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <vector>

#include "runtime/program.h"

namespace ortmodule {

// `kind` and `name` label the tensor in error messages ("input 'x'").
Tensor from_torch(const at::Tensor& t, const char* kind, const std::string& name);
at::Tensor to_torch(const Tensor& t);
at::ScalarType dtype_to_torch(DType t);

// Runs the program's forward on `inputs` (user tensors, then parameters and
// buffers, in the program's input order). When gradients are enabled and some wrt
// input requires grad, the outputs are attached to an autograd node whose backward
// runs the program's backward part, so gradients flow into param.grad.
std::vector<at::Tensor> run_program(const std::shared_ptr<Program>& program,
                                    const std::vector<at::Tensor>& inputs);

// torch.profiler events for every engine op (op_events.cpp); on from the module's import.
void set_op_events(bool enabled);
bool op_events_enabled();

// Called with "forward" after every forward run and "backward" after every backward run
// through the engine (ORTMODULE_PRINT_MEMORY_STATS); an empty function removes it. The
// observer runs on the thread of the run, without the GIL.
void set_step_observer(std::function<void(const char* phase)> observer);

}  // namespace ortmodule
