// Bridge nodes (ai.ortmodule TorchCall) run on the framework that embeds the engine
// (PyTorch): the engine hands a node's inputs over and takes its outputs back. What
// backward needs (the host's autograd record of the call) stays with the host behind an
// opaque handle, which travels through the stash like any forward value and is dropped
// after backward or with the run. The engine sees no host types; the host installs its
// implementation once (csrc/python/torch_call.cpp).
#pragma once

#include <memory>
#include <vector>

#include "ir/graph.h"

namespace ortmodule {

class HostBridge {
 public:
  virtual ~HostBridge() = default;
  // Runs the callable `node` names on `inputs` (several may point to the same tensor).
  // requires_grad[i]: backward wants input i's gradient. When `handle` is given, the
  // host keeps its record of the call there for backward.
  virtual std::vector<Tensor> forward(const Node& node, const std::vector<const Tensor*>& inputs,
                                      const std::vector<bool>& requires_grad,
                                      std::shared_ptr<void>* handle) = 0;
  // Input gradients of the call recorded in `handle`, given the output gradients
  // (nullptr: zero). wanted[i]: input i's gradient is read (zeros where the call does not
  // reach it); the others may be left undefined.
  virtual std::vector<Tensor> backward(const Node& node, const std::shared_ptr<void>& handle,
                                       const std::vector<const Tensor*>& output_grads,
                                       const std::vector<bool>& wanted) = 0;
};

// Installed by the embedding framework; nullptr uninstalls.
void set_host_bridge(HostBridge* host);
// The installed bridge; throws naming `node` when there is none.
HostBridge& host_bridge(const Node& node);

}  // namespace ortmodule
