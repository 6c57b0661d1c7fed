// The AVX2 + FMA kernels (compiled with -mavx2 -mfma; called only where the CPU has them).
#include "kernels/cpu/vec_kernels.h"

#if defined(__AVX2__) && defined(__FMA__) && !defined(__AVX512F__)
#include "kernels/cpu/vec_kernels.inl"

namespace ortmodule {
const VecKernels* vec_kernels_avx2() {
  static const VecKernels kernels = make_vec_kernels<simd::VecAvx2>();
  return &kernels;
}
}  // namespace ortmodule
#else
namespace ortmodule {
const VecKernels* vec_kernels_avx2() { return nullptr; }
}  // namespace ortmodule
#endif
