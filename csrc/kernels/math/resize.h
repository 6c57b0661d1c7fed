// Resize arithmetic shared by the CPU loops and the CUDA kernels: the cubic convolution
// weights and the separable weighted gather over per-axis tap tables.
#pragma once

#include <cstdint>

#include "kernels/math/host_device.h"

namespace ortmodule {

// A resize of [planes, in[0], in[1], in[2]] to [planes, out[0], out[1], out[2]] as a separable
// filter: output coordinate o of axis d reads taps[d] input positions index[d][o * taps[d] + k]
// with weights weight[d][o * taps[d] + k] (indices already clamped into the input).
struct ResizeGeometry {
  int64_t planes;
  int64_t in[3], out[3], taps[3];
  const int64_t* index[3];
  const double* weight[3];
};

// Keys' cubic convolution weights of the four taps floor(x) - 1 .. floor(x) + 2 at fraction
// t = x - floor(x), with coefficient a (ONNX's cubic_coeff_a; PyTorch's bicubic uses -0.75).
// The same expressions as PyTorch's get_cubic_upsample_coefficients and onnx.reference.
template <typename A>
ORTM_HOST_DEVICE void resize_cubic_weights(A t, A a, A* w) {
  const A x0 = t + A(1), x1 = t, x2 = A(1) - t, x3 = A(2) - t;
  w[0] = ((a * x0 - A(5) * a) * x0 + A(8) * a) * x0 - A(4) * a;
  w[1] = ((a + A(2)) * x1 - (a + A(3))) * x1 * x1 + A(1);
  w[2] = ((a + A(2)) * x2 - (a + A(3))) * x2 * x2 + A(1);
  w[3] = ((a * x3 - A(5) * a) * x3 + A(8) * a) * x3 - A(4) * a;
}

// Output element q (flat over [planes, out...]) of the resize: the weighted sum of its taps,
// accumulated in double.
template <typename T>
ORTM_HOST_DEVICE T resize_gather(const ResizeGeometry& g, int64_t q, const T* x) {
  const int64_t o2 = q % g.out[2], o1 = (q / g.out[2]) % g.out[1];
  const int64_t o0 = (q / (g.out[2] * g.out[1])) % g.out[0];
  const int64_t plane = q / (g.out[2] * g.out[1] * g.out[0]);
  const T* xp = x + plane * g.in[0] * g.in[1] * g.in[2];
  double sum = 0;
  for (int64_t a = 0; a < g.taps[0]; ++a) {
    const double wa = g.weight[0][o0 * g.taps[0] + a];
    const int64_t ia = g.index[0][o0 * g.taps[0] + a] * g.in[1];
    for (int64_t b = 0; b < g.taps[1]; ++b) {
      const double wab = wa * g.weight[1][o1 * g.taps[1] + b];
      const int64_t row = (ia + g.index[1][o1 * g.taps[1] + b]) * g.in[2];
      for (int64_t c = 0; c < g.taps[2]; ++c)
        sum += wab * g.weight[2][o2 * g.taps[2] + c] *
               static_cast<double>(xp[row + g.index[2][o2 * g.taps[2] + c]]);
    }
  }
  return static_cast<T>(sum);
}

// The adjoint of a ResizeGeometry, per axis: input position i is read by the outputs
// output[d][e] with weights weight[d][e] for e in [offset[d][i], offset[d][i + 1]) (ascending
// outputs; an output whose clamped taps repeat i appears once per tap).
struct ResizeAdjointGeometry {
  int64_t planes;
  int64_t in[3], out[3];
  const int64_t* offset[3];
  const int64_t* output[3];
  const double* weight[3];
};

// Input element p (flat over [planes, in...]) of ResizeGrad: the weighted sum of the output
// gradients that read it, accumulated in double. A gather, so the CPU and CUDA kernels need
// neither atomics nor a zeroed output, and add in the same order.
template <typename T>
ORTM_HOST_DEVICE T resize_adjoint_gather(const ResizeAdjointGeometry& g, int64_t p, const T* dy) {
  const int64_t i2 = p % g.in[2], i1 = (p / g.in[2]) % g.in[1];
  const int64_t i0 = (p / (g.in[2] * g.in[1])) % g.in[0];
  const int64_t plane = p / (g.in[2] * g.in[1] * g.in[0]);
  const T* dyp = dy + plane * g.out[0] * g.out[1] * g.out[2];
  double sum = 0;
  for (int64_t a = g.offset[0][i0]; a < g.offset[0][i0 + 1]; ++a) {
    const double wa = g.weight[0][a];
    const int64_t oa = g.output[0][a] * g.out[1];
    for (int64_t b = g.offset[1][i1]; b < g.offset[1][i1 + 1]; ++b) {
      const double wab = wa * g.weight[1][b];
      const int64_t row = (oa + g.output[1][b]) * g.out[2];
      for (int64_t c = g.offset[2][i2]; c < g.offset[2][i2 + 1]; ++c)
        sum += wab * g.weight[2][c] * static_cast<double>(dyp[row + g.output[2][c]]);
    }
  }
  return static_cast<T>(sum);
}

}  // namespace ortmodule
