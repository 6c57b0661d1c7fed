// Label sparsity: a classification loss over many rows of which most carry its ignore_index
// (a masked language model's unmasked tokens, the prompt and padding of a fine-tuning batch)
// computes the rows it ignores in vain, and backward runs their products again to produce
// zero gradients. The pass gathers the rows whose label is not ignored before the loss:
//   idx = Reshape(NonZero(Not(Equal(labels, ignore_index))), [-1])
//   loss(scores, labels) -> loss(f(Gather(Flatten(x, -1), idx)), Gather(labels, idx))
// where scores = f(x) and f is the chain of row-wise nodes above the loss (a language
// model's head: products with a weight matrix, biases, activations, LayerNormalization and
// SimplifiedLayerNormalization over the last axis, Reshapes that keep the last dim, Casts).
// The chain is moved below the gather when nothing else reads its values. Where something
// does (the logits a model also returns), it is copied: forward computes it for every row
// and again for the kept rows, and backward runs on the kept rows (the full chain's backward
// reads only the returned logits' gradient, zeros unless they are differentiated, which the
// executor skips: runtime/zero_gradients.h).
//
// The loss is the same: SoftmaxCrossEntropyLoss and NegativeLogLikelihoodLoss with
// reduction "mean" (over the rows not ignored, weighted or not) or "sum" skip ignored rows
// anyway, and the gradients of the ignored rows are zeros either way. Runs before the
// fusions and gradient building, which then treat both chains alike.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "ir/tensor.h"

namespace ortmodule {

struct LabelSparsityOptions {
  // "auto": where the first call's labels (`samples`, by graph input name) leave at most
  // kLabelDensityAlone of the rows when the chain computes for the loss alone, at most
  // kLabelDensityShared when it is copied (forward then costs 1 + d of the chain's, backward
  // 2d, against 3 for all rows). "always": wherever the pattern matches. "never": off.
  std::string mode = "auto";
  std::map<std::string, Tensor> samples;
  // Whether the graph computes gradients. Without, a chain read elsewhere too is not copied
  // (that would only add forward work): the kept rows are gathered from the scores.
  bool backward = true;
};

constexpr double kLabelDensityAlone = 0.9;
constexpr double kLabelDensityShared = 0.5;

// Rewrites the losses it can; returns one line per loss it looked at (what it did and why),
// for the log. Values in `keep` (state updates) are never removed.
std::vector<std::string> apply_label_sparsity(Graph& graph, const LabelSparsityOptions& options,
                                              const std::vector<Value*>& keep = {});

}  // namespace ortmodule
