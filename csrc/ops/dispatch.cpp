#include "ops/dispatch.h"

#include <algorithm>

namespace ortmodule {

namespace {

bool reads_on_host(const OpDef& def, size_t i) {
  return (def.cuda_host_inputs >> std::min<size_t>(i, 31)) & 1u;
}

std::string input_label(const OpContext& ctx, size_t i) {
  const Value* v = ctx.node.input(i);
  return "input " + std::to_string(i) + (v ? " ('" + v->name + "')" : std::string());
}

// The first input (not read on the host) on a CUDA device, or -1.
int first_cuda_input(const OpContext& ctx) {
  const OpDef* def = ctx.node.def;
  for (size_t i = 0; i < ctx.num_inputs(); ++i) {
    if (!ctx.has_input(i) || !ctx.in(i).device().is_cuda()) continue;
    if (def && def->cuda_twin && reads_on_host(*def, i)) continue;
    return static_cast<int>(i);
  }
  return -1;
}

}  // namespace

Device step_device(const OpContext& ctx) {
  if (ctx.node.def && (ctx.node.def->reads_shapes_only || ctx.node.def->runs_on_host))
    return Device();
  const int first = first_cuda_input(ctx);
  if (first < 0) return Device();
  const Device device = ctx.in(first).device();
  for (size_t i = 0; i < ctx.num_inputs(); ++i) {
    if (!ctx.has_input(i)) continue;
    const Device d = ctx.in(i).device();
    if (d.is_cuda() && d != device) {
      ctx.fail(input_label(ctx, i) + " is on " + d.str() + " but " +
               input_label(ctx, static_cast<size_t>(first)) + " is on " + device.str() +
               "; a model runs on one device: move the module and all its inputs there "
               "(model.to(\"" +
               device.str() + "\"), x.to(\"" + device.str() + "\"))");
    }
  }
  return device;
}

Tensor DeviceCopies::get(const Tensor& host, Device device) {
  if (!host.storage()->immutable) return host.to(device);
  std::lock_guard<std::mutex> lock(mutex_);
  for (const Entry& e : entries_) {
    if (e.data == host.raw() && e.device == device && e.dtype == host.dtype() &&
        e.shape == host.shape())
      return e.copy;
  }
  if (entries_.size() >= kMaxEntries) entries_.clear();
  entries_.push_back(
      {host.storage(), host.raw(), host.dtype(), host.shape(), device, host.to(device)});
  return entries_.back().copy;
}

void place_inputs(OpContext& ctx, Device device, std::vector<Tensor>& moved, DeviceCopies* copies) {
  moved.clear();
  if (device.is_cpu()) {
    // A host step reads every input on the host, except an op that reads only shapes.
    if (ctx.node.def && ctx.node.def->reads_shapes_only) return;
    for (size_t i = 0; i < ctx.num_inputs(); ++i) {
      if (!ctx.has_input(i) || ctx.in(i).device().is_cpu()) continue;
      // Only a host input of a CUDA-capable op, or an input of an op that runs on the host,
      // can be on a device here (see step_device).
      moved.resize(ctx.num_inputs());
      moved[i] = ctx.in(i).to(Device());
      ctx.inputs[i] = &moved[i];
    }
    return;
  }
  const OpDef* def = ctx.node.def;
  for (size_t i = 0; i < ctx.num_inputs(); ++i) {
    if (!ctx.has_input(i)) continue;
    const Device want = def && reads_on_host(*def, i) ? Device() : device;
    if (ctx.in(i).device() == want) continue;
    // Graph constants and values computed on the host (shape arithmetic) move to the
    // device; shape-like inputs computed on the device move to the host.
    moved.resize(ctx.num_inputs());
    const Tensor& from = ctx.in(i);
    moved[i] = copies && from.device().is_cpu() && from.defined() && from.storage()
                   ? copies->get(from, want)
                   : from.to(want);
    ctx.inputs[i] = &moved[i];
  }
}

KernelFn select_kernel(const OpContext& ctx, Device device) {
  const OpDef& def = *ctx.node.def;
  if (device.is_cpu()) return def.cpu;
  if (!def.cuda) {
    const int first = first_cuda_input(ctx);
    ctx.fail("has no CUDA kernel " + std::string(def.cuda_twin ? "in this build" : "yet") +
             ", but its " + input_label(ctx, static_cast<size_t>(first < 0 ? 0 : first)) +
             " is on " + device.str() +
             "; run the model on the CPU, or add the op's CUDA kernel (docs/adding_ops.md)");
  }
  return def.cuda;
}

}  // namespace ortmodule
