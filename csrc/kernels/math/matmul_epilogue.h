// The activation a fused product (FusedMatMulBias) applies after adding its bias, shared by
// the CPU epilogue (kernels/cpu/matmul.cpp) and the CUDA one (backends/cuda/fused_matmul.cu).
#pragma once

#include "kernels/math/elementwise.h"
#include "kernels/math/host_device.h"

namespace ortmodule {

// What a product's epilogue applies after adding the bias.
enum class MatMulActivation { kNone, kRelu, kGelu, kGeluTanh };

namespace math {

template <typename T>
ORTM_HOST_DEVICE T matmul_activate(MatMulActivation act, T x) {
  switch (act) {
    case MatMulActivation::kRelu:
      return relu(x);
    case MatMulActivation::kGelu:
      return gelu(x);
    case MatMulActivation::kGeluTanh:
      return gelu_tanh(x);
    case MatMulActivation::kNone:
      break;
  }
  return x;
}

}  // namespace math
}  // namespace ortmodule
