#include "kernels/cpu/linear_cross_entropy.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "kernels/cpu/loss.h"
#include "kernels/gemm.h"
#include "kernels/parallel.h"

namespace ortmodule {
namespace {

// Row statistics and sums run in double, as the unfused loss's (kernels/cpu/loss.cpp).
using Acc = double;

// Rows of a block per parallel chunk: about 32K logits.
int64_t row_grain(int64_t classes) {
  return std::max<int64_t>(1, 32768 / std::max<int64_t>(1, classes));
}

bool ignored(const LinearCrossEntropyDims& d, int64_t label) {
  return loss_entry_ignored(label, d.ignore_index, d.has_ignore_index);
}

// block[0:n, :] = x[r0:r0+n] op(w) + bias: the logits of rows [r0, r0 + n).
template <typename T>
void block_logits(const LinearCrossEntropyDims& d, int64_t r0, int64_t n, const T* x, const T* w,
                  const T* bias, T* block) {
  const int64_t V = d.classes, K = d.hidden;
  if (bias) {
    parallel_for(0, n, row_grain(V), [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) std::copy(bias, bias + V, block + i * V);
    });
  }
  gemm<T>(false, d.trans_w, n, V, K, T(1), x + r0 * K, K, w, d.trans_w ? K : V, bias ? T(1) : T(0),
          block, V);
}

// The number of rows whose label is not ignored: the Mean divisor.
int64_t kept_rows(const LinearCrossEntropyDims& d, const int64_t* labels) {
  int64_t kept = 0;
  for (int64_t r = 0; r < d.rows; ++r) kept += !ignored(d, labels[r]);
  return kept;
}

}  // namespace

int64_t linear_cross_entropy_block_rows(int64_t rows, int64_t classes) {
  const int64_t wanted = kLinearCrossEntropyBlockElements / std::max<int64_t>(1, classes);
  return std::max<int64_t>(1, std::min(rows, std::max<int64_t>(16, wanted)));
}

template <typename T>
void linear_cross_entropy_forward(const LinearCrossEntropyDims& d, const T* x, const T* w,
                                  const T* bias, const int64_t* labels, T* loss, T* lse, T* block) {
  check_loss_labels("FusedLinearCrossEntropy", d.rows, d.classes, 1, labels, d.ignore_index,
                    d.has_ignore_index);
  const int64_t V = d.classes;
  std::vector<Acc> row_loss(static_cast<size_t>(std::max<int64_t>(d.rows, 0)));
  for (int64_t r0 = 0; r0 < d.rows; r0 += d.block_rows) {
    const int64_t n = std::min(d.block_rows, d.rows - r0);
    block_logits(d, r0, n, x, w, bias, block);
    parallel_for(0, n, row_grain(V), [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const T* logits = block + i * V;
        // std::max keeps the running max when a logit is NaN; the NaN still reaches the loss
        // through the sum.
        T max = V > 0 ? logits[0] : -std::numeric_limits<T>::infinity();
        for (int64_t k = 1; k < V; ++k) max = std::max(max, logits[k]);
        Acc sum = 0;
        for (int64_t k = 0; k < V; ++k) sum += std::exp(static_cast<Acc>(logits[k] - max));
        const Acc log_sum = std::log(sum);
        const int64_t r = r0 + i, label = labels[r];
        lse[r] = static_cast<T>(static_cast<Acc>(max) + log_sum);
        // (max - logit) + log_sum: exact near the max, as the unfused log-softmax.
        row_loss[r] = ignored(d, label) ? Acc{0} : static_cast<Acc>(max - logits[label]) + log_sum;
      }
    });
  }
  if (d.reduction == Reduction::None) {
    for (int64_t r = 0; r < d.rows; ++r) loss[r] = static_cast<T>(row_loss[r]);
    return;
  }
  Acc total = 0;
  for (int64_t r = 0; r < d.rows; ++r) total += row_loss[r];
  // Mean with nothing kept is 0/0 = NaN, matching PyTorch.
  loss[0] = static_cast<T>(
      d.reduction == Reduction::Mean ? total / static_cast<Acc>(kept_rows(d, labels)) : total);
}

template <typename T>
void linear_cross_entropy_backward(const LinearCrossEntropyDims& d, const T* dloss, const T* x,
                                   const T* w, const T* bias, const int64_t* labels, const T* lse,
                                   T* dx, T* dw, T* dbias, T* block) {
  check_loss_labels("FusedLinearCrossEntropy backward", d.rows, d.classes, 1, labels,
                    d.ignore_index, d.has_ignore_index);
  const int64_t V = d.classes, K = d.hidden;
  if (dw) std::fill(dw, dw + V * K, T(0));
  if (dbias) std::fill(dbias, dbias + V, T(0));
  const Acc divisor =
      d.reduction == Reduction::Mean ? static_cast<Acc>(kept_rows(d, labels)) : Acc{1};
  for (int64_t r0 = 0; r0 < d.rows; r0 += d.block_rows) {
    const int64_t n = std::min(d.block_rows, d.rows - r0);
    block_logits(d, r0, n, x, w, bias, block);
    // block becomes dlogits = (softmax - onehot(label)) * g.
    parallel_for(0, n, row_grain(V), [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const int64_t r = r0 + i, label = labels[r];
        T* row = block + i * V;
        if (ignored(d, label)) {
          std::fill(row, row + V, T(0));
          continue;
        }
        const T g = static_cast<T>(
            static_cast<Acc>(d.reduction == Reduction::None ? dloss[r] : dloss[0]) / divisor);
        const T row_lse = lse[r];
        for (int64_t k = 0; k < V; ++k) row[k] = std::exp(row[k] - row_lse) * g;
        row[label] -= g;
      }
    });
    if (dx) {
      gemm<T>(false, !d.trans_w, n, K, V, T(1), block, V, w, d.trans_w ? K : V, T(0), dx + r0 * K,
              K);
    }
    if (dw) {
      if (d.trans_w)  // dw [V, K] += dlogits^T x
        gemm<T>(true, false, V, K, n, T(1), block, V, x + r0 * K, K, T(1), dw, K);
      else  // dw [K, V] += x^T dlogits
        gemm<T>(true, false, K, V, n, T(1), x + r0 * K, K, block, V, T(1), dw, V);
    }
    if (dbias) {
      parallel_for(0, V, 1024, [&](int64_t begin, int64_t end) {
        for (int64_t k = begin; k < end; ++k) {
          Acc sum = 0;
          for (int64_t i = 0; i < n; ++i) sum += block[i * V + k];
          dbias[k] = static_cast<T>(static_cast<Acc>(dbias[k]) + sum);
        }
      });
    }
  }
}

#define ORTM_INSTANTIATE_LINEAR_CE(T)                                                              \
  template void linear_cross_entropy_forward<T>(const LinearCrossEntropyDims&, const T*, const T*, \
                                                const T*, const int64_t*, T*, T*, T*);             \
  template void linear_cross_entropy_backward<T>(const LinearCrossEntropyDims&, const T*,          \
                                                 const T*, const T*, const T*, const int64_t*,     \
                                                 const T*, T*, T*, T*, T*);

ORTM_INSTANTIATE_LINEAR_CE(float)
ORTM_INSTANTIATE_LINEAR_CE(double)

#undef ORTM_INSTANTIATE_LINEAR_CE

}  // namespace ortmodule
