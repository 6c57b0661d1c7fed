#include "kernels/cpu/sgemm.h"

#include <algorithm>
#include <cstdint>
#include <stdexcept>

#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/packed_gemm.h"

namespace ortmodule {
namespace {

// packed_gemm.h's Kernel for float32 operands: panels of floats, one column of K per step,
// the instruction set's micro-kernel (VecKernels::gemm_tile).
struct FloatKernel {
  using In = float;
  using Packed = float;
  const VecKernels& vk;
  float alpha, beta;
  int mr = vk.gemm_mr, nr = vk.gemm_nr;
  int64_t k_step = 1;
  int64_t kc_target = packed_gemm::kKc;

  void pack(const float* X, int64_t ld, bool trans, int64_t r0, int64_t rows, int64_t k0,
            int64_t kc, int width, float* dst) const {
    if (trans) {
      // op(X)[r, k] = X[k, r]: each k is a contiguous run of rows.
      for (int64_t k = 0; k < kc; ++k) {
        const float* src = X + (k0 + k) * ld + r0;
        float* out = dst + k * width;
        for (int64_t r = 0; r < rows; ++r) out[r] = src[r];
        for (int64_t r = rows; r < width; ++r) out[r] = 0.0f;
      }
      return;
    }
    // op(X)[r, k] = X[r, k]: a transpose, in registers.
    vk.pack_transposed(X + r0 * ld + k0, ld, rows, kc, width, dst);
  }
  void pack_b(const float* X, int64_t ld, bool trans, int64_t r0, int64_t rows, int64_t k0,
              int64_t kc, int width, float* dst) const {
    pack(X, ld, trans, r0, rows, k0, kc, width, dst);
  }
  void tile(int64_t kc, const float* a, const float* b, float* c, int64_t ldc, int m, int n,
            bool first) const {
    vk.gemm_tile(kc, a, b, c, ldc, m, n, alpha, beta, first);
  }
  bool direct_a(bool, int64_t n_panels) const {
    return n_panels <= packed_gemm::kDirectAPanels && vk.gemm_tile_a != nullptr;
  }
  void tile_a(int64_t kc, const float* a, int64_t lda, bool trans, const float* b, float* c,
              int64_t ldc, int m, int n, bool first) const {
    vk.gemm_tile_a(kc, a, lda, trans, b, c, ldc, m, n, alpha, beta, first);
  }
};

}  // namespace

bool packed_sgemm_available() { return vec_kernels().gemm_tile != nullptr; }

void packed_sgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                  const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
                  int64_t ldc) {
  const VecKernels& vk = vec_kernels();
  if (!vk.gemm_tile) throw std::logic_error("packed_sgemm: the active ISA has no GEMM kernel");
  if (M == 0 || N == 0) return;
  if (K == 0) return packed_gemm::scale_only(M, N, beta, C, ldc);
  packed_gemm::run(FloatKernel{vk, alpha, beta}, trans_a, trans_b, M, N, K, A, lda, B, ldb, C, ldc);
}

PackedSgemmB::PackedSgemmB(bool trans_b, int64_t K, int64_t N, const float* B, int64_t ldb)
    : K_(K), N_(N) {
  const VecKernels& vk = vec_kernels();
  if (!vk.gemm_tile) throw std::logic_error("PackedSgemmB: the active ISA has no GEMM kernel");
  if (K == 0 || N == 0) return;
  const FloatKernel kern{vk, 1.0f, 0.0f};
  nr_ = kern.nr;
  const packed_gemm::KBlocks kb(K, kern.k_step, kern.kc_target);
  const int64_t n_panels = (N + kern.nr - 1) / kern.nr;
  panels_ = packed_gemm::aligned_buffer(
      storage_, static_cast<size_t>(kb.blocks * n_panels * kern.nr * kb.d_max));
  packed_gemm::pack_all_b(kern, trans_b, K, N, B, ldb, panels_);
}

void PackedSgemmB::multiply(bool trans_a, int64_t M, float alpha, const float* A, int64_t lda,
                            float beta, float* C, int64_t ldc) const {
  const VecKernels& vk = vec_kernels();
  if (!vk.gemm_tile) throw std::logic_error("PackedSgemmB: the active ISA has no GEMM kernel");
  if (M == 0 || N_ == 0) return;
  if (K_ == 0) return packed_gemm::scale_only(M, N_, beta, C, ldc);
  const FloatKernel kern{vk, alpha, beta};
  if (kern.nr != nr_)
    throw std::logic_error("PackedSgemmB: packed for another instruction set's micro-kernel");
  packed_gemm::run_packed_b(kern, trans_a, M, N_, K_, A, lda, panels_, C, ldc);
}

}  // namespace ortmodule
