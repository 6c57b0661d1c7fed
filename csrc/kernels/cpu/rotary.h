// Rotary position embedding by halves (GPT-NeoX's and Llama's `rotate_half`), over numpy-
// broadcast operands (ops/rotary_ops.cpp, made by passes/rotary_fusion.h):
//   rot(x) = concat(-x[split:], x[:split]) along `axis` (split clamped to [0, D])
//   mode kEmbed:    y = x * cos + rot(x) * sin
//   mode kGradient: y = x * cos + rot^T(x * sin)  (x: dY; the gradient of kEmbed's x)
//   mode kRotate:   y = rot(x)                    (cos and sin unread)
// where rot^T(z) = concat(z[D - split:], -z[:D - split]) is rot's transpose. Each product and
// the sum round once, in the order written, as the unfused Mul, Mul and Add do.
#pragma once

#include <cstdint>
#include <vector>

namespace ortmodule {

enum class RotaryMode : int { kEmbed = 0, kGradient = 1, kRotate = 2 };

struct RotaryArgs {
  std::vector<int64_t> out_shape;  // y's shape: x, cos and sin broadcast together
  int64_t axis = 0;                // the rotated axis of y, in [0, rank); x is not broadcast there
  int64_t split = 0;               // in [0, D]
  // Element strides of x, cos and sin over y's dims (0 along broadcast ones).
  std::vector<int64_t> x_strides, cos_strides, sin_strides;
  RotaryMode mode = RotaryMode::kEmbed;
};

template <typename T>
void rotary_halves(const RotaryArgs& a, const T* x, const T* cos, const T* sin, T* y);

}  // namespace ortmodule
