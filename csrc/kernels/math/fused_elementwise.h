// The opcodes of FusedElementwise's register program (kernels/cpu/fused_elementwise.h) and
// what each computes for one element, shared by the CPU loops and the CUDA kernel. The math
// is the unfused kernels' (kernels/math/elementwise.h), so a fused tree rounds as its nodes
// did one by one (on the CPU, float32 Exp/Tanh/Sigmoid and Gelu's gradients take the ISA's
// vector kernels instead, as the unfused CPU ops do).
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/math/bfloat16.h"
#include "kernels/math/elementwise.h"
#include "kernels/math/float16.h"
#include "kernels/math/host_device.h"

namespace ortmodule {

enum class ElementwiseOpcode : int64_t {
  kAdd,
  kSub,
  kMul,
  kDiv,
  kPow,   // with the Pow kernel's fast paths for a one-element exponent of 1, 2, 3 or 0.5
  kCopy,  // Identity
  kNeg,
  kSqrt,
  kReciprocal,
  kExp,
  kTanh,
  kSigmoid,
  kErf,
  kRelu,
  kWhere,         // a ? b : c, a a condition input
  kSigmoidGrad,   // (dy, y)
  kTanhGrad,      // (dy, y)
  kReluGrad,      // (dy, y)
  kGeluGrad,      // (dy, x): Gelu's gradient (erf form)
  kGeluTanhGrad,  // (dy, x): the tanh approximation's
  // A float32 value rounded to the nearest bfloat16 / float16 and widened back: the two Casts
  // autocast puts between 16-bit ops that compute in float32 (float32 registers only).
  kRoundBFloat16,
  kRoundFloat16,
  kCount,
};

// Operands a, b, c are register numbers (-1: unused); dst is always the next register.
struct ElementwiseInstruction {
  ElementwiseOpcode op = ElementwiseOpcode::kAdd;
  int64_t a = -1, b = -1, c = -1;
};

// Number of operands each opcode reads (1, 2 or 3).
ORTM_HOST_DEVICE int elementwise_opcode_arity(ElementwiseOpcode op) {
  switch (op) {
    case ElementwiseOpcode::kAdd:
    case ElementwiseOpcode::kSub:
    case ElementwiseOpcode::kMul:
    case ElementwiseOpcode::kDiv:
    case ElementwiseOpcode::kPow:
    case ElementwiseOpcode::kSigmoidGrad:
    case ElementwiseOpcode::kTanhGrad:
    case ElementwiseOpcode::kReluGrad:
    case ElementwiseOpcode::kGeluGrad:
    case ElementwiseOpcode::kGeluTanhGrad:
      return 2;
    case ElementwiseOpcode::kWhere:
      return 3;
    default:
      return 1;
  }
}

namespace math {

// One element of opcode `op` on operands a, b, c (unused ones ignored). b_is_scalar: operand
// b holds one value throughout the output (Pow's fast paths then apply, as in the Pow kernel).
template <typename T>
ORTM_HOST_DEVICE T fused_elementwise_apply(ElementwiseOpcode op, T a, T b, T c, bool b_is_scalar) {
  switch (op) {
    case ElementwiseOpcode::kAdd:
      return a + b;
    case ElementwiseOpcode::kSub:
      return a - b;
    case ElementwiseOpcode::kMul:
      return a * b;
    case ElementwiseOpcode::kDiv:
      return a / b;
    case ElementwiseOpcode::kPow:
      return b_is_scalar ? pow_fast(a, b) : static_cast<T>(std::pow(a, b));
    case ElementwiseOpcode::kCopy:
      return a;
    case ElementwiseOpcode::kNeg:
      return -a;
    case ElementwiseOpcode::kSqrt:
      return std::sqrt(a);
    case ElementwiseOpcode::kReciprocal:
      return T(1) / a;
    case ElementwiseOpcode::kExp:
      return std::exp(a);
    case ElementwiseOpcode::kTanh:
      return tanh_fwd(a);
    case ElementwiseOpcode::kSigmoid:
      return sigmoid(a);
    case ElementwiseOpcode::kErf:
      return std::erf(a);
    case ElementwiseOpcode::kRelu:
      return relu(a);
    case ElementwiseOpcode::kWhere:
      return a != T(0) ? b : c;
    case ElementwiseOpcode::kSigmoidGrad:
      return sigmoid_grad(a, b);
    case ElementwiseOpcode::kTanhGrad:
      return tanh_grad(a, b);
    case ElementwiseOpcode::kReluGrad:
      return relu_grad(a, b);
    case ElementwiseOpcode::kGeluGrad:
      return gelu_grad(a, b);
    case ElementwiseOpcode::kGeluTanhGrad:
      return gelu_tanh_grad(a, b);
    case ElementwiseOpcode::kRoundBFloat16:
      return static_cast<T>(bf16_to_float(float_to_bf16(static_cast<float>(a))));
    case ElementwiseOpcode::kRoundFloat16:
      return static_cast<T>(half_to_float(float_to_half(static_cast<float>(a))));
    case ElementwiseOpcode::kCount:
      break;
  }
  return a;
}

}  // namespace math
}  // namespace ortmodule
