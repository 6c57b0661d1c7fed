#include "kernels/cpu/loss.h"

#include <algorithm>
#include <cstdint>
#include <sstream>
#include <stdexcept>
#include <vector>

#include "kernels/cpu/softmax.h"
#include "kernels/math/loss.h"
#include "kernels/parallel.h"

namespace ortmodule {
namespace {

// Reductions run in double so that float losses summed over large batches stay
// accurate; for double inputs this changes nothing.
using Acc = double;

constexpr int64_t kGrain = 16384;
// Block size of the loss sums. Fixed blocks (not per-thread partials) make the
// result independent of the thread count.
constexpr int64_t kSumBlock = 4096;

// Checked serially before any parallel work: an exception must not escape from a
// worker thread, and an invalid label would otherwise index out of bounds.
void check_labels(const char* op, int64_t N, int64_t C, int64_t D, const int64_t* target,
                  int64_t ignore_index, bool has_ignore_index) {
  for (int64_t k = 0; k < N * D; ++k) {
    const int64_t label = target[k];
    if ((label >= 0 && label < C) || loss_entry_ignored(label, ignore_index, has_ignore_index)) {
      continue;
    }
    std::ostringstream msg;
    msg << op << ": label " << label << " at position (n=" << k / D << ", d=" << k % D
        << ") is outside the class range [0, " << C << ") (C = " << C << ")";
    if (has_ignore_index) msg << " and is not ignore_index " << ignore_index;
    throw std::invalid_argument(msg.str());
  }
}

struct LossSum {
  Acc loss = 0;
  Acc weight = 0;  // sum of the weights of the kept entries: the Mean divisor
};

// Sums add_term(k, sum) over k in [0, count).
template <typename AddTerm>
LossSum blocked_sum(int64_t count, const AddTerm& add_term) {
  const int64_t blocks = (count + kSumBlock - 1) / kSumBlock;
  std::vector<LossSum> partial(blocks);
  parallel_for(0, blocks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) {
      LossSum s;
      const int64_t k_end = std::min(count, (b + 1) * kSumBlock);
      for (int64_t k = b * kSumBlock; k < k_end; ++k) add_term(k, s);
      partial[b] = s;
    }
  });
  LossSum total;
  for (const LossSum& s : partial) {
    total.loss += s.loss;
    total.weight += s.weight;
  }
  return total;
}

template <typename T>
Acc kept_weight_sum(int64_t count, const int64_t* target, const T* weight, int64_t ignore_index,
                    bool has_ignore_index) {
  return blocked_sum(count,
                     [&](int64_t k, LossSum& s) {
                       const int64_t label = target[k];
                       if (loss_entry_ignored(label, ignore_index, has_ignore_index)) return;
                       s.weight += loss_class_weight(weight, label);
                     })
      .weight;
}

// Labels must already be checked.
template <typename T>
void nll_forward_checked(int64_t N, int64_t C, int64_t D, const T* input, const int64_t* target,
                         const T* weight, Reduction reduction, int64_t ignore_index,
                         bool has_ignore_index, T* loss) {
  const int64_t count = N * D;
  if (reduction == Reduction::None) {
    parallel_for(0, count, kGrain, [&](int64_t begin, int64_t end) {
      for (int64_t k = begin; k < end; ++k) {
        const int64_t label = target[k];
        if (loss_entry_ignored(label, ignore_index, has_ignore_index)) {
          loss[k] = T(0);
          continue;
        }
        loss[k] = static_cast<T>(-static_cast<Acc>(input[loss_class_offset(k, label, C, D)]) *
                                 loss_class_weight(weight, label));
      }
    });
    return;
  }
  const LossSum total = blocked_sum(count, [&](int64_t k, LossSum& s) {
    const int64_t label = target[k];
    if (loss_entry_ignored(label, ignore_index, has_ignore_index)) return;
    const Acc w = loss_class_weight(weight, label);
    s.loss -= static_cast<Acc>(input[loss_class_offset(k, label, C, D)]) * w;
    s.weight += w;
  });
  // Mean with nothing kept is 0/0 = NaN, matching PyTorch.
  loss[0] = static_cast<T>(reduction == Reduction::Mean ? total.loss / total.weight : total.loss);
}

// The gradient NegativeLogLikelihoodLoss gives its input at entry k's label (0 at every
// other class): -g w / divisor, with g the loss gradient of entry k (reduction None) or of
// the whole loss, w the label's class weight and divisor the kept entries' weight sum under
// Mean (else 1). Labels must already be checked.
template <typename T>
class NllEntryGradient {
 public:
  NllEntryGradient(int64_t count, const T* dloss, const int64_t* target, const T* weight,
                   Reduction reduction, int64_t ignore_index, bool has_ignore_index)
      : dloss_(dloss),
        target_(target),
        weight_(weight),
        reduction_(reduction),
        ignore_index_(ignore_index),
        has_ignore_index_(has_ignore_index),
        divisor_(reduction == Reduction::Mean
                     ? kept_weight_sum(count, target, weight, ignore_index, has_ignore_index)
                     : Acc{1}) {}

  // Writes entry k's gradient at its label into `classes` (the entry's class 0, classes
  // `stride` apart); an ignored entry writes nothing.
  void write(int64_t k, T* classes, int64_t stride) const {
    const int64_t label = target_[k];
    if (loss_entry_ignored(label, ignore_index_, has_ignore_index_)) return;
    const Acc g =
        static_cast<Acc>(reduction_ == Reduction::None ? dloss_[k] : dloss_[0]) / divisor_;
    classes[label * stride] = static_cast<T>(-g * loss_class_weight(weight_, label));
  }

 private:
  const T* dloss_;
  const int64_t* target_;
  const T* weight_;
  Reduction reduction_;
  int64_t ignore_index_;
  bool has_ignore_index_;
  Acc divisor_;
};

// Labels must already be checked.
template <typename T>
void nll_backward_checked(int64_t N, int64_t C, int64_t D, const T* dloss, const int64_t* target,
                          const T* weight, Reduction reduction, int64_t ignore_index,
                          bool has_ignore_index, T* d_input) {
  const int64_t count = N * D;
  parallel_for(0, N * C * D, kGrain, [&](int64_t begin, int64_t end) {
    std::fill(d_input + begin, d_input + end, T(0));
  });
  const NllEntryGradient<T> grad(count, dloss, target, weight, reduction, ignore_index,
                                 has_ignore_index);
  // Each (n, d) owns exactly one element of d_input, so chunks never collide.
  parallel_for(0, count, kGrain, [&](int64_t begin, int64_t end) {
    for (int64_t k = begin; k < end; ++k) grad.write(k, d_input + loss_class_offset(k, 0, C, D), D);
  });
}

}  // namespace

void check_loss_labels(const char* op, int64_t N, int64_t C, int64_t D, const int64_t* target,
                       int64_t ignore_index, bool has_ignore_index) {
  check_labels(op, N, C, D, target, ignore_index, has_ignore_index);
}

template <typename T>
void nll_loss_forward(int64_t N, int64_t C, int64_t D, const T* input, const int64_t* target,
                      const T* weight, Reduction reduction, int64_t ignore_index,
                      bool has_ignore_index, T* loss) {
  check_labels("NegativeLogLikelihoodLoss", N, C, D, target, ignore_index, has_ignore_index);
  nll_forward_checked(N, C, D, input, target, weight, reduction, ignore_index, has_ignore_index,
                      loss);
}

template <typename T>
void nll_loss_backward(int64_t N, int64_t C, int64_t D, const T* dloss, const int64_t* target,
                       const T* weight, Reduction reduction, int64_t ignore_index,
                       bool has_ignore_index, T* d_input) {
  check_labels("NegativeLogLikelihoodLoss backward", N, C, D, target, ignore_index,
               has_ignore_index);
  nll_backward_checked(N, C, D, dloss, target, weight, reduction, ignore_index, has_ignore_index,
                       d_input);
}

template <typename T>
void softmax_cross_entropy_forward(int64_t N, int64_t C, int64_t D, const T* scores,
                                   const int64_t* labels, const T* weight, Reduction reduction,
                                   int64_t ignore_index, bool has_ignore_index, T* loss,
                                   T* log_prob) {
  check_labels("SoftmaxCrossEntropyLoss", N, C, D, labels, ignore_index, has_ignore_index);
  softmax_forward(N, C, D, scores, log_prob, /*log=*/true);
  nll_forward_checked(N, C, D, log_prob, labels, weight, reduction, ignore_index, has_ignore_index,
                      loss);
}

template <typename T>
void softmax_cross_entropy_backward(int64_t N, int64_t C, int64_t D, const T* dloss,
                                    const T* log_prob, const int64_t* labels, const T* weight,
                                    Reduction reduction, int64_t ignore_index,
                                    bool has_ignore_index, T* d_scores) {
  check_labels("SoftmaxCrossEntropyLoss backward", N, C, D, labels, ignore_index, has_ignore_index);
  // The chain rule through the two forward kernels: d_log_prob holds -w * g at the
  // label and 0 elsewhere, so log-softmax backward (dlp - softmax * sum(dlp)) yields
  // (softmax - onehot) * w * g, and exactly 0 for ignored entries.
  if (D == 1) {
    // Classes along rows: each row's d_log_prob is written where the row's backward then
    // runs in place (the same values as nll_backward_checked's, without its passes over all
    // of d_scores; a language model's [tokens, vocab] logits).
    const NllEntryGradient<T> grad(N, dloss, labels, weight, reduction, ignore_index,
                                   has_ignore_index);
    softmax_backward_rows<T>(N, C, log_prob, d_scores, /*log=*/true, [&](int64_t n, T* row) {
      std::fill(row, row + C, T(0));
      grad.write(n, row, 1);
    });
    return;
  }
  nll_backward_checked(N, C, D, dloss, labels, weight, reduction, ignore_index, has_ignore_index,
                       d_scores);
  softmax_backward(N, C, D, d_scores, log_prob, d_scores, /*log=*/true);
}

#define ORTM_INSTANTIATE_LOSS(T)                                                                   \
  template void nll_loss_forward<T>(int64_t, int64_t, int64_t, const T*, const int64_t*, const T*, \
                                    Reduction, int64_t, bool, T*);                                 \
  template void nll_loss_backward<T>(int64_t, int64_t, int64_t, const T*, const int64_t*,          \
                                     const T*, Reduction, int64_t, bool, T*);                      \
  template void softmax_cross_entropy_forward<T>(int64_t, int64_t, int64_t, const T*,              \
                                                 const int64_t*, const T*, Reduction, int64_t,     \
                                                 bool, T*, T*);                                    \
  template void softmax_cross_entropy_backward<T>(int64_t, int64_t, int64_t, const T*, const T*,   \
                                                  const int64_t*, const T*, Reduction, int64_t,    \
                                                  bool, T*);

ORTM_INSTANTIATE_LOSS(float)
ORTM_INSTANTIATE_LOSS(double)

#undef ORTM_INSTANTIATE_LOSS

}  // namespace ortmodule
