// float32 <-> bfloat16 conversion of whole arrays (Cast, and the rounding of 16-bit results
// computed in float32): threaded, with the instruction set's vector loop where it has one
// (VecKernels::float_to_bf16 / bf16_to_float), else math::float_to_bf16 / bf16_to_float per
// element. Both give the same bits: round to nearest even, NaN kept a quiet NaN.
#pragma once

#include <cstdint>

namespace ortmodule {

// y[i] = x[i] rounded to bfloat16 (bits), i < n.
void float_to_bf16_array(int64_t n, const float* x, uint16_t* y);
// y[i] = the float32 value of bfloat16 bits x[i], i < n (exact).
void bf16_to_float_array(int64_t n, const uint16_t* x, float* y);

// The same on the calling thread alone, for bfloat16 (bf16) or float16 bits: the runs of a
// kernel that computes a 16-bit op in float32 chunk by chunk inside its own parallel loop.
// y[i] = x[i] rounded to nearest even (float16: math::float_to_half), i < n.
void round_to_16bit(bool bf16, int64_t n, const float* x, uint16_t* y);
// y[i] = the float32 value of 16-bit bits x[i] (exact), i < n.
void widen_16bit(bool bf16, int64_t n, const uint16_t* x, float* y);

}  // namespace ortmodule
