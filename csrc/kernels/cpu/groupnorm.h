// Group normalisation over contiguous [N, C, S] tensors (S: the spatial elements), G groups
// of C / G consecutive channels, with a per-channel scale and bias: torch's GroupNorm and,
// with G = C, ONNX InstanceNormalization.
#pragma once

#include <cstdint>

namespace ortmodule {

struct GroupNormDims {
  int64_t N, C, S, G;
};

// x: [N, C, S], scale, bias: [C] -> y: [N, C, S]; mean, rstd (nullable): [N, G] with
// rstd = 1 / sqrt(biased group variance + eps).
template <typename T>
void groupnorm_forward(const GroupNormDims& d, double eps, const T* x, const T* scale,
                       const T* bias, T* y, T* mean, T* rstd);

// dy, x: [N, C, S], scale: [C], mean, rstd: [N, G] -> dx: [N, C, S], dscale, dbias: [C]
// (each nullable).
template <typename T>
void groupnorm_backward(const GroupNormDims& d, const T* dy, const T* x, const T* scale,
                        const T* mean, const T* rstd, T* dx, T* dscale, T* dbias);

}  // namespace ortmodule
