// Which device a step runs on, and which of its op's kernels runs it.
#pragma once

#include "ops/op_table.h"

namespace ortmodule {

// The device of the step's inputs: the CUDA device of its first input on one (inputs its
// CUDA kernel reads on the host aside), else the host. Ops that read only shapes (Shape,
// Size) always run on the host. Inputs on another CUDA device are refused with an error
// naming the op, the inputs and their devices.
Device step_device(const OpContext& ctx);

// Brings the step's inputs where its kernel reads them: for a CUDA step, host inputs of the
// op (OpDef::cuda_host_inputs) to the host and the others to the device, in `moved` (one
// per input; undefined where an input stays), and points ctx.inputs at them.
void place_inputs(OpContext& ctx, Device device, std::vector<Tensor>& moved);

// The op's kernel for `device`; a CUDA step of an op without a CUDA kernel is refused with
// an error naming the op and the input that put it on the device.
KernelFn select_kernel(const OpContext& ctx, Device device);

}  // namespace ortmodule
