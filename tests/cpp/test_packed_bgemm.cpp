// The packed bfloat16 GEMM (kernels/cpu/bgemm.h) against a double-precision reference over the
// same bfloat16 values: all transpose combinations, alpha/beta, padded leading dimensions, odd
// K (a last pair with one value), edges smaller than a tile, K split into blocks (with few rows
// too: threads split B's panels over all K blocks), a long K split among the threads, beta == 0
// with NaN in C (C must not be read then), the batched entry with a broadcast operand, and the
// batched products rounded to bfloat16 in cache (the bits of rounding the float32 sums).
// Integer-valued operands, whose float32 sums are exact in any order, must match bit for bit.
// Every case runs on each bfloat16 micro-kernel the CPU has: AVX512-BF16's vdpbf16ps
// (avx512bf16) and AMX tiles (amx: whole 32 x 32 tiles of C written in place, alpha 1 with
// beta 0 or 1, and partial ones through the epilogue).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/bgemm.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/math/bfloat16.h"
#include "kernels/parallel.h"

namespace ortmodule {
namespace {

struct Case {
  int64_t M, N, K;
};

class PackedBgemm : public ::testing::TestWithParam<CpuIsa> {
 protected:
  void SetUp() override {
    if (!cpu_isa_supported(GetParam()))
      GTEST_SKIP() << "this CPU or OS cannot run the " << cpu_isa_name(GetParam()) << " kernels";
    saved_ = active_cpu_isa();
    set_cpu_isa(GetParam());
    ASSERT_TRUE(packed_bgemm_available());
  }
  void TearDown() override {
    if (cpu_isa_supported(GetParam())) set_cpu_isa(saved_);
  }
  CpuIsa saved_ = CpuIsa::kBaseline;
};

std::vector<uint16_t> random_bf16(size_t n, std::mt19937& gen, bool integers) {
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::uniform_int_distribution<int> ints(-3, 3);
  std::vector<uint16_t> v(n);
  for (uint16_t& x : v)
    x = math::float_to_bf16(integers ? static_cast<float>(ints(gen)) : dist(gen));
  return v;
}

// alpha * op(A) op(B) + beta * C0 in double, and the sum of |terms| (for the tolerance).
void reference(const Case& c, bool ta, bool tb, const std::vector<uint16_t>& A, int64_t lda,
               const std::vector<uint16_t>& B, int64_t ldb, int64_t i, int64_t j, double& sum,
               double& mag) {
  sum = mag = 0;
  for (int64_t k = 0; k < c.K; ++k) {
    const double a = math::bf16_to_float(ta ? A[k * lda + i] : A[i * lda + k]);
    const double b = math::bf16_to_float(tb ? B[j * ldb + k] : B[k * ldb + j]);
    sum += a * b;
    mag += std::abs(a * b);
  }
}

void check(const Case& c, bool integers, std::mt19937& gen) {
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (int trans = 0; trans < 4; ++trans) {
    const bool ta = trans & 1, tb = trans & 2;
    for (const auto& [alpha, beta] :
         {std::pair{1.0f, 0.0f}, std::pair{0.5f, 2.0f}, std::pair{1.0f, 1.0f}}) {
      const int64_t pad = 3;
      const int64_t lda = (ta ? c.M : c.K) + pad, ldb = (tb ? c.K : c.N) + pad, ldc = c.N + pad;
      const std::vector<uint16_t> A = random_bf16((ta ? c.K : c.M) * lda, gen, integers);
      const std::vector<uint16_t> B = random_bf16((tb ? c.N : c.K) * ldb, gen, integers);
      std::vector<float> C(c.M * ldc);
      for (float& v : C)
        v = beta == 0.0f ? std::numeric_limits<float>::quiet_NaN()
                         : (integers ? std::round(4 * dist(gen)) : dist(gen));
      const std::vector<float> C0 = C;
      packed_bgemm(ta, tb, c.M, c.N, c.K, alpha, A.data(), lda, B.data(), ldb, beta, C.data(), ldc);
      for (int64_t i = 0; i < c.M; ++i) {
        for (int64_t j = 0; j < c.N; ++j) {
          double sum, mag;
          reference(c, ta, tb, A, lda, B, ldb, i, j, sum, mag);
          const double want = alpha * sum + (beta == 0.0f ? 0.0 : beta * C0[i * ldc + j]);
          const double tol =
              integers ? 0.0 : 1e-6 * (alpha * mag + std::abs(beta) + 1.0) * std::sqrt(c.K + 1.0);
          ASSERT_NEAR(C[i * ldc + j], want, tol)
              << "M=" << c.M << " N=" << c.N << " K=" << c.K << " ta=" << ta << " tb=" << tb
              << " alpha=" << alpha << " at " << i << "," << j;
        }
        for (int64_t j = c.N; j < ldc; ++j)  // padding past N is left alone
          ASSERT_TRUE(std::isnan(C[i * ldc + j]) || C[i * ldc + j] == C0[i * ldc + j]);
      }
    }
  }
}

const Case kCases[] = {{1, 1, 1},      {5, 3, 7},      {14, 32, 9},     {15, 33, 40},
                       {6, 16, 301},   {113, 70, 333}, {64, 784, 96},   {200, 129, 641},
                       {113, 64, 700}, {60, 20, 531},  {64, 200, 800},  {3, 5, 2},
                       {60, 20, 1031}, {64, 64, 64},   {96, 128, 1100}, {32, 32, 31},
                       {33, 47, 65},   {128, 32, 640}};

TEST_P(PackedBgemm, MatchesDoubleReference) {
  std::mt19937 gen(11);
  for (const Case& c : kCases) check(c, false, gen);
}

TEST_P(PackedBgemm, IntegerSumsAreExact) {
  std::mt19937 gen(12);
  for (const Case& c : kCases) check(c, true, gen);
}

TEST_P(PackedBgemm, BatchedWithBroadcastOperand) {
  std::mt19937 gen(13);
  const int64_t batch = 5, M = 37, N = 45, K = 67;
  const std::vector<uint16_t> A = random_bf16(batch * M * K, gen, true);
  const std::vector<uint16_t> B = random_bf16(K * N, gen, true);  // one matrix for every product
  std::vector<float> C(batch * M * N, std::numeric_limits<float>::quiet_NaN());
  packed_bgemm_batched(false, false, batch, M, N, K, 1.0f, A.data(), K, M * K, B.data(), N, 0, 0.0f,
                       C.data(), N, M * N);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        double want = 0;
        for (int64_t k = 0; k < K; ++k)
          want += static_cast<double>(math::bf16_to_float(A[b * M * K + i * K + k])) *
                  math::bf16_to_float(B[k * N + j]);
        ASSERT_EQ(C[b * M * N + i * N + j], want) << b << " " << i << " " << j;
      }
}

// packed_bgemm_batched_round: each product rounded in cache must give the bits of rounding
// packed_bgemm_batched's float32 sums; the padding between rows of Y stays untouched.
TEST_P(PackedBgemm, BatchedRoundedMatchesRoundedSums) {
  std::mt19937 gen(14);
  const int64_t batch = parallel_threads() + 3;
  const Case cases[] = {{128, 128, 64}, {37, 45, 67}, {32, 64, 600}, {5, 3, 2}};
  for (const Case& c : cases) {
    for (int t = 0; t < 4; ++t) {
      const bool ta = t & 1, tb = t & 2;
      const int64_t M = c.M, N = c.N, K = c.K, lda = ta ? M : K, ldb = tb ? K : N;
      const int64_t ldy = N + 3, sy = M * ldy + 5;
      const std::vector<uint16_t> A = random_bf16(batch * M * K, gen, false);
      const std::vector<uint16_t> B = random_bf16(batch * K * N, gen, false);
      std::vector<float> C(batch * M * N);
      packed_bgemm_batched(ta, tb, batch, M, N, K, 0.125f, A.data(), lda, M * K, B.data(), ldb,
                           K * N, 0.0f, C.data(), N, M * N);
      const uint16_t pad = 0x7fc1;
      std::vector<uint16_t> Y(batch * sy, pad);
      packed_bgemm_batched_round(ta, tb, batch, M, N, K, 0.125f, A.data(), lda, M * K, B.data(),
                                 ldb, K * N, Y.data(), ldy, sy);
      for (int64_t b = 0; b < batch; ++b)
        for (int64_t i = 0; i < M; ++i)
          for (int64_t j = 0; j < ldy; ++j) {
            const uint16_t got = Y[b * sy + i * ldy + j];
            const uint16_t want = j < N ? math::float_to_bf16(C[b * M * N + i * N + j]) : pad;
            ASSERT_EQ(got, want) << c.M << "x" << c.N << "x" << c.K << " ta " << ta << " tb " << tb
                                 << " at " << b << " " << i << " " << j;
          }
    }
  }
  if (parallel_threads() > 1) {
    uint16_t y = 0;
    const uint16_t one = math::float_to_bf16(1.0f);
    EXPECT_THROW(packed_bgemm_batched_round(false, false, 1, 1, 1, 1, 1.0f, &one, 1, 1, &one, 1, 1,
                                            &y, 1, 1),
                 std::logic_error);
  }
}

TEST_P(PackedBgemm, ValuesPastKInARowAreNeverRead) {
  // A row-major A whose rows run on past K (a view of a wider matrix) holding NaN there: the
  // products read only columns < K of it (the AMX kernel reads whole A rows in place, its
  // last partial step from a zero-padded copy). Integer values: the sums are exact.
  std::mt19937 gen(7);
  const uint16_t nan = math::float_to_bf16(std::numeric_limits<float>::quiet_NaN());
  for (const Case& c : {Case{64, 40, 31}, Case{96, 33, 71}, Case{32, 64, 600}, Case{128, 32, 64}}) {
    for (const bool tb : {false, true}) {
      const int64_t lda = c.K + 9, ldb = tb ? c.K : c.N;
      std::vector<uint16_t> A = random_bf16(c.M * lda, gen, true);
      for (int64_t i = 0; i < c.M; ++i)
        for (int64_t k = c.K; k < lda; ++k) A[i * lda + k] = nan;
      const std::vector<uint16_t> B = random_bf16((tb ? c.N : c.K) * ldb, gen, true);
      std::vector<float> C(c.M * c.N);
      packed_bgemm(false, tb, c.M, c.N, c.K, 1.0f, A.data(), lda, B.data(), ldb, 0.0f, C.data(),
                   c.N);
      for (int64_t i = 0; i < c.M; ++i)
        for (int64_t j = 0; j < c.N; ++j) {
          double sum, mag;
          reference(c, false, tb, A, lda, B, ldb, i, j, sum, mag);
          ASSERT_EQ(C[i * c.N + j], sum) << "M=" << c.M << " N=" << c.N << " K=" << c.K
                                         << " tb=" << tb << " at " << i << "," << j;
        }
    }
  }
}

TEST_P(PackedBgemm, RefusesWithoutTheInstructionSet) {
  set_cpu_isa(CpuIsa::kAvx512);
  EXPECT_FALSE(packed_bgemm_available());
  float c = 0;
  const uint16_t one = math::float_to_bf16(1.0f);
  EXPECT_THROW(packed_bgemm(false, false, 1, 1, 1, 1.0f, &one, 1, &one, 1, 0.0f, &c, 1),
               std::logic_error);
}

INSTANTIATE_TEST_SUITE_P(Bf16Kernels, PackedBgemm,
                         ::testing::Values(CpuIsa::kAvx512Bf16, CpuIsa::kAmx),
                         [](const ::testing::TestParamInfo<CpuIsa>& info) {
                           return std::string(cpu_isa_name(info.param));
                         });

}  // namespace
}  // namespace ortmodule
