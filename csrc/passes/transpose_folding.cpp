#include "passes/transpose_folding.h"

#include <cstdint>
#include <stdexcept>
#include <string>
#include <unordered_set>
#include <vector>

#include "ops/op_table.h"

namespace ortmodule {
namespace {

const char* kMicrosoft = "com.microsoft";

bool is_matmul(const Node& n) {
  return n.domain.empty() && n.op_type == "MatMul" && n.inputs.size() == 2;
}
bool is_fused_matmul(const Node& n) { return n.domain == kMicrosoft && n.op_type == "FusedMatMul"; }
bool is_gemm(const Node& n) { return n.domain.empty() && n.op_type == "Gemm"; }

int known_rank(const Value* v) {
  return v && v->has_shape ? static_cast<int>(v->shape.size()) : -1;
}

// The Transpose producing `v` when it swaps exactly the last two dims of its input and
// keeps every leading (batch) dim in place, so a trans flag can stand for it.
Node* last_two_dims_swap(const Value* v) {
  Node* t = v ? v->producer : nullptr;
  if (!t || !t->domain.empty() || t->op_type != "Transpose" || !t->input(0)) return nullptr;
  std::vector<int64_t> perm = t->attr_ints("perm");
  if (perm.empty()) {
    // No perm reverses the dims: a swap of the last two only for a rank-2 input.
    if (known_rank(t->input(0)) != 2) return nullptr;
    perm = {1, 0};
  }
  const int64_t rank = static_cast<int64_t>(perm.size());
  if (rank < 2) return nullptr;
  for (int64_t i = 0; i < rank - 2; ++i)
    if (perm[i] != i) return nullptr;
  return perm[rank - 2] == rank - 1 && perm[rank - 1] == rank - 2 ? t : nullptr;
}

// Turns a MatMul into the FusedMatMul that computes the same product (no transposes,
// alpha 1), so an operand can then be folded into a flag.
void make_fused_matmul(Node& n, const OpDef* fused_def) {
  n.op_type = "FusedMatMul";
  n.domain = kMicrosoft;
  n.def = fused_def;
  n.attrs["transA"] = Attribute::make_int(0);
  n.attrs["transB"] = Attribute::make_int(0);
  n.attrs["alpha"] = Attribute::make_float(1.0);
}

}  // namespace

int fold_transposes_into_matmuls(Graph& graph, bool for_gradient_building,
                                 const std::vector<Value*>& keep) {
  const OpDef* fused_def = find_op(kMicrosoft, "FusedMatMul", graph.opset_version);
  if (!fused_def) throw std::logic_error("the op table has no com.microsoft FusedMatMul row");
  int folded = 0;
  std::unordered_set<Node*> candidates;  // Transposes that lost a reader
  for (Node* n : graph.nodes()) {
    const bool gemm = is_gemm(*n);
    if (!gemm && !is_matmul(*n) && !is_fused_matmul(*n)) continue;
    Node* swaps[2] = {last_two_dims_swap(n->input(0)), last_two_dims_swap(n->input(1))};
    if (!swaps[0] && !swaps[1]) continue;
    if (gemm) {
      // Gemm operands are 2-D: only the rank-2 swap qualifies.
      for (Node*& t : swaps)
        if (t && t->attr_ints("perm", {1, 0}).size() != 2) t = nullptr;
    } else if (for_gradient_building) {
      // The FusedMatMul gradient rule refuses a trans flag next to an operand known to be
      // rank 1 (a folded operand has its Transpose's rank, >= 2). Intermediates carry no
      // rank at build time; the rule treats those as matrices with or without the fold.
      if ((!swaps[0] && known_rank(n->input(0)) == 1) ||
          (!swaps[1] && known_rank(n->input(1)) == 1))
        continue;
    }
    if (!swaps[0] && !swaps[1]) continue;
    if (is_matmul(*n)) make_fused_matmul(*n, fused_def);
    for (int i = 0; i < 2; ++i) {
      if (!swaps[i]) continue;
      const char* flag = i == 0 ? "transA" : "transB";
      n->attrs[flag] = Attribute::make_int(n->attr_int(flag, 0) ? 0 : 1);
      n->inputs[i] = swaps[i]->input(0);
      candidates.insert(swaps[i]);
      ++folded;
    }
  }
  if (folded == 0) return 0;
  graph.rebuild_consumers();
  std::unordered_set<const Value*> kept(graph.outputs().begin(), graph.outputs().end());
  kept.insert(keep.begin(), keep.end());
  std::vector<Node*> unread;
  for (Node* t : graph.nodes()) {
    if (!candidates.count(t)) continue;
    const Value* out = t->output(0);
    if (out && out->consumers.empty() && !kept.count(out)) unread.push_back(t);
  }
  graph.remove_nodes(unread);
  return folded;
}

}  // namespace ortmodule
