// The fused head + loss kernels (kernels/cpu/linear_cross_entropy.h) against the unfused
// path they replace: a naive double-precision product, softmax_cross_entropy_forward /
// _backward (kernels/cpu/loss.h) and naive products for the gradients; for several block
// sizes (one row, a block that does not divide the rows, every row at once), both weight
// layouts, with and without bias, each reduction and an ignored row.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/cpu/linear_cross_entropy.h"
#include "kernels/cpu/loss.h"

namespace ortmodule {
namespace {

using Vec = std::vector<double>;

Vec random_vec(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  Vec v(n);
  for (double& x : v) x = dist(gen);
  return v;
}

struct Reference {
  Vec loss, lse, dx, dw, dbias;
};

// logits = x op(w) + bias in double, then the unfused loss and its gradient.
Reference unfused(const LinearCrossEntropyDims& d, const Vec& x, const Vec& w, const Vec* bias,
                  const std::vector<int64_t>& labels, const Vec& dloss) {
  const int64_t R = d.rows, K = d.hidden, V = d.classes;
  auto weight = [&](int64_t k, int64_t c) { return d.trans_w ? w[c * K + k] : w[k * V + c]; };
  Vec logits(R * V);
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < V; ++c) {
      double s = bias ? (*bias)[c] : 0.0;
      for (int64_t k = 0; k < K; ++k) s += x[r * K + k] * weight(k, c);
      logits[r * V + c] = s;
    }
  Reference ref;
  ref.loss.resize(d.reduction == Reduction::None ? R : 1);
  Vec log_prob(R * V), dlogits(R * V);
  softmax_cross_entropy_forward<double>(R, V, 1, logits.data(), labels.data(), nullptr, d.reduction,
                                        d.ignore_index, d.has_ignore_index, ref.loss.data(),
                                        log_prob.data());
  softmax_cross_entropy_backward<double>(R, V, 1, dloss.data(), log_prob.data(), labels.data(),
                                         nullptr, d.reduction, d.ignore_index, d.has_ignore_index,
                                         dlogits.data());
  ref.lse.resize(R);
  for (int64_t r = 0; r < R; ++r) ref.lse[r] = logits[r * V] - log_prob[r * V];
  ref.dx.assign(R * K, 0.0);
  ref.dw.assign(K * V, 0.0);
  ref.dbias.assign(V, 0.0);
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < V; ++c) {
      const double g = dlogits[r * V + c];
      ref.dbias[c] += g;
      for (int64_t k = 0; k < K; ++k) {
        ref.dx[r * K + k] += g * weight(k, c);
        ref.dw[d.trans_w ? c * K + k : k * V + c] += g * x[r * K + k];
      }
    }
  return ref;
}

template <typename T>
void expect_close(const std::vector<T>& got, const Vec& want, const std::string& what) {
  const double tol = std::is_same<T, float>::value ? 2e-5 : 1e-12;
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_NEAR(got[i], want[i], tol * (1.0 + std::fabs(want[i]))) << what << " at " << i;
}

template <typename T>
void check_case(bool trans_w, bool with_bias, Reduction reduction, int64_t block_rows) {
  LinearCrossEntropyDims d;
  d.rows = 7;
  d.hidden = 5;
  d.classes = 9;
  d.trans_w = trans_w;
  d.reduction = reduction;
  d.has_ignore_index = true;
  d.ignore_index = -100;
  d.block_rows = block_rows;
  const Vec x = random_vec(d.rows * d.hidden, 1), w = random_vec(d.hidden * d.classes, 2);
  const Vec bias = random_vec(d.classes, 3);
  const std::vector<int64_t> labels = {3, 0, -100, 8, 8, 1, 5};
  const Vec dloss = reduction == Reduction::None ? random_vec(d.rows, 4)
                                                 : Vec{reduction == Reduction::Mean ? 1.5 : -0.75};
  const Reference ref = unfused(d, x, w, with_bias ? &bias : nullptr, labels, dloss);
  const std::string what =
      std::string(trans_w ? "[V, K]" : "[K, V]") + (with_bias ? " + bias" : "") + ", reduction " +
      std::to_string(static_cast<int>(reduction)) + ", block " + std::to_string(block_rows);
  const std::vector<T> tx(x.begin(), x.end()), tw(w.begin(), w.end()), tb(bias.begin(), bias.end()),
      tdloss(dloss.begin(), dloss.end());
  std::vector<T> loss(ref.loss.size()), lse(d.rows), block(d.block_rows * d.classes);
  linear_cross_entropy_forward<T>(d, tx.data(), tw.data(), with_bias ? tb.data() : nullptr,
                                  labels.data(), loss.data(), lse.data(), block.data());
  expect_close(loss, ref.loss, what + ": loss");
  expect_close(lse, ref.lse, what + ": lse");
  std::vector<T> dx(d.rows * d.hidden), dw(d.hidden * d.classes), db(d.classes);
  linear_cross_entropy_backward<T>(d, tdloss.data(), tx.data(), tw.data(),
                                   with_bias ? tb.data() : nullptr, labels.data(), lse.data(),
                                   dx.data(), dw.data(), db.data(), block.data());
  expect_close(dx, ref.dx, what + ": dx");
  expect_close(dw, ref.dw, what + ": dw");
  expect_close(db, ref.dbias, what + ": dbias");
}

TEST(LinearCrossEntropy, MatchesTheUnfusedLossForEveryBlockSize) {
  for (bool trans_w : {true, false})
    for (bool bias : {true, false})
      for (Reduction r : {Reduction::Mean, Reduction::Sum, Reduction::None})
        for (int64_t block : {1, 3, 7}) {
          check_case<double>(trans_w, bias, r, block);
          check_case<float>(trans_w, bias, r, block);
        }
}

TEST(LinearCrossEntropy, BadLabelThrowsNamingIt) {
  LinearCrossEntropyDims d;
  d.rows = 2;
  d.hidden = 1;
  d.classes = 3;
  d.block_rows = 2;
  const std::vector<double> x = {1, 2}, w = {1, 2, 3};
  const std::vector<int64_t> labels = {0, 3};
  std::vector<double> loss(1), lse(2), block(6);
  try {
    linear_cross_entropy_forward<double>(d, x.data(), w.data(), nullptr, labels.data(), loss.data(),
                                         lse.data(), block.data());
    FAIL() << "no exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("label 3 at position (n=1"), std::string::npos)
        << e.what();
  }
}

TEST(LinearCrossEntropy, BlockRowsAreAtLeastSixteenAndAtMostTheRows) {
  EXPECT_EQ(linear_cross_entropy_block_rows(10, 50257), 10);
  EXPECT_EQ(linear_cross_entropy_block_rows(4096, 50257), 166);
  EXPECT_EQ(linear_cross_entropy_block_rows(4096, 8192), 1024);
  EXPECT_EQ(linear_cross_entropy_block_rows(4096, int64_t{1} << 30), 16);
}

}  // namespace
}  // namespace ortmodule
