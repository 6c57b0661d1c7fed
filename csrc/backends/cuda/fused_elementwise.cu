// CUDA twin of FusedElementwise (ai.ortmodule): one thread per output element runs the
// node's register program (kernels/cpu/fused_elementwise.h) on that element, with the
// per-opcode math the CPU loops call (math::fused_elementwise_apply). Inputs are read in
// place through their broadcast strides; intermediates live in a few per-thread slots that
// the host assigns by liveness, so only values still to be read occupy one. 16-bit inputs
// are widened into float32 registers and a 16-bit output is rounded once, as on the CPU.
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/cpu/broadcast.h"
#include "kernels/cpu/fused_elementwise.h"
#include "kernels/cuda/cuda_common.h"
#include "kernels/math/bfloat16.h"
#include "kernels/math/float16.h"
#include "kernels/math/fused_elementwise.h"
#include "ops/fused_elementwise_program.h"
#include "ops/op_utils.h"

namespace ortmodule {

namespace {

using cuda::kMaxRank;
// Limits of the program passed by value to the kernel (well under its 4 KiB of parameters).
constexpr int kMaxInputs = 16;
constexpr int kMaxInstructions = 96;
constexpr int kMaxSlots = 16;

// An operand: input k (k < num_inputs) or slot k - kMaxInputs.
struct DeviceInstruction {
  ElementwiseOpcode op;
  int8_t a, b, c;  // operands (-1 unused)
  int8_t dst;      // slot written (-1: the output)
  bool b_is_scalar;
};

struct DeviceProgram {
  int num_inputs = 0;
  int num_instructions = 0;
  int rank = 0;
  int64_t dims[kMaxRank] = {};
  const void* inputs[kMaxInputs] = {};
  bool is_bool[kMaxInputs] = {};
  FusedStorage storage[kMaxInputs] = {};
  FusedStorage out_storage = FusedStorage::kNative;
  int64_t strides[kMaxInputs][kMaxRank] = {};
  DeviceInstruction code[kMaxInstructions] = {};
};

template <typename T>
__device__ T read_operand(const DeviceProgram& p, int r, const int64_t* offsets, const T* slots) {
  if (r >= kMaxInputs) return slots[r - kMaxInputs];
  if (p.is_bool[r]) return static_cast<const uint8_t*>(p.inputs[r])[offsets[r]] ? T(1) : T(0);
  if (p.storage[r] != FusedStorage::kNative) {
    const uint16_t bits = static_cast<const uint16_t*>(p.inputs[r])[offsets[r]];
    return static_cast<T>(p.storage[r] == FusedStorage::kBFloat16 ? math::bf16_to_float(bits)
                                                                  : math::half_to_float(bits));
  }
  return static_cast<const T*>(p.inputs[r])[offsets[r]];
}

template <typename T>
__device__ void write_output(const DeviceProgram& p, int64_t i, T v, void* y) {
  if (p.out_storage == FusedStorage::kNative) {
    static_cast<T*>(y)[i] = v;
  } else {
    const float f = static_cast<float>(v);
    static_cast<uint16_t*>(y)[i] =
        p.out_storage == FusedStorage::kBFloat16 ? math::float_to_bf16(f) : math::float_to_half(f);
  }
}

template <typename T>
__global__ void fused_elementwise_kernel(int64_t n, DeviceProgram p, void* y) {
  const int64_t step = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    int64_t offsets[kMaxInputs];
    for (int k = 0; k < p.num_inputs; ++k) offsets[k] = 0;
    int64_t rem = i;
    for (int d = p.rank - 1; d >= 0; --d) {
      const int64_t idx = rem % p.dims[d];
      rem /= p.dims[d];
      for (int k = 0; k < p.num_inputs; ++k) offsets[k] += idx * p.strides[k][d];
    }
    T slots[kMaxSlots];
    for (int j = 0; j < p.num_instructions; ++j) {
      const DeviceInstruction& in = p.code[j];
      const T a = read_operand(p, in.a, offsets, slots);
      const T b = in.b >= 0 ? read_operand(p, in.b, offsets, slots) : T(0);
      const T c = in.c >= 0 ? read_operand(p, in.c, offsets, slots) : T(0);
      const T v = math::fused_elementwise_apply(in.op, a, b, c, in.b_is_scalar);
      if (in.dst < 0) {
        write_output(p, i, v, y);
      } else {
        slots[in.dst] = v;
      }
    }
  }
}

[[noreturn]] void fail_limit(const OpContext& ctx, const std::string& what, int64_t count,
                             int limit) {
  ctx.fail("has " + std::to_string(count) + " " + what + ", above the CUDA kernel's limit of " +
           std::to_string(limit) +
           "; the fusion pass (passes/elementwise_fusion.h) should split such a tree");
}

// The program for the kernel: operands renumbered (inputs, then slots reused once their
// value's last reader has run), with the CPU kernel's Pow fast-path flags.
DeviceProgram device_program(OpContext& ctx, const std::vector<FusedElementwiseInput>& inputs,
                             const std::vector<ElementwiseInstruction>& program, const Shape& out) {
  const int64_t num_inputs = static_cast<int64_t>(inputs.size());
  if (num_inputs > kMaxInputs) fail_limit(ctx, "inputs", num_inputs, kMaxInputs);
  if (static_cast<int64_t>(program.size()) > kMaxInstructions)
    fail_limit(ctx, "instructions", static_cast<int64_t>(program.size()), kMaxInstructions);
  if (out.size() > static_cast<size_t>(kMaxRank)) fail_limit(ctx, "dims", out.size(), kMaxRank);
  DeviceProgram p;
  p.num_inputs = static_cast<int>(num_inputs);
  p.num_instructions = static_cast<int>(program.size());
  p.rank = static_cast<int>(out.size());
  for (size_t d = 0; d < out.size(); ++d) p.dims[d] = out[d];
  // Registers holding one value broadcast (one-element inputs, and what is computed from
  // them alone): a Pow exponent among them takes the Pow kernel's fast paths (as the CPU).
  std::vector<bool> uniform;
  for (int64_t k = 0; k < num_inputs; ++k) {
    p.inputs[k] = inputs[k].data;
    p.is_bool[k] = inputs[k].is_bool;
    p.storage[k] = inputs[k].storage;
    const std::vector<int64_t> s = broadcast_strides(inputs[k].shape, out);
    for (size_t d = 0; d < out.size(); ++d) p.strides[k][d] = s[d];
    uniform.push_back(shape_numel(inputs[k].shape) == 1);
  }
  // Last instruction reading each register.
  const size_t registers = inputs.size() + program.size();
  std::vector<int64_t> last_read(registers, -1);
  for (size_t j = 0; j < program.size(); ++j)
    for (int64_t r : {program[j].a, program[j].b, program[j].c})
      if (r >= 0) last_read[r] = static_cast<int64_t>(j);
  std::vector<int> slot_of(registers, -1);
  std::vector<bool> slot_busy(kMaxSlots, false);
  for (size_t j = 0; j < program.size(); ++j) {
    const ElementwiseInstruction& in = program[j];
    const int arity = elementwise_opcode_arity(in.op);
    DeviceInstruction& d = p.code[j];
    d.op = in.op;
    auto operand = [&](int64_t r) -> int8_t {
      if (r < 0) return -1;
      if (r < num_inputs) return static_cast<int8_t>(r);
      return static_cast<int8_t>(kMaxInputs + slot_of[r]);
    };
    d.a = operand(in.a);
    d.b = operand(in.b);
    d.c = operand(in.c);
    d.b_is_scalar = in.b >= 0 && uniform[in.b];
    uniform.push_back(uniform[in.a] && (arity < 2 || uniform[in.b]) &&
                      (arity < 3 || uniform[in.c]));
    // Operands read for the last time free their slots before the result takes one.
    for (int64_t r : {in.a, in.b, in.c})
      if (r >= num_inputs && last_read[r] == static_cast<int64_t>(j)) slot_busy[slot_of[r]] = false;
    const size_t dst = inputs.size() + j;
    if (j + 1 == program.size()) {
      d.dst = -1;
      continue;
    }
    int free = -1;
    for (int s = 0; s < kMaxSlots && free < 0; ++s)
      if (!slot_busy[s]) free = s;
    if (free < 0) fail_limit(ctx, "intermediates live at once", kMaxSlots + 1, kMaxSlots);
    // A result nobody reads (dead code) still takes a slot for the instruction's write.
    slot_busy[free] = last_read[dst] >= 0;
    slot_of[dst] = free;
    d.dst = static_cast<int8_t>(free);
  }
  return p;
}

}  // namespace

void cuda_fused_elementwise(OpContext& ctx) {
  std::vector<bool> conditions;
  const std::vector<ElementwiseInstruction> program = decode_fused_program(ctx, &conditions);
  const std::vector<FusedElementwiseInput> inputs = fused_elementwise_inputs(ctx, conditions);
  Tensor& y = ctx.out(0);
  const int64_t n = y.numel();
  DeviceProgram p = device_program(ctx, inputs, program, y.shape());
  p.out_storage = y.dtype() == DType::BFloat16  ? FusedStorage::kBFloat16
                  : y.dtype() == DType::Float16 ? FusedStorage::kFloat16
                                                : FusedStorage::kNative;
  if (n == 0) return;
  ORTM_DISPATCH_FLOAT(fused_elementwise_registers(ctx, conditions), ctx, {
    fused_elementwise_kernel<scalar_t>
        <<<cuda::blocks_for(n), cuda::kThreads, 0, cuda::stream(y.device())>>>(n, p, y.raw());
    cuda::check_launch("FusedElementwise");
  });
}

}  // namespace ortmodule
