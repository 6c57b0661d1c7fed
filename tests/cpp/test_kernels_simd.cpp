// The vectorized float32 kernels of every instruction set this CPU runs (cpu_isa.h),
// each against float64 references written here and against the baseline (scalar) path,
// at sizes that cross the parallel grain. Also the ISA name parsing and validation.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cpu/activation.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/layernorm.h"
#include "kernels/cpu/softmax.h"
#include "kernels/cpu/vec_kernels.h"
#include "kernels/math/bfloat16.h"

namespace ortmodule {
namespace {

constexpr double kFloatEps = 1.1920928955078125e-7;

std::vector<float> random_floats(int64_t n, uint32_t seed, float lo, float hi) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(gen);
  return v;
}

// Every point of a dense grid over [lo, hi], then random points: the tails and the
// branch boundaries of the vector math (|x| / sqrt 2 = 0.5, 2) are all covered.
uint32_t bits_of(float v) {
  uint32_t b;
  std::memcpy(&b, &v, 4);
  return b;
}

std::vector<float> dense_range(float lo, float hi, int64_t n) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = lo + (hi - lo) * static_cast<float>(i) / (n - 1);
  return v;
}

// The instruction sets other than the baseline that this CPU runs.
std::vector<CpuIsa> vector_isas() {
  std::vector<CpuIsa> isas;
  for (CpuIsa isa : {CpuIsa::kAvx2, CpuIsa::kAvx512})
    if (cpu_isa_supported(isa)) isas.push_back(isa);
  return isas;
}

// Restores the ISA active before the test.
class IsaScope {
 public:
  IsaScope() : saved_(active_cpu_isa()) {}
  ~IsaScope() { set_cpu_isa(saved_); }

 private:
  CpuIsa saved_;
};

// |got - want| <= rtol * scale + atol for every element, naming the first failure; scale
// is |want| unless given (the magnitude of the terms where the result cancels).
void expect_close(const std::vector<float>& got, const std::vector<double>& want, double rtol,
                  double atol, const std::vector<float>& x, const std::string& what,
                  const std::vector<double>& scale = {}) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    if (static_cast<double>(got[i]) == want[i]) continue;  // equal infinities included
    const double err = std::abs(static_cast<double>(got[i]) - want[i]);
    const double s = scale.empty() ? std::abs(want[i]) : scale[i];
    if (!(err <= rtol * s + atol)) {
      ADD_FAILURE() << what << ": element " << i << " (x = " << (i < x.size() ? x[i] : 0.0f)
                    << ") is " << got[i] << ", expected " << want[i] << " (error " << err << ")";
      return;
    }
  }
}

double gelu_ref(double x, bool tanh) {
  if (tanh) {
    const double u = 0.7978845608028654 * (x + 0.044715 * x * x * x);
    return x / (1.0 + std::exp(-2.0 * u));
  }
  return 0.5 * x * std::erfc(-x / std::sqrt(2.0));
}
// The condition of the float32 result: Gelu's tanh form takes exp(-2u), whose argument
// is rounded (relative error ~|2u| eps); the gradient is a sum of two terms that cancel
// near x = -0.75, so its error scales with the terms' magnitude, not the sum's.
double gelu_condition(double x, bool tanh) {
  if (!tanh) return 1.0;
  return 1.0 + std::abs(2.0 * 0.7978845608028654 * (x + 0.044715 * x * x * x));
}
double gelu_grad_terms(double dy, double x, bool tanh) {
  if (tanh) {
    const double u = 0.7978845608028654 * (x + 0.044715 * x * x * x);
    const double s = 1.0 / (1.0 + std::exp(-2.0 * u));
    const double du = 0.7978845608028654 * (1.0 + 3.0 * 0.044715 * x * x);
    return std::abs(dy) * (s + std::abs(2.0 * x * s * (1.0 - s) * du));
  }
  const double cdf = 0.5 * std::erfc(-x / std::sqrt(2.0));
  return std::abs(dy) * (cdf + std::abs(x) * std::exp(-0.5 * x * x) / std::sqrt(2.0 * M_PI));
}
double gelu_grad_ref(double dy, double x, bool tanh) {
  if (tanh) {
    const double u = 0.7978845608028654 * (x + 0.044715 * x * x * x);
    const double s = 1.0 / (1.0 + std::exp(-2.0 * u));
    const double du = 0.7978845608028654 * (1.0 + 3.0 * 0.044715 * x * x);
    return dy * (s + 2.0 * x * s * (1.0 - s) * du);
  }
  const double cdf = 0.5 * std::erfc(-x / std::sqrt(2.0));
  const double pdf = std::exp(-0.5 * x * x) / std::sqrt(2.0 * M_PI);
  return dy * (cdf + x * pdf);
}

TEST(CpuIsa, NamesParseAndUnknownNamesAreRefused) {
  for (CpuIsa isa :
       {CpuIsa::kBaseline, CpuIsa::kAvx2, CpuIsa::kAvx512, CpuIsa::kAvx512Bf16, CpuIsa::kAmx})
    EXPECT_EQ(parse_cpu_isa(cpu_isa_name(isa)), isa);
  try {
    parse_cpu_isa("sse9");
    FAIL() << "parse_cpu_isa accepted an unknown name";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("baseline, avx2, avx512, avx512bf16 or amx"),
              std::string::npos)
        << e.what();
  }
  EXPECT_TRUE(cpu_isa_supported(CpuIsa::kBaseline));
  IsaScope scope;
  set_cpu_isa(CpuIsa::kBaseline);
  EXPECT_EQ(active_cpu_isa(), CpuIsa::kBaseline);
  EXPECT_EQ(vec_kernels().gelu_forward, nullptr);
  for (CpuIsa isa : {CpuIsa::kAvx2, CpuIsa::kAvx512, CpuIsa::kAvx512Bf16}) {
    if (cpu_isa_supported(isa)) {
      set_cpu_isa(isa);
      EXPECT_EQ(active_cpu_isa(), isa);
      EXPECT_NE(vec_kernels().gelu_forward, nullptr);
      // Only avx512bf16 has the bfloat16 GEMM.
      EXPECT_EQ(vec_kernels().bf16_gemm_tile != nullptr, isa == CpuIsa::kAvx512Bf16);
    } else {
      EXPECT_THROW(set_cpu_isa(isa), std::invalid_argument);
    }
  }
}

TEST(CpuIsa, ThisX86MachineRunsAvx2WhereItsCpuHasIt) {
#if defined(__x86_64__)
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    EXPECT_TRUE(cpu_isa_supported(CpuIsa::kAvx2)) << "the AVX2 kernels were not compiled in";
  }
#endif
}

// Gelu (both forms) forward and backward over [-14, 14] plus random values, against
// float64 and against the baseline path.
TEST(SimdKernels, GeluMatchesFloat64AndBaseline) {
  IsaScope scope;
  std::vector<float> x = dense_range(-14.0f, 14.0f, 280001);
  const std::vector<float> extra = random_floats(20011, 7, -6.0f, 6.0f);
  x.insert(x.end(), extra.begin(), extra.end());
  const int64_t n = static_cast<int64_t>(x.size());
  const std::vector<float> dy = random_floats(n, 11, -2.0f, 2.0f);
  for (bool tanh : {false, true}) {
    std::vector<double> y_ref(n), dx_ref(n), y_scale(n), dx_scale(n);
    for (int64_t i = 0; i < n; ++i) {
      y_ref[i] = gelu_ref(x[i], tanh);
      dx_ref[i] = gelu_grad_ref(dy[i], x[i], tanh);
      y_scale[i] = std::abs(y_ref[i]) * gelu_condition(x[i], tanh);
      dx_scale[i] = gelu_grad_terms(dy[i], x[i], tanh) * gelu_condition(x[i], tanh);
    }
    set_cpu_isa(CpuIsa::kBaseline);
    std::vector<float> y_base(n), dx_base(n);
    gelu_forward_f32(n, x.data(), y_base.data(), tanh);
    gelu_backward_f32(n, dy.data(), x.data(), dx_base.data(), nullptr, tanh);
    // The backward that also writes gelu(x) (for a weight gradient that reads it): both
    // results bit for bit those of the two kernels alone.
    auto expect_backward_with_value = [&](const std::vector<float>& y_alone,
                                          const std::vector<float>& dx_alone,
                                          const std::string& what) {
      std::vector<float> y2(n), dx2(n);
      gelu_backward_f32(n, dy.data(), x.data(), dx2.data(), y2.data(), tanh);
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(bits_of(y2[i]), bits_of(y_alone[i])) << what << " value at x = " << x[i];
        ASSERT_EQ(bits_of(dx2[i]), bits_of(dx_alone[i])) << what << " gradient at x = " << x[i];
      }
    };
    expect_backward_with_value(y_base, dx_base, tanh ? "baseline gelu tanh" : "baseline gelu");
    for (CpuIsa isa : vector_isas()) {
      set_cpu_isa(isa);
      const std::string what = std::string(cpu_isa_name(isa)) + (tanh ? " gelu tanh" : " gelu");
      std::vector<float> y(n), dx(n);
      gelu_forward_f32(n, x.data(), y.data(), tanh);
      gelu_backward_f32(n, dy.data(), x.data(), dx.data(), nullptr, tanh);
      expect_backward_with_value(y, dx, what);
      // A few ulp of the exact value; the absolute floor only covers results that
      // underflow (|y| < 1e-30, x < -11).
      expect_close(y, y_ref, 8 * kFloatEps, 1e-30, x, what + " forward vs float64", y_scale);
      expect_close(dx, dx_ref, 8 * kFloatEps, 1e-30, x, what + " backward vs float64", dx_scale);
      // The baseline computes 1 + erf(x) (or 1 + tanh(u)), which cancels for x << 0: it
      // is only accurate to ~1e-7 absolute times |x| there.
      std::vector<double> y_b(y_base.begin(), y_base.end()), dx_b(dx_base.begin(), dx_base.end());
      expect_close(y, y_b, 8 * kFloatEps, 2e-6, x, what + " forward vs baseline", y_scale);
      expect_close(dx, dx_b, 8 * kFloatEps, 2e-5, x, what + " backward vs baseline", dx_scale);
    }
  }
}

TEST(SimdKernels, GeluPropagatesNaNAndInfinity) {
  IsaScope scope;
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> x = {std::nanf(""), inf, 0.0f, -0.0f};
  for (CpuIsa isa : vector_isas()) {
    set_cpu_isa(isa);
    for (bool tanh : {false, true}) {
      std::vector<float> y(x.size());
      gelu_forward_f32(static_cast<int64_t>(x.size()), x.data(), y.data(), tanh);
      EXPECT_TRUE(std::isnan(y[0])) << cpu_isa_name(isa);
      EXPECT_EQ(y[1], inf) << cpu_isa_name(isa);
      EXPECT_EQ(y[2], 0.0f) << cpu_isa_name(isa);
      EXPECT_EQ(y[3], 0.0f) << cpu_isa_name(isa);
    }
  }
}

// Exp, Sigmoid and Tanh over their whole float range (tails, the small-|x| branch of tanh,
// exp's subnormal results), against float64.
TEST(SimdKernels, ActivationsMatchFloat64) {
  IsaScope scope;
  std::vector<float> x = dense_range(-104.0f, 89.0f, 193001);
  const std::vector<float> near_zero = dense_range(-1.0f, 1.0f, 20001);
  x.insert(x.end(), near_zero.begin(), near_zero.end());
  const int64_t n = static_cast<int64_t>(x.size());
  set_cpu_isa(CpuIsa::kBaseline);
  std::vector<float> y(n);
  EXPECT_FALSE(activation_forward_f32(VecActivation::kExp, n, x.data(), y.data()))
      << "the baseline has no vector activations; the ops run their scalar loops";
  for (CpuIsa isa : vector_isas()) {
    set_cpu_isa(isa);
    for (VecActivation op : {VecActivation::kExp, VecActivation::kSigmoid, VecActivation::kTanh}) {
      std::vector<double> want(n), scale(n);
      for (int64_t i = 0; i < n; ++i) {
        const double v = x[i];
        want[i] = op == VecActivation::kExp       ? std::exp(v)
                  : op == VecActivation::kSigmoid ? 1.0 / (1.0 + std::exp(-v))
                                                  : std::tanh(v);
        // Beyond the largest float (plus half an ulp) the float result is inf.
        if (want[i] > std::numeric_limits<float>::max() * (1.0 + 0x1p-25))
          want[i] = std::numeric_limits<double>::infinity();
        // exp's argument is rounded to float: relative error ~|x| eps in the result.
        scale[i] = std::abs(want[i]) * (op == VecActivation::kTanh ? 1.0 : 1.0 + std::abs(v));
      }
      ASSERT_TRUE(activation_forward_f32(op, n, x.data(), y.data()));
      const char* name = op == VecActivation::kExp       ? " exp"
                         : op == VecActivation::kSigmoid ? " sigmoid"
                                                         : " tanh";
      // The floor is below the smallest normal float: subnormal results lose precision.
      expect_close(y, want, 4 * kFloatEps, 2e-38, x, std::string(cpu_isa_name(isa)) + name, scale);
    }
  }
}

// Rows of odd and vector-multiple lengths (tails), with masked (-inf and very
// negative) entries as attention masks produce.
TEST(SimdKernels, SoftmaxRowsMatchFloat64AndBaseline) {
  IsaScope scope;
  for (int64_t dim : {1, 7, 16, 128, 1000}) {
    const int64_t rows = std::max<int64_t>(3, 300000 / dim);
    const int64_t n = rows * dim;
    std::vector<float> x = random_floats(n, 3 + dim, -8.0f, 8.0f);
    for (int64_t r = 0; r < rows; r += 3)
      if (dim > 1) x[r * dim + dim / 2] = r % 2 ? -std::numeric_limits<float>::infinity() : -3e38f;
    const std::vector<float> dy = random_floats(n, 5 + dim, -1.0f, 1.0f);
    for (bool log : {false, true}) {
      std::vector<double> y_ref(n), dx_ref(n);
      for (int64_t r = 0; r < rows; ++r) {
        const float* xr = x.data() + r * dim;
        double mx = -INFINITY, sum = 0;
        for (int64_t k = 0; k < dim; ++k) mx = std::max<double>(mx, xr[k]);
        for (int64_t k = 0; k < dim; ++k) sum += std::exp(xr[k] - mx);
        double s = 0;
        for (int64_t k = 0; k < dim; ++k) {
          const double p = std::exp(xr[k] - mx) / sum;
          y_ref[r * dim + k] = log ? (xr[k] - mx) - std::log(sum) : p;
          s += log ? dy[r * dim + k] : dy[r * dim + k] * p;
        }
        for (int64_t k = 0; k < dim; ++k) {
          const double p = std::exp(xr[k] - mx) / sum;
          dx_ref[r * dim + k] = log ? dy[r * dim + k] - p * s : p * (dy[r * dim + k] - s);
        }
      }
      set_cpu_isa(CpuIsa::kBaseline);
      std::vector<float> y_base(n), dx_base(n);
      softmax_forward<float>(rows, dim, 1, x.data(), y_base.data(), log);
      softmax_backward<float>(rows, dim, 1, dy.data(), y_base.data(), dx_base.data(), log);
      for (CpuIsa isa : vector_isas()) {
        set_cpu_isa(isa);
        const std::string what = std::string(cpu_isa_name(isa)) +
                                 (log ? " log_softmax dim " : " softmax dim ") +
                                 std::to_string(dim);
        std::vector<float> y(n), dx(n);
        softmax_forward<float>(rows, dim, 1, x.data(), y.data(), log);
        softmax_backward<float>(rows, dim, 1, dy.data(), y.data(), dx.data(), log);
        // Log-softmax of a masked entry is about -3e38 (or -inf): relative tolerance.
        expect_close(y, y_ref, 8 * kFloatEps, 1e-7, x, what + " forward vs float64");
        expect_close(dx, dx_ref, 16 * kFloatEps, 1e-6, x, what + " backward vs float64");
        std::vector<double> y_b(y_base.begin(), y_base.end());
        std::vector<double> dx_b(dx_base.begin(), dx_base.end());
        expect_close(y, y_b, 8 * kFloatEps, 1e-7, x, what + " forward vs baseline");
        expect_close(dx, dx_b, 16 * kFloatEps, 1e-6, x, what + " backward vs baseline");
      }
    }
  }
}

// The additive-mask attention scores, scale * x + mask, round as the unfused Mul then Add
// (twice), bit for bit, on every instruction set: a fused multiply-add would round once.
TEST(SimdKernels, AttentionScoresRoundLikeMulThenAdd) {
  IsaScope scope;
  for (int64_t n : {1, 15, 16, 17, 1000, 4099}) {
    const std::vector<float> x = random_floats(n, 11 + n, -30.0f, 30.0f);
    std::vector<float> mask = random_floats(n, 13 + n, -5.0f, 5.0f);
    for (int64_t k = 0; k < n; k += 7) mask[k] = -std::numeric_limits<float>::max();
    const float scale = 0.125f * 1.1f;
    std::vector<float> want(n);
    int64_t fused_differs = 0;
    for (int64_t k = 0; k < n; ++k) {
      volatile float product = x[k] * scale;
      want[k] = product + mask[k];
      fused_differs += std::fma(x[k], scale, mask[k]) != want[k];
    }
    // The data tell the two roundings apart, so a contracted kernel fails below.
    if (n >= 1000) {
      EXPECT_GT(fused_differs, 0) << "n " << n;
    }
    RowMask<float> row;
    row.add = mask.data();
    row.step = 1;
    for (CpuIsa isa : {CpuIsa::kBaseline, CpuIsa::kAvx2, CpuIsa::kAvx512}) {
      if (!cpu_isa_supported(isa)) continue;
      set_cpu_isa(isa);
      std::vector<float> y(n);
      attention_scores_row<float>(n, scale, x.data(), row, y.data());
      for (int64_t k = 0; k < n; ++k)
        ASSERT_EQ(y[k], want[k]) << cpu_isa_name(isa) << " n " << n << " element " << k;
    }
  }
}

TEST(SimdKernels, LayerNormMatchesFloat64AndBaseline) {
  IsaScope scope;
  for (int64_t cols : {1, 5, 16, 256, 1027}) {
    const int64_t rows = std::max<int64_t>(3, 200000 / cols);
    const int64_t n = rows * cols;
    // Rows far from zero check the centred variance.
    std::vector<float> x = random_floats(n, 17 + cols, -2.0f, 2.0f);
    for (int64_t i = 0; i < n; ++i) x[i] += static_cast<float>((i / cols) % 7) * 10.0f;
    const std::vector<float> scale = random_floats(cols, 19, 0.5f, 1.5f);
    const std::vector<float> bias = random_floats(cols, 23, -1.0f, 1.0f);
    const std::vector<float> dy = random_floats(n, 29 + cols, -1.0f, 1.0f);
    const double eps = 1e-5;
    std::vector<double> y_ref(n), dx_ref(n);
    for (int64_t r = 0; r < rows; ++r) {
      const float* xr = x.data() + r * cols;
      double m = 0, v = 0;
      for (int64_t c = 0; c < cols; ++c) m += xr[c];
      m /= cols;
      for (int64_t c = 0; c < cols; ++c) v += (xr[c] - m) * (xr[c] - m);
      const double is = 1.0 / std::sqrt(v / cols + eps);
      double mg = 0, mgx = 0;
      for (int64_t c = 0; c < cols; ++c) {
        const double g = static_cast<double>(dy[r * cols + c]) * scale[c];
        y_ref[r * cols + c] = (xr[c] - m) * is * scale[c] + bias[c];
        mg += g / cols;
        mgx += g * (xr[c] - m) * is / cols;
      }
      for (int64_t c = 0; c < cols; ++c) {
        const double g = static_cast<double>(dy[r * cols + c]) * scale[c];
        dx_ref[r * cols + c] = is * (g - mg - (xr[c] - m) * is * mgx);
      }
    }
    set_cpu_isa(CpuIsa::kBaseline);
    std::vector<float> y_base(n), mean_base(rows), is_base(rows), dx_base(n);
    layernorm_forward<float>(rows, cols, eps, x.data(), scale.data(), bias.data(), y_base.data(),
                             mean_base.data(), is_base.data());
    layernorm_backward<float>(rows, cols, dy.data(), x.data(), scale.data(), mean_base.data(),
                              is_base.data(), dx_base.data(), nullptr, nullptr);
    for (CpuIsa isa : vector_isas()) {
      set_cpu_isa(isa);
      const std::string what =
          std::string(cpu_isa_name(isa)) + " layernorm cols " + std::to_string(cols);
      std::vector<float> y(n), mean(rows), is(rows), dx(n);
      layernorm_forward<float>(rows, cols, eps, x.data(), scale.data(), bias.data(), y.data(),
                               mean.data(), is.data());
      layernorm_backward<float>(rows, cols, dy.data(), x.data(), scale.data(), mean.data(),
                                is.data(), dx.data(), nullptr, nullptr);
      // Sums over cols terms: error relative to the row's scale (normalised values ~1).
      expect_close(y, y_ref, 0, 2e-5, x, what + " forward vs float64");
      expect_close(dx, dx_ref, 0, 2e-4, x, what + " backward vs float64");
      std::vector<double> mb(mean_base.begin(), mean_base.end()),
          ib(is_base.begin(), is_base.end());
      expect_close(mean, mb, 2 * kFloatEps, 0, x, what + " mean vs baseline");
      expect_close(is, ib, 8 * kFloatEps, 0, x, what + " inv_std vs baseline");
      std::vector<double> y_b(y_base.begin(), y_base.end()), dx_b(dx_base.begin(), dx_base.end());
      expect_close(y, y_b, 0, 2e-5, x, what + " forward vs baseline");
      expect_close(dx, dx_b, 0, 2e-4, x, what + " backward vs baseline");
    }
  }
}

// sum_to_shape's leading-axis sums of float32 ([R, N] -> [N], a bias gradient) on every vector
// instruction set: bit for bit the baseline's double sums, over row blocks (few columns) and
// over columns (many, or rows within one block), widths no multiple of a vector.
TEST(SimdKernels, LeadingAxisSumsMatchTheBaselineBits) {
  IsaScope scope;
  const std::pair<int64_t, int64_t> shapes[] = {{1000, 256}, {777, 37},    {40, 300},
                                                {3, 20000},  {130, 16390}, {64, 1}};
  for (const auto& [rows, cols] : shapes) {
    const std::vector<float> x = random_floats(rows * cols, 53 + cols, -1.0f, 1.0f);
    std::vector<double> want(cols, 0.0);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) want[c] += x[r * cols + c];
    set_cpu_isa(CpuIsa::kBaseline);
    std::vector<float> base(cols);
    sum_to_shape<float>({rows, cols}, x.data(), {cols}, base.data());
    for (CpuIsa isa : vector_isas()) {
      set_cpu_isa(isa);
      std::vector<float> got(cols);
      sum_to_shape<float>({rows, cols}, x.data(), {cols}, got.data());
      for (int64_t c = 0; c < cols; ++c) {
        ASSERT_EQ(got[c], base[c])
            << cpu_isa_name(isa) << " " << rows << "x" << cols << " at " << c;
        ASSERT_NEAR(got[c], want[c], 1e-6 * std::sqrt(static_cast<double>(rows)) + 1e-6)
            << cpu_isa_name(isa) << " vs float64 at " << c;
      }
    }
  }
}

// The normalizations' parameter gradients (dscale, dbias: sums over rows in double, in fixed
// blocks of rows) on every vector instruction set: bit for bit the baseline's sums, and close
// to float64's; dx computed along with them is dx computed alone. LayerNorm and RMS norm,
// widths past and short of a vector, rows past a block.
TEST(SimdKernels, NormParameterGradientsMatchTheBaselineBits) {
  IsaScope scope;
  for (int64_t cols : {1, 5, 16, 256, 1027}) {
    const int64_t rows = std::max<int64_t>(3, 100000 / cols);
    const int64_t n = rows * cols;
    std::vector<float> x = random_floats(n, 41 + cols, -2.0f, 2.0f);
    for (int64_t i = 0; i < n; ++i) x[i] += static_cast<float>((i / cols) % 5) * 3.0f;
    const std::vector<float> scale = random_floats(cols, 43, 0.5f, 1.5f);
    const std::vector<float> dy = random_floats(n, 47 + cols, -1.0f, 1.0f);
    std::vector<float> mean(rows), inv_std(rows), y(n), dx(n);
    set_cpu_isa(CpuIsa::kBaseline);
    layernorm_forward<float>(rows, cols, 1e-5, x.data(), scale.data(), nullptr, y.data(),
                             mean.data(), inv_std.data());
    std::vector<double> scale_ref(cols, 0.0), bias_ref(cols, 0.0), rms_ref(cols, 0.0);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        const double g = dy[r * cols + c], xv = x[r * cols + c];
        scale_ref[c] += g * (xv - mean[r]) * inv_std[r];
        bias_ref[c] += g;
        rms_ref[c] += g * xv * inv_std[r];
      }
    std::vector<float> ds_base(cols), db_base(cols), dr_base(cols);
    layernorm_backward<float>(rows, cols, dy.data(), x.data(), scale.data(), mean.data(),
                              inv_std.data(), dx.data(), ds_base.data(), db_base.data());
    rmsnorm_backward<float>(rows, cols, dy.data(), x.data(), scale.data(), inv_std.data(),
                            dx.data(), dr_base.data());
    for (CpuIsa isa : vector_isas()) {
      set_cpu_isa(isa);
      const std::string what = std::string(cpu_isa_name(isa)) + " cols " + std::to_string(cols);
      std::vector<float> ds(cols), db(cols), dr(cols), dx_alone(n), dr_x(n), dr_alone(n);
      layernorm_backward<float>(rows, cols, dy.data(), x.data(), scale.data(), mean.data(),
                                inv_std.data(), dx.data(), ds.data(), db.data());
      rmsnorm_backward<float>(rows, cols, dy.data(), x.data(), scale.data(), inv_std.data(),
                              dr_x.data(), dr.data());
      // dx computed with the sums (in their blocks of rows) is dx computed alone.
      layernorm_backward<float>(rows, cols, dy.data(), x.data(), scale.data(), mean.data(),
                                inv_std.data(), dx_alone.data(), nullptr, nullptr);
      rmsnorm_backward<float>(rows, cols, dy.data(), x.data(), scale.data(), inv_std.data(),
                              dr_alone.data(), nullptr);
      ASSERT_EQ(dx, dx_alone) << what;
      ASSERT_EQ(dr_x, dr_alone) << what;
      for (int64_t c = 0; c < cols; ++c) {
        ASSERT_EQ(ds[c], ds_base[c]) << what << " dscale at " << c;
        ASSERT_EQ(db[c], db_base[c]) << what << " dbias at " << c;
        ASSERT_EQ(dr[c], dr_base[c]) << what << " RMS dscale at " << c;
        const double tol = 1e-5 * std::sqrt(static_cast<double>(rows)) * 8.0;
        ASSERT_NEAR(ds[c], scale_ref[c], tol) << what << " dscale vs float64 at " << c;
        ASSERT_NEAR(db[c], bias_ref[c], tol) << what << " dbias vs float64 at " << c;
        ASSERT_NEAR(dr[c], rms_ref[c], tol) << what << " RMS dscale vs float64 at " << c;
      }
    }
  }
}

// The bfloat16 product epilogue in registers (VecKernels::bias_round_gelu_bf16) against its
// definition, the passes it replaces: the float32 bias add, math::float_to_bf16 (round to
// nearest even, ties included, NaN kept quiet), the exact widening and the same instruction
// set's gelu_forward, then rounding again; bit for bit, over a row whose length is no
// multiple of 16, with and without a bias, a pre-activation output and each activation.
TEST(SimdKernels, Bf16EpilogueMatchesItsPasses) {
  IsaScope scope;
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> x = random_floats(1001, 31, -6.0f, 6.0f);
  const float specials[] = {std::numeric_limits<float>::quiet_NaN(),
                            inf,
                            -inf,
                            0.0f,
                            -0.0f,
                            1.00390625f /* 1 + 2^-8: a tie */,
                            1.01171875f /* another */,
                            1e-40f /* subnormal */,
                            3.0e38f,
                            -3.0e38f};
  for (size_t i = 0; i < sizeof(specials) / sizeof(specials[0]); ++i) x[i * 7] = specials[i];
  const std::vector<float> bias = random_floats(1001, 32, -1.0f, 1.0f);
  int checked = 0;
  for (CpuIsa isa : {CpuIsa::kAvx512, CpuIsa::kAvx512Bf16, CpuIsa::kAmx}) {
    if (!cpu_isa_supported(isa)) continue;
    set_cpu_isa(isa);
    const VecKernels& vk = vec_kernels();
    ASSERT_NE(vk.bias_round_gelu_bf16, nullptr) << cpu_isa_name(isa);
    for (VecGelu gelu : {VecGelu::kNone, VecGelu::kErf, VecGelu::kTanh}) {
      for (int with_bias = 0; with_bias < 2; ++with_bias) {
        for (int64_t n : {int64_t{1001}, int64_t{16}, int64_t{5}}) {
          std::vector<uint16_t> want_pre(n), want_y(n);
          std::vector<float> wide(n), act(n);
          for (int64_t i = 0; i < n; ++i) {
            want_pre[i] = math::float_to_bf16(with_bias ? x[i] + bias[i] : x[i]);
            wide[i] = math::bf16_to_float(want_pre[i]);
          }
          if (gelu != VecGelu::kNone)
            vk.gelu_forward(n, wide.data(), act.data(), gelu == VecGelu::kTanh);
          for (int64_t i = 0; i < n; ++i)
            want_y[i] = gelu == VecGelu::kNone ? want_pre[i] : math::float_to_bf16(act[i]);
          std::vector<uint16_t> pre(n + 1, 0xABCD), y(n + 1, 0xABCD), y_only(n + 1, 0xABCD);
          const float* b = with_bias ? bias.data() : nullptr;
          vk.bias_round_gelu_bf16(n, x.data(), b, gelu, pre.data(), y.data());
          vk.bias_round_gelu_bf16(n, x.data(), b, gelu, nullptr, y_only.data());
          const std::string what = std::string(cpu_isa_name(isa)) + " gelu " +
                                   std::to_string(static_cast<int>(gelu)) + " bias " +
                                   std::to_string(with_bias) + " n " + std::to_string(n);
          for (int64_t i = 0; i < n; ++i) {
            ASSERT_EQ(pre[i], want_pre[i]) << what << " pre at " << i << " (x = " << x[i] << ")";
            ASSERT_EQ(y[i], want_y[i]) << what << " y at " << i << " (x = " << x[i] << ")";
            ASSERT_EQ(y_only[i], want_y[i]) << what << " y (no pre) at " << i;
          }
          EXPECT_EQ(pre[n], 0xABCD) << what << ": wrote past the row";
          EXPECT_EQ(y[n], 0xABCD) << what << ": wrote past the row";
          ++checked;
        }
      }
    }
  }
  if (checked == 0) GTEST_SKIP() << "this CPU runs no AVX-512 kernels";
}

// The float32 -> bfloat16 -> float32 round trip in registers (VecKernels::round_bf16_float,
// the fused element-wise program's rounding) against math::float_to_bf16 and the exact
// widening, bit for bit, in place and not, over ties, NaN, infinities and subnormals.
TEST(SimdKernels, Bf16RoundTripMatchesTheConversions) {
  IsaScope scope;
  std::vector<float> x = random_floats(1003, 33, -100.0f, 100.0f);
  const float specials[] = {std::numeric_limits<float>::quiet_NaN(),
                            std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(),
                            -0.0f,
                            1.00390625f,
                            -1.01171875f,
                            1e-40f,
                            -3e-39f,
                            3.3895e38f,
                            std::numeric_limits<float>::max()};
  for (size_t i = 0; i < sizeof(specials) / sizeof(specials[0]); ++i) x[i * 5 + 1] = specials[i];
  int checked = 0;
  for (CpuIsa isa : {CpuIsa::kAvx512, CpuIsa::kAvx512Bf16, CpuIsa::kAmx}) {
    if (!cpu_isa_supported(isa)) continue;
    set_cpu_isa(isa);
    const VecKernels& vk = vec_kernels();
    ASSERT_NE(vk.round_bf16_float, nullptr) << cpu_isa_name(isa);
    for (int64_t n : {int64_t{1003}, int64_t{32}, int64_t{7}}) {
      std::vector<float> y(n + 1, 42.0f), inplace(x.begin(), x.begin() + n);
      vk.round_bf16_float(n, x.data(), y.data());
      vk.round_bf16_float(n, inplace.data(), inplace.data());
      for (int64_t i = 0; i < n; ++i) {
        const float want = math::bf16_to_float(math::float_to_bf16(x[i]));
        uint32_t got_bits, want_bits, inplace_bits;
        std::memcpy(&got_bits, &y[i], 4);
        std::memcpy(&want_bits, &want, 4);
        std::memcpy(&inplace_bits, &inplace[i], 4);
        ASSERT_EQ(got_bits, want_bits)
            << cpu_isa_name(isa) << " at " << i << " (x = " << x[i] << ")";
        ASSERT_EQ(inplace_bits, want_bits) << cpu_isa_name(isa) << " in place at " << i;
      }
      EXPECT_EQ(y[n], 42.0f) << cpu_isa_name(isa) << ": wrote past the row";
      ++checked;
    }
  }
  if (checked == 0) GTEST_SKIP() << "this CPU runs no AVX-512 kernels";
}

}  // namespace
}  // namespace ortmodule
