#include "kernels/cpu/silu_mul.h"

#include <algorithm>
#include <type_traits>

#include "kernels/cpu/cpu_isa.h"
#include "kernels/math/silu_mul.h"
#include "kernels/parallel.h"

namespace ortmodule {
namespace {

constexpr int64_t kChunk = 1024;  // elements whose sigmoid is taken at once (4 KiB of float)

// s = sigmoid(g) over n <= kChunk elements.
template <typename T>
void sigmoid_chunk(int64_t n, const T* g, T* s) {
  if constexpr (std::is_same_v<T, float>) {
    const VecKernels& vk = vec_kernels();
    if (vk.activation) return vk.activation(VecActivation::kSigmoid, n, g, s);
  }
  for (int64_t i = 0; i < n; ++i) s[i] = math::sigmoid(g[i]);
}

// f(i0, len, s) over chunks [i0, i0 + len) of n elements, s = sigmoid(g[i0:i0 + len]),
// chunks split over threads.
template <typename T, typename F>
void over_chunks(int64_t n, const T* g, F f) {
  parallel_for(0, (n + kChunk - 1) / kChunk, 16, [&](int64_t c0, int64_t c1) {
    T s[kChunk];
    for (int64_t c = c0; c < c1; ++c) {
      const int64_t i0 = c * kChunk, len = std::min(kChunk, n - i0);
      sigmoid_chunk(len, g + i0, s);
      f(i0, len, s);
    }
  });
}

}  // namespace

template <typename T>
void silu_mul_forward(int64_t n, const T* g, const T* u, T* y) {
  over_chunks(n, g, [&](int64_t i0, int64_t len, const T* s) {
    const T* __restrict gc = g + i0;
    const T* __restrict uc = u + i0;
    T* __restrict yc = y + i0;
    for (int64_t i = 0; i < len; ++i) yc[i] = math::silu_mul(gc[i], uc[i], s[i]);
  });
}

template <typename T>
void silu_mul_backward(int64_t n, const T* dy, const T* g, const T* u, T* dg, T* du) {
  over_chunks(n, g, [&](int64_t i0, int64_t len, const T* s) {
    // Outputs never alias inputs (the ops take no in-place reuse): restrict lets the loops
    // vectorise.
    const T* __restrict dyc = dy + i0;
    const T* __restrict gc = g + i0;
    const T* __restrict uc = u + i0;
    if (du) {
      T* __restrict duc = du + i0;
      for (int64_t i = 0; i < len; ++i) duc[i] = math::silu_mul_grad_up(dyc[i], gc[i], s[i]);
    }
    if (dg) {
      T* __restrict dgc = dg + i0;
      for (int64_t i = 0; i < len; ++i)
        dgc[i] = math::silu_mul_grad_gate(dyc[i], gc[i], uc[i], s[i]);
    }
  });
}

template void silu_mul_forward<float>(int64_t, const float*, const float*, float*);
template void silu_mul_forward<double>(int64_t, const double*, const double*, double*);
template void silu_mul_backward<float>(int64_t, const float*, const float*, const float*, float*,
                                       float*);
template void silu_mul_backward<double>(int64_t, const double*, const double*, const double*,
                                        double*, double*);

}  // namespace ortmodule
