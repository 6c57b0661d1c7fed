// float16/bfloat16 steps of ops whose float32 kernel does the arithmetic: the 16-bit inputs
// are widened to float32 (exactly), the float32 kernel runs, and each 16-bit output is
// rounded to nearest even once. The values are those of the op computed in float32 between
// Casts (passes/low_precision.h), in one step: ops that compute natively in 16-bit on a GPU
// (the matrix products) run this way on the CPU.
#pragma once

#include "ops/op_table.h"

namespace ortmodule {

// Runs `float_kernel` on float32 copies of ctx's float16/bfloat16 inputs and outputs; other
// inputs (shapes, indices) and outputs are passed through as they are.
void run_widened(OpContext& ctx, KernelFn float_kernel);

// Whether any input or output of the step is float16 or bfloat16.
bool has_low_precision(const OpContext& ctx);

// x (float16 or bfloat16, on the CPU) as a new float32 tensor, exactly; or into f (float32,
// x's element count).
Tensor widen_to_float32(const Tensor& x);
void widen_into_float32(const Tensor& x, Tensor& f);
// y (float16 or bfloat16) = f (float32, y's element count) rounded to nearest even.
void round_from_float32(const Tensor& f, Tensor& y);

}  // namespace ortmodule
