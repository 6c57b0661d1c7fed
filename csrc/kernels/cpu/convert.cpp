#include "kernels/cpu/convert.h"

#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/math/bfloat16.h"
#include "kernels/math/float16.h"
#include "kernels/parallel.h"

namespace ortmodule {

void float_to_bf16_array(int64_t n, const float* x, uint16_t* y) {
  const auto vec = vec_kernels().float_to_bf16;
  parallel_for(0, n, kElementwiseGrain, [&](int64_t b, int64_t e) {
    if (vec) return vec(e - b, x + b, y + b);
    for (int64_t i = b; i < e; ++i) y[i] = math::float_to_bf16(x[i]);
  });
}

void bf16_to_float_array(int64_t n, const uint16_t* x, float* y) {
  const auto vec = vec_kernels().bf16_to_float;
  parallel_for(0, n, kElementwiseGrain, [&](int64_t b, int64_t e) {
    if (vec) return vec(e - b, x + b, y + b);
    for (int64_t i = b; i < e; ++i) y[i] = math::bf16_to_float(x[i]);
  });
}

void round_to_16bit(bool bf16, int64_t n, const float* x, uint16_t* y) {
  if (!bf16) {
    for (int64_t i = 0; i < n; ++i) y[i] = math::float_to_half(x[i]);
    return;
  }
  if (const auto vec = vec_kernels().float_to_bf16) return vec(n, x, y);
  for (int64_t i = 0; i < n; ++i) y[i] = math::float_to_bf16(x[i]);
}

void widen_16bit(bool bf16, int64_t n, const uint16_t* x, float* y) {
  if (!bf16) {
    for (int64_t i = 0; i < n; ++i) y[i] = math::half_to_float(x[i]);
    return;
  }
  if (const auto vec = vec_kernels().bf16_to_float) return vec(n, x, y);
  for (int64_t i = 0; i < n; ++i) y[i] = math::bf16_to_float(x[i]);
}

}  // namespace ortmodule
