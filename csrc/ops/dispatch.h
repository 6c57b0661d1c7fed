// Which device a step runs on, and which of its op's kernels runs it.
#pragma once

#include <memory>
#include <mutex>
#include <vector>

#include "ops/op_table.h"

namespace ortmodule {

// Device copies of host tensors that never change (graph constants, values of the shape
// cache: Storage::immutable), made at their first read on a device and reused after, so
// that a step does not copy (and wait on) the same constant at every run. Owned by an
// executor; safe to use from overlapping runs.
class DeviceCopies {
 public:
  // `host` on `device`: the kept copy, or a new one (kept when host is immutable).
  Tensor get(const Tensor& host, Device device);

 private:
  struct Entry {
    std::shared_ptr<Storage> host;  // keeps the key's memory from being reused
    const void* data = nullptr;
    DType dtype = DType::Undefined;
    Shape shape;
    Device device;
    Tensor copy;
  };
  static constexpr size_t kMaxEntries = 256;
  std::mutex mutex_;
  std::vector<Entry> entries_;
};

// The device of the step's inputs: the CUDA device of its first input on one (inputs its
// CUDA kernel reads on the host aside), else the host. Ops that read only shapes (Shape,
// Size) always run on the host. Inputs on another CUDA device are refused with an error
// naming the op, the inputs and their devices.
Device step_device(const OpContext& ctx);

// Brings the step's inputs where its kernel reads them: for a CUDA step, host inputs of the
// op (OpDef::cuda_host_inputs) to the host and the others to the device, in `moved` (one
// per input; undefined where an input stays), and points ctx.inputs at them. With `copies`,
// immutable host inputs come from (and go to) its kept device copies.
void place_inputs(OpContext& ctx, Device device, std::vector<Tensor>& moved,
                  DeviceCopies* copies = nullptr);

// The op's kernel for `device`; a CUDA step of an op without a CUDA kernel is refused with
// an error naming the op and the input that put it on the device.
KernelFn select_kernel(const OpContext& ctx, Device device);

}  // namespace ortmodule
