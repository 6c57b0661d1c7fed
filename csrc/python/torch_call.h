// The PyTorch side of bridge nodes (ops/host_bridge.h): TorchCall nodes run a
// registered Python callable (a custom torch.autograd.Function, with its own forward
// and backward) or an ATen op through the dispatcher (no Python), on at::Tensors that
// share the engine's memory; backward is torch::autograd::grad over the recorded call.
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>

namespace ortmodule {

// Installs the bridge into the engine (once, at module import).
void install_torch_bridge();

// Python callables that TorchCall nodes name by their `callable_id` attribute:
// fn(*tensors) -> tuple of tensors. Registration needs the GIL.
int64_t register_callable(pybind11::function fn);
void release_callable(int64_t id);

}  // namespace ortmodule
