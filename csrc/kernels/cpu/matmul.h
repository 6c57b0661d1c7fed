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

}  // namespace ortmodule
