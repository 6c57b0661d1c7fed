#include "kernels/cpu/fused_elementwise.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/cpu/broadcast.h"
#include "kernels/cpu/convert.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/math/bfloat16.h"
#include "kernels/math/float16.h"
#include "kernels/math/fused_elementwise.h"
#include "kernels/parallel.h"

namespace ortmodule {

namespace {

// Elements per block: every register's block stays in L1/L2 while the program runs.
constexpr int64_t kBlock = 512;
constexpr int64_t kGrain = 32768;

template <typename T, typename F>
void map1(int64_t n, const T* __restrict__ a, T* __restrict__ d, F f) {
  for (int64_t i = 0; i < n; ++i) d[i] = f(a[i]);
}
template <typename T, typename F>
void map2(int64_t n, const T* __restrict__ a, const T* __restrict__ b, T* __restrict__ d, F f) {
  for (int64_t i = 0; i < n; ++i) d[i] = f(a[i], b[i]);
}

// float32 Exp/Tanh/Sigmoid through the active ISA's vector kernels, as the unfused ops run.
template <typename T>
bool vector_activation(VecActivation op, int64_t n, const T* a, T* d) {
  if constexpr (std::is_same_v<T, float>) {
    if (const auto vec = vec_kernels().activation) {
      vec(op, n, a, d);
      return true;
    }
  }
  (void)op, (void)n, (void)a, (void)d;
  return false;
}

// float32 Add/Sub/Mul/Div, and Pow by a one-element 2 or 3 (pow_fast's products), through
// the active ISA's vector kernels: one IEEE operation per result, the scalar loop's bits.
template <typename T>
bool vector_arith(VecArith op, int64_t n, const T* a, const T* b, T* d) {
  if constexpr (std::is_same_v<T, float>) {
    if (const auto vec = vec_kernels().arith) {
      vec(op, n, a, b, d);
      return true;
    }
  }
  (void)op, (void)n, (void)a, (void)b, (void)d;
  return false;
}

// Gelu's gradient (dy, x) through the active ISA's vector kernel (the unfused GeluGrad's).
template <typename T>
bool vector_gelu_grad(bool tanh, int64_t n, const T* dy, const T* x, T* d) {
  if constexpr (std::is_same_v<T, float>) {
    if (const auto vec = vec_kernels().gelu_backward) {
      vec(n, dy, x, d, nullptr, tanh);
      return true;
    }
  }
  (void)tanh, (void)n, (void)dy, (void)x, (void)d;
  return false;
}

// float32 rounded to bfloat16 and back through the active ISA's vector conversions (the
// bits of math::float_to_bf16, as the unfused Casts run).
template <typename T>
bool vector_round_bf16(int64_t n, const T* a, T* d) {
  if constexpr (std::is_same_v<T, float>) {
    const VecKernels& vk = vec_kernels();
    if (vk.round_bf16_float) {
      vk.round_bf16_float(n, a, d);
      return true;
    }
    if (vk.float_to_bf16 && vk.bf16_to_float) {
      uint16_t bits[kBlock];
      for (int64_t i = 0; i < n; i += kBlock) {
        const int64_t m = std::min(kBlock, n - i);
        vk.float_to_bf16(m, a + i, bits);
        vk.bf16_to_float(m, bits, d + i);
      }
      return true;
    }
  }
  (void)n, (void)a, (void)d;
  return false;
}

// b_is_scalar: operand b holds one value throughout (Pow's fast paths then apply).
template <typename T>
void run_instruction(const ElementwiseInstruction& in, bool b_is_scalar, int64_t n,
                     const T* const* reg, T* d) {
  const T* a = reg[in.a];
  const T* b = in.b >= 0 ? reg[in.b] : nullptr;
  // The opcode is a compile-time constant in each loop (fused_elementwise_apply folds to its
  // one case).
  auto unary = [&](auto op) {
    map1(n, a, d, [](T p) {
      return math::fused_elementwise_apply(decltype(op)::value, p, T(0), T(0), false);
    });
  };
  auto binary = [&](auto op) {
    map2(n, a, b, d, [b_is_scalar](T p, T q) {
      return math::fused_elementwise_apply(decltype(op)::value, p, q, T(0), b_is_scalar);
    });
  };
  // The vector form where the ISA has one, else the scalar loop.
  auto arith = [&](VecArith vec, auto op) {
    if (!vector_arith(vec, n, a, b, d)) binary(op);
  };
  using Op = ElementwiseOpcode;
  switch (in.op) {
    case Op::kAdd:
      return arith(VecArith::kAdd, std::integral_constant<Op, Op::kAdd>{});
    case Op::kSub:
      return arith(VecArith::kSub, std::integral_constant<Op, Op::kSub>{});
    case Op::kMul:
      return arith(VecArith::kMul, std::integral_constant<Op, Op::kMul>{});
    case Op::kDiv:
      return arith(VecArith::kDiv, std::integral_constant<Op, Op::kDiv>{});
    case Op::kPow:
      // A one-element exponent holds b[0] throughout (input_block fills the block).
      if (b_is_scalar && n > 0 && (b[0] == T(2) || b[0] == T(3)) &&
          vector_arith(b[0] == T(2) ? VecArith::kSquare : VecArith::kCube, n, a, b, d))
        return;
      return binary(std::integral_constant<Op, Op::kPow>{});
    case Op::kCopy:
      return unary(std::integral_constant<Op, Op::kCopy>{});
    case Op::kNeg:
      return unary(std::integral_constant<Op, Op::kNeg>{});
    case Op::kSqrt:
      return unary(std::integral_constant<Op, Op::kSqrt>{});
    case Op::kReciprocal:
      return unary(std::integral_constant<Op, Op::kReciprocal>{});
    case Op::kExp:
      if (!vector_activation(VecActivation::kExp, n, a, d))
        unary(std::integral_constant<Op, Op::kExp>{});
      return;
    case Op::kTanh:
      if (!vector_activation(VecActivation::kTanh, n, a, d))
        unary(std::integral_constant<Op, Op::kTanh>{});
      return;
    case Op::kSigmoid:
      if (!vector_activation(VecActivation::kSigmoid, n, a, d))
        unary(std::integral_constant<Op, Op::kSigmoid>{});
      return;
    case Op::kErf:
      return unary(std::integral_constant<Op, Op::kErf>{});
    case Op::kRelu:
      return unary(std::integral_constant<Op, Op::kRelu>{});
    case Op::kWhere: {
      const T* c = reg[in.c];
      for (int64_t i = 0; i < n; ++i)
        d[i] = math::fused_elementwise_apply(Op::kWhere, a[i], b[i], c[i], false);
      return;
    }
    case Op::kSigmoidGrad:
      return binary(std::integral_constant<Op, Op::kSigmoidGrad>{});
    case Op::kTanhGrad:
      return binary(std::integral_constant<Op, Op::kTanhGrad>{});
    case Op::kReluGrad:
      return binary(std::integral_constant<Op, Op::kReluGrad>{});
    case Op::kGeluGrad:
      if (!vector_gelu_grad(false, n, a, b, d)) binary(std::integral_constant<Op, Op::kGeluGrad>{});
      return;
    case Op::kGeluTanhGrad:
      if (!vector_gelu_grad(true, n, a, b, d))
        binary(std::integral_constant<Op, Op::kGeluTanhGrad>{});
      return;
    case Op::kRoundBFloat16:
      if (!vector_round_bf16(n, a, d)) unary(std::integral_constant<Op, Op::kRoundBFloat16>{});
      return;
    case Op::kRoundFloat16:
      return unary(std::integral_constant<Op, Op::kRoundFloat16>{});
    case Op::kCount:
      break;
  }
}

// n 16-bit values widened to float32 registers, and float32 registers rounded to 16 bits
// (the bits of the Casts: math::float_to_bf16 / float_to_half, round to nearest even).
template <typename T>
void widen(FusedStorage storage, int64_t n, const uint16_t* x, T* y) {
  if constexpr (std::is_same_v<T, float>) widen_16bit(storage == FusedStorage::kBFloat16, n, x, y);
  (void)storage, (void)n, (void)x, (void)y;
}
template <typename T>
void round_to(FusedStorage storage, int64_t n, const T* x, uint16_t* y) {
  if constexpr (std::is_same_v<T, float>)
    round_to_16bit(storage == FusedStorage::kBFloat16, n, x, y);
  (void)storage, (void)n, (void)x, (void)y;
}

// One input seen from a run of the output: its element offset and step (0 or 1).
template <typename T>
const T* input_block(const FusedElementwiseInput& in, int64_t offset, int64_t step, int64_t n,
                     T* buffer) {
  if (in.is_bool) {
    const uint8_t* p = static_cast<const uint8_t*>(in.data) + offset;
    for (int64_t i = 0; i < n; ++i) buffer[i] = p[i * step] ? T(1) : T(0);
    return buffer;
  }
  if (in.storage != FusedStorage::kNative) {
    const uint16_t* p = static_cast<const uint16_t*>(in.data) + offset;
    if (step == 1) {
      widen(in.storage, n, p, buffer);
    } else {
      widen(in.storage, 1, p, buffer);
      std::fill(buffer + 1, buffer + n, buffer[0]);
    }
    return buffer;
  }
  const T* p = static_cast<const T*>(in.data) + offset;
  if (step == 1) return p;
  std::fill(buffer, buffer + n, p[0]);
  return buffer;
}

}  // namespace

template <typename T>
void fused_elementwise_forward(const std::vector<FusedElementwiseInput>& inputs,
                               const std::vector<ElementwiseInstruction>& program,
                               const std::vector<int64_t>& out_shape, void* out_data,
                               FusedStorage out_storage) {
  const bool native_out = out_storage == FusedStorage::kNative;
  T* out = native_out ? static_cast<T*>(out_data) : nullptr;
  uint16_t* out_bits = native_out ? nullptr : static_cast<uint16_t*>(out_data);
  const size_t num_inputs = inputs.size();
  const size_t num_registers = num_inputs + program.size();
  int64_t total = 1;
  for (int64_t d : out_shape) total *= d;
  if (total == 0 || program.empty()) return;
  // Inputs holding every output element or one element are read flat (offset i, step 1 or
  // 0); with any other broadcast the output runs row by row along its last axis.
  bool flat = true;
  for (const auto& in : inputs) {
    int64_t numel = 1;
    for (int64_t d : in.shape) numel *= d;
    flat = flat && (numel == total || numel == 1);
  }
  const int64_t rank = static_cast<int64_t>(out_shape.size());
  const int64_t row = flat || rank == 0 ? total : out_shape.back();
  const int64_t rows = total / row;
  std::vector<std::vector<int64_t>> strides;
  // Registers holding one value broadcast (one-element inputs, and what is computed from
  // them alone): a Pow exponent among them takes the Pow kernel's fast paths.
  std::vector<bool> uniform;
  for (const auto& in : inputs) {
    strides.push_back(broadcast_strides(in.shape, out_shape));
    int64_t numel = 1;
    for (int64_t d : in.shape) numel *= d;
    uniform.push_back(numel == 1);
  }
  std::vector<bool> b_is_scalar;
  for (const auto& in : program) {
    b_is_scalar.push_back(in.b >= 0 && uniform[in.b]);
    const int arity = elementwise_opcode_arity(in.op);
    uniform.push_back(uniform[in.a] && (arity < 2 || uniform[in.b]) &&
                      (arity < 3 || uniform[in.c]));
  }

  // Work items: (row, block within the row).
  const int64_t blocks_per_row = (row + kBlock - 1) / kBlock;
  const int64_t items = rows * blocks_per_row;
  const int64_t grain = std::max<int64_t>(1, kGrain / std::min(row, kBlock));
  parallel_for(0, items, grain, [&](int64_t begin, int64_t end) {
    std::vector<T> buffers(num_registers * kBlock);
    std::vector<const T*> reg(num_registers);
    std::vector<int64_t> base(num_inputs), step(num_inputs);
    // A one-element input holds its value in every block: its register is filled once.
    for (size_t k = 0; k < num_inputs; ++k)
      if (uniform[k]) reg[k] = input_block(inputs[k], 0, 0, kBlock, buffers.data() + k * kBlock);
    int64_t current_row = -1;
    for (int64_t item = begin; item < end; ++item) {
      const int64_t r = item / blocks_per_row;
      const int64_t start = (item % blocks_per_row) * kBlock;
      const int64_t n = std::min(kBlock, row - start);
      if (r != current_row) {
        current_row = r;
        for (size_t k = 0; k < num_inputs; ++k) {
          int64_t numel = 1;
          for (int64_t d : inputs[k].shape) numel *= d;
          if (flat) {
            base[k] = 0;
            step[k] = numel == 1 ? 0 : 1;
            continue;
          }
          int64_t offset = 0, rem = r;
          for (int64_t d = rank - 2; d >= 0; --d) {
            offset += (rem % out_shape[d]) * strides[k][d];
            rem /= out_shape[d];
          }
          base[k] = offset;
          step[k] = strides[k][rank - 1];
        }
      }
      for (size_t k = 0; k < num_inputs; ++k)
        if (!uniform[k])
          reg[k] = input_block(inputs[k], base[k] + start * step[k], step[k], n,
                               buffers.data() + k * kBlock);
      for (size_t i = 0; i < program.size(); ++i) {
        const size_t dst = num_inputs + i;
        const bool last = i + 1 == program.size();
        T* d = last && native_out ? out + r * row + start : buffers.data() + dst * kBlock;
        run_instruction(program[i], b_is_scalar[i], n, reg.data(), d);
        reg[dst] = d;
        if (last && !native_out) round_to(out_storage, n, d, out_bits + r * row + start);
      }
    }
  });
}

template void fused_elementwise_forward<float>(const std::vector<FusedElementwiseInput>&,
                                               const std::vector<ElementwiseInstruction>&,
                                               const std::vector<int64_t>&, void*, FusedStorage);
template void fused_elementwise_forward<double>(const std::vector<FusedElementwiseInput>&,
                                                const std::vector<ElementwiseInstruction>&,
                                                const std::vector<int64_t>&, void*, FusedStorage);

}  // namespace ortmodule
