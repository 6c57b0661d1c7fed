// A packed float32 GEMM of the engine's own: the GEMM of builds without a BLAS (the standalone
// C++ training library, runtime/thread_backend.cpp), and of the torch backend where the BLAS
// leaves the CPU's vector units idle (runtime/cpu_gemm.h). Row-major
//   C[M,N] = alpha * op(A)[M,K] * op(B)[K,N] + beta * C    (kernels/gemm.h's contract)
// Panels of op(B) (K blocks of kc rows, gemm_nr columns) are packed once per call and shared
// by the threads; each thread packs blocks of gemm_mr-row panels of op(A) (or, when several
// threads split one block's B panels, the panels of A are packed once and shared too) and runs
// the instruction set's micro-kernel (VecKernels::gemm_tile: AVX-512 14x32, AVX2 6x16 tiles)
// over them, so transposed operands cost nothing beyond the packing.
#pragma once

#include <cstdint>
#include <vector>

namespace ortmodule {

// Whether the active instruction set (cpu_isa.h) has the micro-kernel; without it (the
// baseline ISA) callers keep their own loop.
bool packed_sgemm_available();

// kernels/gemm.h's gemm<float>; requires packed_sgemm_available().
void packed_sgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                  const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
                  int64_t ldc);

// op(B) [K, N] packed once for many products with it: the recurrent weight of a recurrent
// layer, multiplied by each step's few rows of hidden state (kernels/cpu/rnn.cpp), where
// packing B on every call cost as long as the product. Requires packed_sgemm_available() when
// built, and the same instruction set when used; B's values are copied, B itself is not kept.
class PackedSgemmB {
 public:
  PackedSgemmB(bool trans_b, int64_t K, int64_t N, const float* B, int64_t ldb);
  // C[M, N] = alpha * op(A) op(B) + beta * C, as packed_sgemm with this op(B).
  void multiply(bool trans_a, int64_t M, float alpha, const float* A, int64_t lda, float beta,
                float* C, int64_t ldc) const;
  int64_t K() const { return K_; }
  int64_t N() const { return N_; }

 private:
  int64_t K_, N_;
  int nr_ = 0;  // the micro-kernel's panel width when packed
  std::vector<float> storage_;
  float* panels_ = nullptr;  // 64-byte aligned within storage_
};

}  // namespace ortmodule
