// Batched matrix products over contiguous row-major tensors.
#pragma once

#include <cstdint>
#include <vector>

namespace ortmodule {

// a: [...a_batch, M, K] (or [..., K, M] when trans_a), b: [...b_batch, K, N] (or [..., N, K])
// -> y: [...broadcast(a_batch, b_batch), M, N] = alpha * op(a) @ op(b)
// Shapes given with rank >= 2; batch dims broadcast numpy-style.
template <typename T>
void batched_matmul(const std::vector<int64_t>& a_shape, const T* a, bool trans_a,
                    const std::vector<int64_t>& b_shape, const T* b, bool trans_b, T alpha,
                    const std::vector<int64_t>& y_shape, T* y);

// The product batched_matmul computes, summed down to y_shape: y's batch dims are those of the
// product with some missing or 1 (they broadcast to it), its last two are [M, N]. This is the
// gradient of a broadcast MatMul operand (a Linear's weight over [batch, sequence] inputs) in
// one call, without the full [...batch, M, N] product in memory.
template <typename T>
void batched_matmul_sum(const std::vector<int64_t>& a_shape, const T* a, bool trans_a,
                        const std::vector<int64_t>& b_shape, const T* b, bool trans_b, T alpha,
                        const std::vector<int64_t>& y_shape, T* y);

// The batch dims of broadcast(a_batch, b_batch) for operands of rank >= 2.
std::vector<int64_t> matmul_batch_shape(const std::vector<int64_t>& a_shape,
                                        const std::vector<int64_t>& b_shape);

}  // namespace ortmodule
