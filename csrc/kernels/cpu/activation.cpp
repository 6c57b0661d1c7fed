#include "kernels/cpu/activation.h"

#include <algorithm>
#include <cstdint>

#include "kernels/cpu/convert.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/math/elementwise.h"
#include "kernels/parallel.h"

namespace ortmodule {

namespace {
// Gelu costs an exp, a division and two polynomials per element (the other activations
// an exp and a division): a smaller grain than the memory-bound element-wise loops.
constexpr int64_t kActivationGrain = 8192;
// Elements per widened chunk of a 16-bit Gelu: three float32 buffers of 16 KiB, in L1.
constexpr int64_t kLowChunk = 4096;

}  // namespace

bool activation_forward_f32(VecActivation op, int64_t n, const float* x, float* y) {
  const auto vec = vec_kernels().activation;
  if (!vec) return false;
  parallel_for(0, n, kActivationGrain, [&](int64_t b, int64_t e) { vec(op, e - b, x + b, y + b); });
  return true;
}

void gelu_forward_f32(int64_t n, const float* x, float* y, bool tanh) {
  const auto vec = vec_kernels().gelu_forward;
  parallel_for(0, n, kActivationGrain, [&](int64_t b, int64_t e) {
    if (vec) return vec(e - b, x + b, y + b, tanh);
    if (tanh) {
      for (int64_t i = b; i < e; ++i) y[i] = math::gelu_tanh(x[i]);
    } else {
      for (int64_t i = b; i < e; ++i) y[i] = math::gelu(x[i]);
    }
  });
}

void gelu_backward_f32(int64_t n, const float* dy, const float* x, float* dx, float* y, bool tanh) {
  const auto vec = vec_kernels().gelu_backward;
  parallel_for(0, n, kActivationGrain, [&](int64_t b, int64_t e) {
    if (vec) return vec(e - b, dy + b, x + b, dx + b, y ? y + b : nullptr, tanh);
    if (y) {
      for (int64_t i = b; i < e; ++i) y[i] = tanh ? math::gelu_tanh(x[i]) : math::gelu(x[i]);
    }
    if (tanh) {
      for (int64_t i = b; i < e; ++i) dx[i] = math::gelu_tanh_grad(dy[i], x[i]);
    } else {
      for (int64_t i = b; i < e; ++i) dx[i] = math::gelu_grad(dy[i], x[i]);
    }
  });
}

// The float32 kernels run serially inside these chunks (a nested parallel region), as do the
// conversions.
void gelu_forward_low(bool bf16, int64_t n, const uint16_t* x, uint16_t* y, bool tanh) {
  parallel_for(0, n, kActivationGrain, [&](int64_t b, int64_t e) {
    float wide[kLowChunk];
    for (int64_t c = b; c < e; c += kLowChunk) {
      const int64_t m = std::min(kLowChunk, e - c);
      widen_16bit(bf16, m, x + c, wide);
      gelu_forward_f32(m, wide, wide, tanh);
      round_to_16bit(bf16, m, wide, y + c);
    }
  });
}

void gelu_backward_low(bool bf16, int64_t n, const uint16_t* dy, const uint16_t* x, uint16_t* dx,
                       uint16_t* y, bool tanh) {
  parallel_for(0, n, kActivationGrain, [&](int64_t b, int64_t e) {
    float wide_dy[kLowChunk], wide_x[kLowChunk], wide_y[kLowChunk];
    for (int64_t c = b; c < e; c += kLowChunk) {
      const int64_t m = std::min(kLowChunk, e - c);
      widen_16bit(bf16, m, dy + c, wide_dy);
      widen_16bit(bf16, m, x + c, wide_x);
      gelu_backward_f32(m, wide_dy, wide_x, wide_dy, y ? wide_y : nullptr, tanh);
      round_to_16bit(bf16, m, wide_dy, dx + c);
      if (y) round_to_16bit(bf16, m, wide_y, y + c);
    }
  });
}

}  // namespace ortmodule
