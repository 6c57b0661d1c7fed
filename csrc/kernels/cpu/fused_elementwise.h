// A tree of element-wise ops run as one loop over memory (passes/elementwise_fusion.h builds
// the trees): a small register program evaluated block by block, so each intermediate lives
// in a cache-resident block buffer instead of a tensor of its own.
//
// Registers 0 .. inputs-1 hold the inputs (numpy-broadcast to the output's shape), each
// instruction writes a new register from earlier ones, and the last instruction's register
// is the output. Per-element math is the unfused kernels' (kernels/math/elementwise.h, and
// for float32 Exp/Tanh/Sigmoid the vector kernels of the active ISA), so a fused tree rounds
// exactly as its nodes did one by one.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/math/fused_elementwise.h"

namespace ortmodule {

// How a value is stored in memory: in the registers' type, or as 16-bit bits of float32
// registers (widened exactly on reading; the output rounded to nearest even on writing, as
// the Casts autocast puts around 16-bit ops that compute in float32).
enum class FusedStorage { kNative, kBFloat16, kFloat16 };

struct FusedElementwiseInput {
  const void* data = nullptr;
  bool is_bool = false;  // a Where condition (uint8 0/1); otherwise a value of `storage`
  FusedStorage storage = FusedStorage::kNative;
  std::vector<int64_t> shape;  // broadcasts to the output's
};

// out: out_shape (the broadcast of every input's shape), contiguous, stored as out_storage
// (kNative for double registers).
template <typename T>
void fused_elementwise_forward(const std::vector<FusedElementwiseInput>& inputs,
                               const std::vector<ElementwiseInstruction>& program,
                               const std::vector<int64_t>& out_shape, void* out,
                               FusedStorage out_storage = FusedStorage::kNative);

}  // namespace ortmodule
