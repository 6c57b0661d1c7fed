// ONNX classification losses: NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss
// (opset 13 semantics, which match torch.nn.functional.nll_loss / cross_entropy).
//
// Shapes: input / log_prob / scores: [N, C, D], where D is the product of the
// trailing dims (1 when there are none); target / labels: [N, D] int64;
// weight: [C] or nullptr (every class weighs 1).
//
// Entries whose label equals ignore_index (when has_ignore_index) contribute 0
// and are left out of the Mean divisor. Mean divides by the sum of the weights of
// the kept entries, so Mean with every entry ignored is 0/0 = NaN, as in PyTorch.
// Any other label outside [0, C) throws std::invalid_argument naming the label
// value, its position and C.
#pragma once

#include <cstdint>

#include "kernels/math/loss.h"

namespace ortmodule {

// Throws std::invalid_argument (naming `op`, the label, its position and C) for the first label
// of target [N, D] outside [0, C) that is not ignore_index. Call it serially, before parallel
// work reads the labels.
void check_loss_labels(const char* op, int64_t N, int64_t C, int64_t D, const int64_t* target,
                       int64_t ignore_index, bool has_ignore_index);

// input: [N, C, D], target: [N, D], weight: [C]? -> loss: [N * D] (None) or [1]
// l[n, d] = -input[n, target[n, d], d] * weight[target[n, d]]
template <typename T>
void nll_loss_forward(int64_t N, int64_t C, int64_t D, const T* input, const int64_t* target,
                      const T* weight, Reduction reduction, int64_t ignore_index,
                      bool has_ignore_index, T* loss);

// dloss: [N * D] (None) or [1], target: [N, D], weight: [C]? -> d_input: [N, C, D]
// Every element of d_input is written (zero outside the target entries).
template <typename T>
void nll_loss_backward(int64_t N, int64_t C, int64_t D, const T* dloss, const int64_t* target,
                       const T* weight, Reduction reduction, int64_t ignore_index,
                       bool has_ignore_index, T* d_input);

// scores: [N, C, D], labels: [N, D], weight: [C]? -> loss: [N * D] (None) or [1],
// log_prob: [N, C, D]
// log_prob = log_softmax(scores, axis=1); loss = nll(log_prob). log_prob is always
// written because the backward needs it.
template <typename T>
void softmax_cross_entropy_forward(int64_t N, int64_t C, int64_t D, const T* scores,
                                   const int64_t* labels, const T* weight, Reduction reduction,
                                   int64_t ignore_index, bool has_ignore_index, T* loss,
                                   T* log_prob);

// dloss: [N * D] (None) or [1], log_prob: [N, C, D], labels: [N, D], weight: [C]?
//   -> d_scores: [N, C, D]
// d_scores = (softmax - onehot(label)) * weight[label] * dloss (scaled as the
// reduction was); ignored entries get 0.
template <typename T>
void softmax_cross_entropy_backward(int64_t N, int64_t C, int64_t D, const T* dloss,
                                    const T* log_prob, const int64_t* labels, const T* weight,
                                    Reduction reduction, int64_t ignore_index,
                                    bool has_ignore_index, T* d_scores);

}  // namespace ortmodule
