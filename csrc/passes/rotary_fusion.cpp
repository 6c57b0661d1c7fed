#include "passes/rotary_fusion.h"

#include <cstdint>
#include <vector>

#include "ops/op_table.h"
#include "passes/chain_rewrite.h"
#include "passes/constant_value.h"

namespace ortmodule {
namespace {

using chain::is_op;
using chain::other_input;
using chain::private_value;

// The one integer of a constant one-element input, if it is one.
bool constant_int(const Value* v, int64_t& out) {
  const Tensor* t = constant_tensor(v);
  if (!t || t->numel() != 1 || dtype_is_floating(t->dtype())) return false;
  out = t->int_at(0);
  return true;
}

// A Slice (opset >= 10) of one axis with step 1: its input, start, end and axis (the axis as
// written: 0 when the axes input is absent).
struct OneAxisSlice {
  Value* x = nullptr;
  int64_t start = 0, end = 0, axis = 0;
};

bool one_axis_slice(const Node* n, OneAxisSlice& s) {
  if (!is_op(n, "Slice") || n->num_inputs() < 3 || !n->input(0)) return false;
  if (!constant_int(n->input(1), s.start) || !constant_int(n->input(2), s.end)) return false;
  s.axis = 0;
  if (n->num_inputs() > 3 && n->input(3) && !constant_int(n->input(3), s.axis)) return false;
  int64_t step = 1;
  if (n->num_inputs() > 4 && n->input(4) && (!constant_int(n->input(4), step) || step != 1))
    return false;
  s.x = n->input(0);
  return true;
}

bool float_dtype(const Value* v) {
  return v && (v->dtype == DType::Float32 || v->dtype == DType::Float64);
}

}  // namespace

int fuse_rotary(Graph& graph, const std::vector<Value*>& keep) {
  const OpDef* fused_def = find_op("ai.ortmodule", "FusedRotary", 1);
  if (!fused_def || graph.opset_version < 10) return 0;
  graph.rebuild_consumers();
  int fused = 0;
  // A slice end at least this large reaches the end of any axis (torch writes INT64_MAX).
  constexpr int64_t kToEnd = int64_t{1} << 62;
  for (Node* cat : graph.nodes()) {
    if (!is_op(cat, "Concat") || cat->num_inputs() != 2) continue;
    // Concat(Neg(x[h:]), x[:h]) along the slices' axis
    Node* neg = cat->input(0) ? cat->input(0)->producer : nullptr;
    Node* second = is_op(neg, "Neg") && neg->input(0) ? neg->input(0)->producer : nullptr;
    Node* first = cat->input(1) ? cat->input(1)->producer : nullptr;
    OneAxisSlice hi, lo;
    if (!one_axis_slice(second, hi) || !one_axis_slice(first, lo)) continue;
    const int64_t axis = cat->attr_int("axis", 0);
    if (hi.x != lo.x || hi.axis != axis || lo.axis != axis || lo.start != 0 || lo.end < 0 ||
        hi.start != lo.end || hi.end < kToEnd)
      continue;
    Value* x = lo.x;
    if (!private_value(graph, second->output(0), keep) ||
        !private_value(graph, neg->output(0), keep) ||
        !private_value(graph, first->output(0), keep) ||
        !private_value(graph, cat->output(0), keep))
      continue;
    // rot * sin, added to x * cos
    Node* rot_mul = cat->output(0)->consumers[0];
    Value* sin = is_op(rot_mul, "Mul") ? other_input(rot_mul, cat->output(0)) : nullptr;
    if (!sin || !private_value(graph, rot_mul->output(0), keep)) continue;
    Node* add = rot_mul->output(0)->consumers[0];
    Value* plain = is_op(add, "Add") ? other_input(add, rot_mul->output(0)) : nullptr;
    Node* x_mul = plain ? plain->producer : nullptr;
    Value* cos = is_op(x_mul, "Mul") ? other_input(x_mul, x) : nullptr;
    if (!cos || !private_value(graph, plain, keep)) continue;
    if (!float_dtype(x) || cos->dtype != x->dtype || sin->dtype != x->dtype) continue;
    Node* n = replace_chain(graph, {second, neg, first, cat, rot_mul, x_mul, add}, add, fused_def,
                            {x, cos, sin}, "/rotary");
    n->attrs["axis"] = Attribute::make_int(axis);
    n->attrs["split"] = Attribute::make_int(lo.end);
    n->attrs["mode"] = Attribute::make_int(0);
    ++fused;
  }
  return finish_rewrites(graph, fused);
}

}  // namespace ortmodule
