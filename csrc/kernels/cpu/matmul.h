// Batched matrix products over contiguous row-major tensors. The products take operands of
// their own type T (float32, float64), or bfloat16 bits (In = uint16_t) into float32 results
// through the packed bfloat16 GEMM (kernels/cpu/bgemm.h; requires packed_bgemm_available()).
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/math/matmul_epilogue.h"

namespace ortmodule {

// a: [...a_batch, M, K] (or [..., K, M] when trans_a), b: [...b_batch, K, N] (or [..., N, K])
// -> y: [...broadcast(a_batch, b_batch), M, N] = alpha * op(a) @ op(b)
// Shapes given with rank >= 2; batch dims broadcast numpy-style.
template <typename T, typename In = T>
void batched_matmul(const std::vector<int64_t>& a_shape, const In* a, bool trans_a,
                    const std::vector<int64_t>& b_shape, const In* b, bool trans_b, T alpha,
                    const std::vector<int64_t>& y_shape, T* y);

// Products whose float32 result per matrix is at most this many elements (1 MiB) round in
// cache (batched_matmul_round_bf16).
constexpr int64_t kRoundedProductMaxElements = int64_t{1} << 18;

// batched_matmul over bfloat16 bits with bfloat16 results (each float32 sum rounded once, to
// nearest even), for a batch of at least as many small products (at most
// kRoundedProductMaxElements each) as there are threads: attention's per-head products. Each
// runs on one thread and is rounded while in cache (kernels/cpu/bgemm.h
// packed_bgemm_batched_round); the bits are those of rounding batched_matmul's float32 result.
// Returns false, writing nothing, for other products: then round batched_matmul's result.
// Requires packed_bgemm_available().
bool batched_matmul_round_bf16(const std::vector<int64_t>& a_shape, const uint16_t* a, bool trans_a,
                               const std::vector<int64_t>& b_shape, const uint16_t* b, bool trans_b,
                               float alpha, const std::vector<int64_t>& y_shape, uint16_t* y);

// The product batched_matmul computes, summed down to y_shape: y's batch dims are those of the
// product with some missing or 1 (they broadcast to it), its last two are [M, N]. This is the
// gradient of a broadcast MatMul operand (a Linear's weight over [batch, sequence] inputs) in
// one call, without the full [...batch, M, N] product in memory.
template <typename T, typename In = T>
void batched_matmul_sum(const std::vector<int64_t>& a_shape, const In* a, bool trans_a,
                        const std::vector<int64_t>& b_shape, const In* b, bool trans_b, T alpha,
                        const std::vector<int64_t>& y_shape, T* y);

// pre[rows, N] = alpha * a[rows, K] @ op(b) + bias[N] and y = act(pre), for a weight b of
// [K, N] (or [N, K] when trans_b): the GEMM, then one pass that adds the bias and activates
// chunk by chunk while each is in cache (instead of a pass for each and a tensor between
// them). pre may be null (only y is written).
template <typename T, typename In = T>
void matmul_bias_activation(int64_t rows, int64_t N, int64_t K, const In* a, const In* b,
                            bool trans_b, T alpha, const T* bias, MatMulActivation act, T* pre,
                            T* y);

// y[rows, N] = act(x + bias[N]) (x may be y), where x and y hold `rows` rows of N; pre (may
// be null or x) receives x + bias.
template <typename T>
void bias_activation(int64_t rows, int64_t N, const T* x, const T* bias, MatMulActivation act,
                     T* pre, T* y);

// y[n] = act(x[n]) (y may be x), in threaded chunks: the epilogue's activation alone, for
// a sum computed elsewhere (FusedMatMulBias over 16-bit operands activates the rounded sum).
template <typename T>
void apply_activation(MatMulActivation act, int64_t n, const T* x, T* y);

// The batch dims of broadcast(a_batch, b_batch) for operands of rank >= 2.
std::vector<int64_t> matmul_batch_shape(const std::vector<int64_t>& a_shape,
                                        const std::vector<int64_t>& b_shape);

}  // namespace ortmodule
