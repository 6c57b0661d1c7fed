// Layer normalisation over the trailing `cols` elements of each of `rows` rows
// (ONNX LayerNormalization with the normalised axes flattened), and its uncentred form,
// RMS normalisation (com.microsoft SimplifiedLayerNormalization: the mean taken as 0).
#pragma once

#include <cstdint>

namespace ortmodule {

// x: [rows, cols], scale, bias (nullable): [cols] -> y: [rows, cols],
// mean, inv_std (nullable): [rows], inv_std = 1 / sqrt(biased variance + eps).
template <typename T>
void layernorm_forward(int64_t rows, int64_t cols, double eps, const T* x, const T* scale,
                       const T* bias, T* y, T* mean, T* inv_std);

// dy, x: [rows, cols], scale: [cols], mean, inv_std: [rows] -> dx: [rows, cols],
// dscale, dbias: [cols]. Each output nullable.
template <typename T>
void layernorm_backward(int64_t rows, int64_t cols, const T* dy, const T* x, const T* scale,
                        const T* mean, const T* inv_std, T* dx, T* dscale, T* dbias);

// x: [rows, cols], scale: [cols] -> y = x * inv_rms * scale: [rows, cols],
// inv_rms (nullable): [rows], inv_rms = 1 / sqrt(mean(x^2) + eps).
template <typename T>
void rmsnorm_forward(int64_t rows, int64_t cols, double eps, const T* x, const T* scale, T* y,
                     T* inv_rms);

// dy, x: [rows, cols], scale: [cols], inv_rms: [rows] -> dx: [rows, cols], dscale: [cols].
// Each output nullable.
template <typename T>
void rmsnorm_backward(int64_t rows, int64_t cols, const T* dy, const T* x, const T* scale,
                      const T* inv_rms, T* dx, T* dscale);

}  // namespace ortmodule
