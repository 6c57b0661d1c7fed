// The AVX-512F kernels (compiled with -mavx512f -mavx2 -mfma; called only where the CPU
// has them).
#include "kernels/cpu/vec_kernels.h"

#if defined(__AVX512F__) && defined(__FMA__)
// GCC 12's AVX-512 intrinsics fill unused lanes from _mm512_undefined_ps(), which its
// own uninitialized-value analysis then flags once inlined.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include "kernels/cpu/vec_kernels.inl"

namespace ortmodule {
const VecKernels* vec_kernels_avx512() {
  static const VecKernels kernels = make_vec_kernels<simd::VecAvx512>();
  return &kernels;
}
}  // namespace ortmodule
#else
namespace ortmodule {
const VecKernels* vec_kernels_avx512() { return nullptr; }
}  // namespace ortmodule
#endif
