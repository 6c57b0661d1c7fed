#include "kernels/cpu/bgemm.h"

#include <cstdint>
#include <stdexcept>
#include <string>

#include "base/profiler.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/packed_gemm.h"
#include "kernels/parallel.h"

namespace ortmodule {
namespace {

// packed_gemm.h's Kernel for bfloat16 operands: panels of 32-bit pairs along K, two columns
// of K per step.
struct Bf16Kernel {
  using In = uint16_t;
  using Packed = uint32_t;
  const VecKernels& vk;
  float alpha, beta;
  int mr = vk.gemm_mr, nr = vk.gemm_nr;
  int64_t k_step = 2;

  void pack(const uint16_t* X, int64_t ld, bool trans, int64_t r0, int64_t rows, int64_t k0,
            int64_t kc, int width, uint32_t* dst) const {
    vk.bf16_pack_pairs(X, ld, trans, r0, rows, k0, kc, width, dst);
  }
  void tile(int64_t kc, const uint32_t* a, const uint32_t* b, float* c, int64_t ldc, int m, int n,
            bool first) const {
    vk.bf16_gemm_tile((kc + 1) / 2, a, b, c, ldc, m, n, alpha, beta, first);
  }
  bool direct_a() const { return false; }
  void tile_a(int64_t, const uint16_t*, int64_t, bool, const uint32_t*, float*, int64_t, int, int,
              bool) const {
    throw std::logic_error("packed_bgemm: A is always packed");
  }
};

const VecKernels& bf16_kernels() {
  const VecKernels& vk = vec_kernels();
  if (!vk.bf16_gemm_tile)
    throw std::logic_error(std::string("packed_bgemm: the active instruction set (") +
                           cpu_isa_name(active_cpu_isa()) + ") has no bfloat16 GEMM kernel");
  return vk;
}

void product(const VecKernels& vk, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
             float alpha, const uint16_t* A, int64_t lda, const uint16_t* B, int64_t ldb,
             float beta, float* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  if (K == 0) return packed_gemm::scale_only(M, N, beta, C, ldc);
  packed_gemm::run(Bf16Kernel{vk, alpha, beta}, trans_a, trans_b, M, N, K, A, lda, B, ldb, C, ldc);
}

}  // namespace

bool packed_bgemm_available() { return vec_kernels().bf16_gemm_tile != nullptr; }

void packed_bgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                  const uint16_t* A, int64_t lda, const uint16_t* B, int64_t ldb, float beta,
                  float* C, int64_t ldc) {
  const VecKernels& vk = bf16_kernels();
  GemmTimer timer(trans_a, trans_b, 1, M, N, K);
  product(vk, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void packed_bgemm_batched(bool trans_a, bool trans_b, int64_t batch, int64_t M, int64_t N,
                          int64_t K, float alpha, const uint16_t* A, int64_t lda, int64_t stride_a,
                          const uint16_t* B, int64_t ldb, int64_t stride_b, float beta, float* C,
                          int64_t ldc, int64_t stride_c) {
  const VecKernels& vk = bf16_kernels();
  if (batch == 0 || M == 0 || N == 0) return;
  GemmTimer timer(trans_a, trans_b, batch, M, N, K);
  // Products in parallel, each on one thread, when there are enough of them to share out
  // (a nested parallel_for runs serially); else each product uses every thread.
  const int64_t grain = batch >= parallel_threads() ? 1 : batch;
  parallel_for(0, batch, grain, [&](int64_t b0, int64_t b1) {
    for (int64_t i = b0; i < b1; ++i)
      product(vk, trans_a, trans_b, M, N, K, alpha, A + i * stride_a, lda, B + i * stride_b, ldb,
              beta, C + i * stride_c, ldc);
  });
}

}  // namespace ortmodule
