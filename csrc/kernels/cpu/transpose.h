// Permutes the axes of a contiguous tensor.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace ortmodule {

// x: x_shape -> y: [x_shape[perm[0]], x_shape[perm[1]], ...]; elem_size bytes per element.
void transpose(const std::vector<int64_t>& x_shape, const std::vector<int64_t>& perm, const void* x,
               void* y, size_t elem_size);

}  // namespace ortmodule
