// Per-entry indexing and weighting of the ONNX classification losses, shared by the CPU loops
// and the CUDA kernels. An entry is one (n, d) of the [N, D] labels, flat index k = n * D + d.
#pragma once

#include <cstdint>

#include "kernels/math/host_device.h"

namespace ortmodule {

enum class Reduction { None = 0, Sum = 1, Mean = 2 };

ORTM_HOST_DEVICE bool loss_entry_ignored(int64_t label, int64_t ignore_index,
                                         bool has_ignore_index) {
  return has_ignore_index && label == ignore_index;
}

// Offset of [n, label, d] in an [N, C, D] tensor for entry k.
ORTM_HOST_DEVICE int64_t loss_class_offset(int64_t k, int64_t label, int64_t C, int64_t D) {
  return ((k / D) * C + label) * D + k % D;
}

// A null weight means every class weighs 1.
template <typename T>
ORTM_HOST_DEVICE double loss_class_weight(const T* weight, int64_t label) {
  return weight ? static_cast<double>(weight[label]) : 1.0;
}

}  // namespace ortmodule
