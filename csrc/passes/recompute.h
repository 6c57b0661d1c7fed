// Recompute for torch.utils.checkpoint regions: backward reads recomputed copies of the
// region's forward values instead of values kept from forward, so a region keeps only
// its inputs (and the values of nodes it cannot repeat) between forward and backward.
#pragma once

#include <unordered_set>
#include <vector>

#include "ir/graph.h"

namespace ortmodule {

// Runs after gradient building. `forward_nodes` are the nodes of the graph before it;
// `output_grads` the backward's inputs. Backward readers of a value made by a node of a
// checkpoint region (Node::checkpoint_region) read a copy instead (Node::run_in_backward,
// Node::recomputes), made from the region's inputs; gradient helpers that do not depend
// on output gradients but read such values move to backward with them. Nodes that write
// state back, call the host or are already backward are never repeated. Returns the
// number of copies made.
int recompute_checkpoint_regions(Graph& graph, const std::unordered_set<const Node*>& forward_nodes,
                                 const std::vector<Value*>& output_grads);

// Keeps the smaller side of cheap activations: where backward reads both the input and the
// output of a forward activation (Gelu: its gradient reads the input, the next product's
// weight gradient the output), backward reads a recomputed copy of the output instead
// (Node::run_in_backward, Node::recomputes), so only the input is kept between forward and
// backward. Views of the output (Reshape, Squeeze, ... between products) that backward
// reads are repeated with it. LayerNormalization and SimplifiedLayerNormalization (RMS norm)
// are repeated the same way (the gradient reads the input, the next product's weight
// gradient the output; the copy computes the output alone). Only unary element-wise
// activations, and normalizations whose other inputs are parameters or constants, whose
// input backward keeps anyway are repeated (no large value is kept that would not be), and
// only when neither the output nor such a view is a graph output. The copies compute what
// the originals did, bit for bit.
// Runs after gradient building (and after recompute_checkpoint_regions); `forward_nodes`
// and `output_grads` as there. Returns the number of copies made.
int recompute_cheap_activations(Graph& graph, const std::unordered_set<const Node*>& forward_nodes,
                                const std::vector<Value*>& output_grads);

// Where backward repeats a forward Gelu (recompute_cheap_activations) whose input a GeluGrad of
// the same form also reads, the GeluGrad writes the activation too (its output 1, from the same
// evaluation of Phi or of the tanh form, bit for bit the copy's), and the copy goes: one pass
// over the pre-activation instead of two. Skipped where the GeluGrad's incoming gradient depends
// on the repeated value (the GeluGrad would then precede its own input). Runs right after
// recompute_cheap_activations. Returns the number of copies folded.
int fold_gelu_recompute_into_grad(Graph& graph);

// Widening Casts of 16-bit values to float32 (passes/low_precision.h puts one in front of
// every op that computes a 16-bit value in float32): where backward reads the float32 value
// (GeluGrad reading the widened pre-activation, a LayerNorm's gradient its widened input),
// it reads a copy made in backward from the 16-bit value instead, so forward keeps the
// 16-bit value, as eager autocast keeps it, and not a float32 copy of twice the size. The
// copies compute what the originals did, bit for bit. Runs after gradient building (and
// after the fusions that read the widened values); `forward_nodes` and `output_grads` as
// above. Returns the number of copies made.
int recompute_widening_casts(Graph& graph, const std::unordered_set<const Node*>& forward_nodes,
                             const std::vector<Value*>& output_grads);

}  // namespace ortmodule
