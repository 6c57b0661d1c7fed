#include "passes/attention_mask_window.h"

#include <cstdint>
#include <cstring>
#include <string>
#include <unordered_map>

#include "passes/constant_folding.h"

namespace ortmodule {
namespace {

bool windowable(const Node* n) {
  return n->domain == "ai.ortmodule" &&
         (n->op_type == "FusedAttention" || n->op_type == "FusedAttentionDropout") && n->input(3) &&
         n->attr_int("mask_window", 0) == 0;
}

// The query and key lengths of attention node n, from its Q and K shapes (dims 1 of the
// operands laid out [batch, seq, heads, dim], attribute bshd); false where not known yet.
bool lengths(const Node* n, int64_t& S, int64_t& T) {
  const Value* q = n->input(0);
  const Value* k = n->input(1);
  const int64_t bshd = n->attr_int("bshd", 0);
  auto rows = [](const Value* v, bool seq_first, int64_t& out) {
    if (!v || !v->has_shape || v->shape.size() < 2) return false;
    out = v->shape[seq_first ? 1 : v->shape.size() - 2].value;
    return out > 0;
  };
  return rows(q, bshd & 1, S) && rows(k, bshd & 2, T);
}

// W (S + T - 1 elements) when every [S, T] matrix of `mask` ([..., S, T]: one per batch entry
// and head, or broadcast) is the same, bit for bit, and each of its elements equals the first
// of its diagonal (j - i constant); an undefined tensor otherwise.
Tensor diagonal_row(const Tensor& mask, int64_t S, int64_t T) {
  const Shape& shape = mask.shape();
  if (shape.size() < 2 || shape[shape.size() - 2] != S || shape.back() != T) return Tensor();
  const size_t bytes = dtype_size(mask.dtype());
  const size_t matrix = static_cast<size_t>(S * T) * bytes;
  const auto* m = static_cast<const unsigned char*>(mask.raw());
  for (int64_t b = 1; b < mask.numel() / (S * T); ++b)
    if (std::memcmp(m + b * matrix, m, matrix) != 0) return Tensor();
  Tensor w = Tensor::empty(mask.dtype(), {S + T - 1});
  auto* out = static_cast<unsigned char*>(w.raw());
  // W[k] holds the diagonal j - i = k - (S - 1): row S - 1 gives W[0, T), the last column
  // of the rows above the rest.
  for (int64_t k = 0; k < S + T - 1; ++k) {
    const int64_t i = k < T ? S - 1 : S + T - 2 - k, j = k < T ? k : T - 1;
    std::memcpy(out + k * bytes, m + (i * T + j) * bytes, bytes);
  }
  for (int64_t i = 0; i < S; ++i)
    for (int64_t j = 0; j < T; ++j)
      if (std::memcmp(m + (i * T + j) * bytes, out + (S - 1 - i + j) * bytes, bytes) != 0)
        return Tensor();
  return w;
}

}  // namespace

int window_attention_masks(Graph& graph) {
  int replaced = 0;
  // Each mask is evaluated once, however many layers read it (nullptr: it stays whole).
  std::unordered_map<const Value*, Value*> windows;
  for (Node* n : graph.nodes()) {
    if (!windowable(n)) continue;
    if (auto it = windows.find(n->input(3)); it != windows.end()) {
      if (!it->second) continue;
      n->inputs[3] = it->second;
      n->attrs["mask_window"] = Attribute::make_int(1);
      ++replaced;
      continue;
    }
    Value*& window = windows[n->input(3)];
    const Tensor mask = evaluate_constant(n->input(3), kMaxWindowedMaskElements);
    if (!mask.defined() || mask.rank() < 2) continue;
    // The mask's last two dims are the scores' where they exceed 1 (a broadcast dim is 1):
    // then the query and key lengths cannot differ from them on any call.
    const int64_t S = mask.dim(mask.rank() - 2), T = mask.dim(mask.rank() - 1);
    int64_t shape_S = 0, shape_T = 0;
    if (S < 2 || T < 2) continue;
    if (lengths(n, shape_S, shape_T) && (shape_S != S || shape_T != T)) continue;
    Tensor w = diagonal_row(mask, S, T);
    if (!w.defined()) continue;
    w.storage()->writable = false;
    window = graph.add_constant(n->input(3)->name + "/window", std::move(w));
    n->inputs[3] = window;
    n->attrs["mask_window"] = Attribute::make_int(1);
    ++replaced;
  }
  // The nodes that built the masks have no reader now: constant folding drops them.
  if (replaced) graph.rebuild_consumers();
  return replaced;
}

}  // namespace ortmodule
