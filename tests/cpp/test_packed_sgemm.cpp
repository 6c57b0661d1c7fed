// The packed float32 GEMM (kernels/cpu/sgemm.h) of every instruction set this CPU runs,
// against a double-precision reference: all transpose combinations, alpha/beta, padded
// leading dimensions, edges smaller than a tile, K split into blocks (with few rows: threads
// split B's panels over all K blocks), A read in place (at most
// two B panels: full A panels unpacked, the partial one packed) and beta == 0 with NaN in C
// (C must not be read then), K split among the threads into partial products (a long K
// against a small C, with two threads or more). PackedSgemmB (op(B) packed once, products with any
// A) on the same cases, each packed B used twice.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <stdexcept>
#include <vector>

#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/packed_gemm.h"
#include "kernels/cpu/sgemm.h"

namespace ortmodule {
namespace {

struct Case {
  int64_t M, N, K;
};

// packed_sgemm, or PackedSgemmB's multiply (prepacked) with op(B) packed once per case.
void check_isa(CpuIsa isa, bool prepacked = false) {
  const CpuIsa saved = active_cpu_isa();
  set_cpu_isa(isa);
  ASSERT_TRUE(packed_sgemm_available()) << cpu_isa_name(isa);
  std::mt19937 gen(7);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  const Case cases[] = {{1, 1, 1},      {5, 3, 7},      {14, 32, 9},    {15, 33, 40},
                        {6, 16, 300},   {113, 70, 333}, {64, 784, 96},  {200, 129, 641},
                        {113, 64, 700}, {60, 20, 530},  {64, 200, 800}, {300, 70, 900},
                        {420, 40, 330}, {2, 33, 17},    {3, 64, 20},    {7, 31, 50},
                        {12, 65, 19},   {16, 32, 24},   {128, 128, 64}, {30, 40, 1100}};
  for (const Case& c : cases) {
    for (int trans = 0; trans < 4; ++trans) {
      const bool ta = trans & 1, tb = trans & 2;
      for (const auto& [alpha, beta] : {std::pair{1.0f, 0.0f}, std::pair{0.5f, 2.0f}}) {
        const int64_t pad = 3;
        const int64_t lda = (ta ? c.M : c.K) + pad, ldb = (tb ? c.K : c.N) + pad, ldc = c.N + pad;
        std::vector<float> A((ta ? c.K : c.M) * lda), B((tb ? c.N : c.K) * ldb), C(c.M * ldc);
        for (float& v : A) v = dist(gen);
        for (float& v : B) v = dist(gen);
        for (float& v : C) v = beta == 0.0f ? std::numeric_limits<float>::quiet_NaN() : dist(gen);
        const std::vector<float> C0 = C;
        if (prepacked) {
          const PackedSgemmB packed(tb, c.K, c.N, B.data(), ldb);
          // A first product into scratch, then the checked one: the panels serve every call.
          std::vector<float> scratch(c.M * ldc);
          packed.multiply(ta, c.M, 1.0f, A.data(), lda, 0.0f, scratch.data(), ldc);
          packed.multiply(ta, c.M, alpha, A.data(), lda, beta, C.data(), ldc);
        } else {
          packed_sgemm(ta, tb, c.M, c.N, c.K, alpha, A.data(), lda, B.data(), ldb, beta, C.data(),
                       ldc);
        }
        for (int64_t i = 0; i < c.M; ++i) {
          for (int64_t j = 0; j < c.N; ++j) {
            double sum = 0, mag = 0;
            for (int64_t k = 0; k < c.K; ++k) {
              const double a = ta ? A[k * lda + i] : A[i * lda + k];
              const double b = tb ? B[j * ldb + k] : B[k * ldb + j];
              sum += a * b;
              mag += std::abs(a * b);
            }
            const double want = alpha * sum + (beta == 0.0f ? 0.0 : beta * C0[i * ldc + j]);
            const double tol = 1e-6 * (alpha * mag + std::abs(beta) + 1.0) * std::sqrt(c.K + 1.0);
            ASSERT_NEAR(C[i * ldc + j], want, tol)
                << cpu_isa_name(isa) << " M=" << c.M << " N=" << c.N << " K=" << c.K << " ta=" << ta
                << " tb=" << tb << " alpha=" << alpha << " at " << i << "," << j;
          }
          for (int64_t j = c.N; j < ldc; ++j)  // padding past N is left alone
            ASSERT_TRUE(std::isnan(C[i * ldc + j]) || C[i * ldc + j] == C0[i * ldc + j]);
        }
      }
    }
  }
  set_cpu_isa(saved);
}

TEST(PackedSgemm, Avx2MatchesDoubleReference) {
  if (!cpu_isa_supported(CpuIsa::kAvx2)) GTEST_SKIP() << "this CPU has no AVX2";
  check_isa(CpuIsa::kAvx2);
}

TEST(PackedSgemm, Avx512MatchesDoubleReference) {
  if (!cpu_isa_supported(CpuIsa::kAvx512)) GTEST_SKIP() << "this CPU has no AVX-512";
  check_isa(CpuIsa::kAvx512);
}

TEST(PackedSgemmB, Avx2MatchesDoubleReference) {
  if (!cpu_isa_supported(CpuIsa::kAvx2)) GTEST_SKIP() << "this CPU has no AVX2";
  check_isa(CpuIsa::kAvx2, true);
}

TEST(PackedSgemmB, Avx512MatchesDoubleReference) {
  if (!cpu_isa_supported(CpuIsa::kAvx512)) GTEST_SKIP() << "this CPU has no AVX-512";
  check_isa(CpuIsa::kAvx512, true);
}

// The rows of a last, partial panel (a tile of fewer rows than the micro-kernel's) sum over K
// as the same rows of a full panel do: C's first 14 + m rows are bit for bit those of the
// product with 28 rows, for every m, on every ISA, with K in two blocks and transposed A.
void check_partial_panels_like_full(CpuIsa isa) {
  const CpuIsa saved = active_cpu_isa();
  set_cpu_isa(isa);
  std::mt19937 gen(11);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  const int64_t rows = 28, N = 70, K = 400;
  for (const bool ta : {false, true}) {
    std::vector<float> A(rows * K), B(K * N), full(rows * N);
    for (float& x : A) x = dist(gen);
    for (float& x : B) x = dist(gen);
    // ta: A holds op(A)^T, [K, rows]; each product below reads the first M columns of it.
    const int64_t lda = ta ? rows : K;
    packed_sgemm(ta, false, rows, N, K, 1.0f, A.data(), lda, B.data(), N, 0.0f, full.data(), N);
    for (int64_t m = 1; m < 14; ++m) {
      const int64_t M = 14 + m;
      std::vector<float> part(M * N);
      packed_sgemm(ta, false, M, N, K, 1.0f, A.data(), lda, B.data(), N, 0.0f, part.data(), N);
      for (int64_t i = 0; i < M * N; ++i)
        ASSERT_EQ(part[i], full[i]) << cpu_isa_name(isa) << " M=" << M << " ta=" << ta << " at row "
                                    << i / N << " column " << i % N;
    }
  }
  set_cpu_isa(saved);
}

TEST(PackedSgemm, PartialPanelsSumLikeFullOnes) {
  if (cpu_isa_supported(CpuIsa::kAvx2)) check_partial_panels_like_full(CpuIsa::kAvx2);
  if (cpu_isa_supported(CpuIsa::kAvx512)) check_partial_panels_like_full(CpuIsa::kAvx512);
}

// Panels packed for one micro-kernel are refused by another's (AVX2's 16-column panels are
// not AVX-512's 32).
// Which products split K among the threads: the cases above that check_isa takes through the
// split (a long K against a small C), and the shapes that stay whole.
TEST(PackedSgemm, SplitsLongKAgainstSmallC) {
  if (parallel_threads() < 2) GTEST_SKIP() << "one thread: no product splits K";
  const int mr = 14;  // AVX-512's micro-kernel rows; the decision is alike for AVX2's 6
  for (const Case& c : {Case{60, 20, 530}, Case{300, 70, 900}, Case{30, 40, 1100},
                        Case{256, 256, 1024}, Case{688, 256, 1024}})
    EXPECT_GE(packed_gemm::split_k_parts(c.M, c.N, c.K, mr, packed_gemm::kKc), 2)
        << "M=" << c.M << " N=" << c.N << " K=" << c.K;
  // K shorter than 3 N, a block of K per part, enough A panels for every thread, or partial
  // products beyond kSplitKPartial.
  for (const Case& c : {Case{256, 1024, 1024}, Case{6, 16, 300}, Case{1024, 256, 1024},
                        Case{4096, 256, 1024}, Case{700, 800, 10000}})
    EXPECT_EQ(packed_gemm::split_k_parts(c.M, c.N, c.K, mr, packed_gemm::kKc), 1)
        << "M=" << c.M << " N=" << c.N << " K=" << c.K;
  // bfloat16 pairs (and AMX tiles): a part holds at least a block of 2 * kKc columns.
  EXPECT_EQ(packed_gemm::split_k_parts(60, 20, 530, mr, 2 * packed_gemm::kKc), 1);
  EXPECT_GE(packed_gemm::split_k_parts(60, 20, 1031, mr, 2 * packed_gemm::kKc), 2);
}

TEST(PackedSgemmB, RefusesPanelsOfAnotherInstructionSet) {
  if (!cpu_isa_supported(CpuIsa::kAvx512)) GTEST_SKIP() << "this CPU has no AVX-512";
  const CpuIsa saved = active_cpu_isa();
  set_cpu_isa(CpuIsa::kAvx2);
  const std::vector<float> B(8 * 40, 1.0f), A(3 * 8, 1.0f);
  const PackedSgemmB packed(false, 8, 40, B.data(), 40);
  set_cpu_isa(CpuIsa::kAvx512);
  std::vector<float> C(3 * 40);
  EXPECT_THROW(packed.multiply(false, 3, 1.0f, A.data(), 8, 0.0f, C.data(), 40), std::logic_error);
  set_cpu_isa(saved);
}

TEST(PackedSgemm, BaselineHasNoKernel) {
  const CpuIsa saved = active_cpu_isa();
  set_cpu_isa(CpuIsa::kBaseline);
  EXPECT_FALSE(packed_sgemm_available());
  EXPECT_THROW(packed_sgemm(false, false, 1, 1, 1, 1.0f, nullptr, 1, nullptr, 1, 0.0f, nullptr, 1),
               std::logic_error);
  set_cpu_isa(saved);
}

}  // namespace
}  // namespace ortmodule
