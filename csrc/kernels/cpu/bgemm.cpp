#include "kernels/cpu/bgemm.h"

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "base/profiler.h"
#include "kernels/cpu/convert.h"
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
  int64_t kc_target = packed_gemm::kKc * 2;

  void pack(const uint16_t* X, int64_t ld, bool trans, int64_t r0, int64_t rows, int64_t k0,
            int64_t kc, int width, uint32_t* dst) const {
    vk.bf16_pack_pairs(X, ld, trans, r0, rows, k0, kc, width, dst);
  }
  void pack_b(const uint16_t* X, int64_t ld, bool trans, int64_t r0, int64_t rows, int64_t k0,
              int64_t kc, int width, uint32_t* dst) const {
    pack(X, ld, trans, r0, rows, k0, kc, width, dst);
  }
  void tile(int64_t kc, const uint32_t* a, const uint32_t* b, float* c, int64_t ldc, int m, int n,
            bool first) const {
    vk.bf16_gemm_tile((kc + 1) / 2, a, b, c, ldc, m, n, alpha, beta, first);
  }
  bool direct_a(bool, int64_t) const { return false; }
  void tile_a(int64_t, const uint16_t*, int64_t, bool, const uint32_t*, float*, int64_t, int, int,
              bool) const {
    throw std::logic_error("packed_bgemm: A is always packed");
  }
};

// The Kernel for AMX tiles (VecKernels::amx_bf16_*): 32 x 32 tiles of C, steps of 32 columns
// of K, each step of a panel 32 runs of 64 bytes (A: a row's 16 pairs; B: a pair of 16
// columns). Blocks of 512 columns of K: a panel of either operand is then 32 KiB.
struct AmxKernel {
  struct alignas(64) Run {
    uint32_t words[16];
  };
  using In = uint16_t;
  using Packed = Run;
  const VecKernels& vk;
  float alpha, beta;
  int mr = 32, nr = 32;
  int64_t k_step = 32;
  int64_t kc_target = 512;

  void pack(const uint16_t* X, int64_t ld, bool trans, int64_t r0, int64_t rows, int64_t k0,
            int64_t kc, int, Run* dst) const {
    vk.amx_bf16_pack_a(X, ld, trans, r0, rows, k0, kc, dst->words);
  }
  void pack_b(const uint16_t* X, int64_t ld, bool trans, int64_t r0, int64_t rows, int64_t k0,
              int64_t kc, int, Run* dst) const {
    vk.amx_bf16_pack_b(X, ld, trans, r0, rows, k0, kc, dst->words);
  }
  void tile(int64_t kc, const Run* a, const Run* b, float* c, int64_t ldc, int m, int n,
            bool first) const {
    vk.amx_bf16_tile((kc + k_step - 1) / k_step, a->words, b->words, c, ldc, m, n, alpha, beta,
                     first);
  }
  // A row-major A is read in place: a tile row is 32 of a row's values of K, as A stores
  // them, so its packed panel would only be a copy. A transposed A is packed (its pairs
  // interleave two rows).
  bool direct_a(bool trans_a, int64_t) const { return !trans_a && vk.amx_bf16_tile_a; }
  void tile_a(int64_t kc, const uint16_t* a, int64_t lda, bool trans, const Run* b, float* c,
              int64_t ldc, int m, int n, bool first) const {
    if (trans || m != mr)
      throw std::logic_error("packed_bgemm: A read in place needs 32 rows of a row-major A");
    vk.amx_bf16_tile_a(kc, a, lda, b->words, c, ldc, n, alpha, beta, first);
  }
};
static_assert(sizeof(AmxKernel::Run) == 64, "a tile row is 64 bytes");

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
  if (vk.amx_bf16_tile) {
    vk.amx_bf16_begin();
    return packed_gemm::run(AmxKernel{vk, alpha, beta}, trans_a, trans_b, M, N, K, A, lda, B, ldb,
                            C, ldc);
  }
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

void packed_bgemm_batched_round(bool trans_a, bool trans_b, int64_t batch, int64_t M, int64_t N,
                                int64_t K, float alpha, const uint16_t* A, int64_t lda,
                                int64_t stride_a, const uint16_t* B, int64_t ldb, int64_t stride_b,
                                uint16_t* Y, int64_t ldy, int64_t stride_y) {
  const VecKernels& vk = bf16_kernels();
  if (batch == 0 || M == 0 || N == 0) return;
  if (batch < parallel_threads())
    throw std::logic_error("packed_bgemm_batched_round: fewer products than threads");
  GemmTimer timer(trans_a, trans_b, batch, M, N, K);
  parallel_for(0, batch, 1, [&](int64_t b0, int64_t b1) {
    thread_local std::vector<float> scratch_storage;
    float* sum = packed_gemm::aligned_buffer(scratch_storage, static_cast<size_t>(M * N));
    for (int64_t i = b0; i < b1; ++i) {
      product(vk, trans_a, trans_b, M, N, K, alpha, A + i * stride_a, lda, B + i * stride_b, ldb,
              0.0f, sum, N);
      uint16_t* y = Y + i * stride_y;
      for (int64_t r = 0; r < M; ++r) round_to_16bit(true, N, sum + r * N, y + r * ldy);
    }
  });
}

}  // namespace ortmodule
