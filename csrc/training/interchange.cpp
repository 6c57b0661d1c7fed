#include "training/interchange.h"

#include <cstdint>
#include <set>

#include "ops/op_table.h"
#include "training/graph_edit.h"

namespace ortmodule {

namespace {

constexpr const char* kOwnDomain = "ai.ortmodule";
constexpr const char* kMsDomain = "com.microsoft";

// SumToShape(x, s) = Reshape(ReduceSum(x, BroadcastGradientArgs(s, Shape(x))[0], keepdims=1,
// noop_with_empty_axes=1), s).
bool lower_sum_to_shape(Graph& g, Node* n) {
  if (g.opset_version < 13) return false;  // ReduceSum takes its axes as an input from 13
  Value *x = n->input(0), *s = n->input(1), *out = n->output(0);
  const std::string base = n->name;
  g.remove_nodes({n});
  Value* x_shape = add_op(g, "Shape", "", {x}, {}, base + "/x_shape");
  Value* axes = g.new_value(base + "/axes");
  Node* bga =
      g.add_node("BroadcastGradientArgs", kMsDomain, {s, x_shape}, {axes, nullptr}, base + "/axes");
  bga->def = find_op(kMsDomain, "BroadcastGradientArgs", g.opset_version);
  Value* summed = add_op(
      g, "ReduceSum", "", {x, axes},
      {{"keepdims", Attribute::make_int(1)}, {"noop_with_empty_axes", Attribute::make_int(1)}},
      base + "/sum");
  add_op(g, "Reshape", "", {summed, s}, {}, base + "/reshape", out);
  return true;
}

// FusedMatMulSumToShape(p, q, s; transA, transB, alpha) = SumToShape(FusedMatMul(p, q), s),
// the SumToShape lowered as above.
bool lower_fused_matmul_sum(Graph& g, Node* n) {
  if (g.opset_version < 13) return false;
  Value *p = n->input(0), *q = n->input(1), *s = n->input(2), *out = n->output(0);
  const auto attrs = n->attrs;
  const std::string base = n->name;
  g.remove_nodes({n});
  Value* product = g.new_value(base + "/product");
  Node* mm = g.add_node("FusedMatMul", kMsDomain, {p, q}, {product}, base + "/product");
  mm->attrs = attrs;
  mm->def = find_op(kMsDomain, "FusedMatMul", g.opset_version);
  Node* sum = g.add_node("SumToShape", kOwnDomain, {product, s}, {out}, base + "/sum");
  sum->def = find_op(kOwnDomain, "SumToShape", g.opset_version);
  return lower_sum_to_shape(g, sum);
}

// ScalarLike(x; value) = CastLike(value as float32, x).
bool lower_scalar_like(Graph& g, Node* n) {
  if (g.opset_version < 15) return false;  // CastLike
  Value *like = n->input(0), *out = n->output(0);
  const float v = static_cast<float>(n->attr_float("value", 0.0));
  const std::string base = n->name;
  g.remove_nodes({n});
  Value* c = float_constant(g, base + "/value", v);
  add_op(g, "CastLike", "", {c, like}, {}, base + "/cast", out);
  return true;
}

// ReduceGrad(dY, shape(X)[, axes]; keepdims, noop_with_empty_axes, mean[, axes]):
//   e = Expand(keepdims || all axes ? dY : Unsqueeze(dY, axes), shape(X))
//   mean: e / (Size(e) / max(Size(dY), 1)).
bool lower_reduce_grad(Graph& g, Node* n) {
  if (g.opset_version < 15) return false;  // Unsqueeze with axes input (13), CastLike (15)
  Value *dy = n->input(0), *x_shape = n->input(1), *axes_in = n->input(2), *out = n->output(0);
  const bool keepdims = n->attr_int("keepdims", 1) != 0;
  const bool noop = n->attr_int("noop_with_empty_axes", 0) != 0;
  const bool mean = n->attr_int("mean", 0) != 0;
  const bool axes_attr = n->has_attr("axes");
  const std::vector<int64_t> attr_axes = n->attr_ints("axes");
  const bool all_axes = !axes_in && (!axes_attr || attr_axes.empty());
  if (all_axes && noop) return false;  // an identity: not emitted by the gradient rules
  // A run-time axes input that may be empty with noop_with_empty_axes: its meaning depends
  // on the value, which Unsqueeze cannot express.
  if (axes_in && noop && !keepdims) return false;
  const std::string base = n->name;
  g.remove_nodes({n});
  Value* src = dy;
  if (!keepdims && !all_axes) {
    Value* axes = axes_in ? axes_in : int64_constant(g, base + "/axes", attr_axes);
    src = add_op(g, "Unsqueeze", "", {dy, axes}, {}, base + "/unsqueeze");
  }
  if (!mean) {
    add_op(g, "Expand", "", {src, x_shape}, {}, base + "/expand", out);
    return true;
  }
  Value* e = add_op(g, "Expand", "", {src, x_shape}, {}, base + "/expand");
  Value* n_in = add_op(g, "Size", "", {e}, {}, base + "/numel_in");
  Value* n_out = add_op(g, "Size", "", {dy}, {}, base + "/numel_out");
  Tensor one = Tensor::empty(DType::Int64, {});
  one.data<int64_t>()[0] = 1;
  one.storage()->writable = false;
  Value* n_out1 =
      add_op(g, "Max", "", {n_out, g.add_constant(base + "/one", one)}, {}, base + "/numel_out1");
  Value* count = add_op(g, "Div", "", {n_in, n_out1}, {}, base + "/count");
  Value* count_f = add_op(g, "CastLike", "", {count, dy}, {}, base + "/count_f");
  add_op(g, "Div", "", {e, count_f}, {}, base + "/mean", out);
  return true;
}

// GeluGrad(dY, X; approximate) = com.microsoft GeluGrad (erf) or FastGeluGrad (tanh). One that
// also writes Gelu(X) (a Program's backward, never an artifact's) has no such form.
bool lower_gelu_grad(Graph& g, Node* n) {
  const std::string mode = n->attr_string("approximate", "none");
  if ((mode != "none" && mode != "tanh") || n->output(1)) return false;
  n->domain = kMsDomain;
  n->op_type = mode == "tanh" ? "FastGeluGrad" : "GeluGrad";
  n->attrs.erase("approximate");
  n->def = find_op(kMsDomain, n->op_type, g.opset_version);
  return true;
}

// ZerosLike(x) = CastLike(ConstantOfShape(Shape(x), 0.0f), x).
bool lower_zeros_like(Graph& g, Node* n) {
  if (g.opset_version < 15) return false;  // CastLike
  Value *like = n->input(0), *out = n->output(0);
  const std::string base = n->name;
  g.remove_nodes({n});
  Value* shape = add_op(g, "Shape", "", {like}, {}, base + "/shape");
  Tensor zero = Tensor::zeros(DType::Float32, {1});
  zero.storage()->writable = false;
  Value* zeros = add_op(g, "ConstantOfShape", "", {shape},
                        {{"value", Attribute::make_tensor(zero)}}, base + "/zeros");
  add_op(g, "CastLike", "", {zeros, like}, {}, base + "/cast", out);
  return true;
}

// ErfGrad(dY, X) = dY * (2 / sqrt(pi)) * exp(-X * X).
bool lower_erf_grad(Graph& g, Node* n) {
  if (g.opset_version < 15) return false;  // CastLike
  Value *dy = n->input(0), *x = n->input(1), *out = n->output(0);
  const std::string base = n->name;
  g.remove_nodes({n});
  Value* xx = add_op(g, "Mul", "", {x, x}, {}, base + "/x2");
  Value* e =
      add_op(g, "Exp", "", {add_op(g, "Neg", "", {xx}, {}, base + "/neg")}, {}, base + "/exp");
  Value* c = add_op(g, "CastLike", "",
                    {float_constant(g, base + "/two_over_sqrt_pi", 1.1283791670955126f), dy}, {},
                    base + "/c");
  add_op(g, "Mul", "", {dy, add_op(g, "Mul", "", {c, e}, {}, base + "/scale")}, {}, base + "/mul",
         out);
  return true;
}

// SliceGrad(dY, shape, starts, ends[, axes, steps]) is com.microsoft SliceGrad (the slice
// given by inputs; the attribute form of opsets before 10 has no counterpart).
bool lower_slice_grad(Graph& g, Node* n) {
  if (n->has_attr("starts") || n->has_attr("ends") || n->has_attr("axes")) return false;
  n->domain = kMsDomain;
  n->def = find_op(kMsDomain, "SliceGrad", g.opset_version);
  return true;
}

// ConcatGrad(dY, shape_0, ..., shape_n; axis) = Split(dY, Concat(Gather(shape_i, [axis])); axis)
// (outputs the gradient did not want become unused Split outputs).
bool lower_concat_grad(Graph& g, Node* n) {
  if (g.opset_version < 13) return false;  // Split takes its sizes as an input from 13
  const int64_t axis = n->attr_int("axis", 0);
  const std::string base = n->name;
  Value* dy = n->input(0);
  std::vector<Value*> shapes(n->inputs.begin() + 1, n->inputs.end());
  std::vector<Value*> outs = n->outputs;
  outs.resize(shapes.size(), nullptr);
  g.remove_nodes({n});
  Value* index = int64_constant(g, base + "/axis", {axis});
  std::vector<Value*> sizes;
  for (size_t i = 0; i < shapes.size(); ++i)
    sizes.push_back(
        add_op(g, "Gather", "", {shapes[i], index}, {}, base + "/size" + std::to_string(i)));
  Value* split =
      add_op(g, "Concat", "", sizes, {{"axis", Attribute::make_int(0)}}, base + "/sizes");
  for (size_t i = 0; i < outs.size(); ++i)
    if (!outs[i]) outs[i] = g.new_value(base + "/unused" + std::to_string(i));
  Node* s = g.add_node("Split", "", {dy, split}, outs, base + "/split");
  s->attrs["axis"] = Attribute::make_int(axis);
  s->def = find_op("", "Split", g.opset_version);
  return true;
}

}  // namespace

void lower_to_interchange_ops(Graph& graph) {
  bool changed = false;
  for (Node* n : graph.nodes()) {
    if (n->domain != kOwnDomain) continue;
    if (n->op_type == "SumToShape")
      changed |= lower_sum_to_shape(graph, n);
    else if (n->op_type == "FusedMatMulSumToShape")
      changed |= lower_fused_matmul_sum(graph, n);
    else if (n->op_type == "ScalarLike")
      changed |= lower_scalar_like(graph, n);
    else if (n->op_type == "ReduceGrad")
      changed |= lower_reduce_grad(graph, n);
    else if (n->op_type == "GeluGrad")
      changed |= lower_gelu_grad(graph, n);
    else if (n->op_type == "ZerosLike")
      changed |= lower_zeros_like(graph, n);
    else if (n->op_type == "ErfGrad")
      changed |= lower_erf_grad(graph, n);
    else if (n->op_type == "SliceGrad")
      changed |= lower_slice_grad(graph, n);
    else if (n->op_type == "ConcatGrad")
      changed |= lower_concat_grad(graph, n);
  }
  if (changed) {
    graph.rebuild_consumers();
    graph.topological_sort();
  }
}

std::vector<std::string> engine_only_ops(const Graph& graph) {
  std::set<std::string> ops;
  for (const Node* n : graph.nodes())
    if (n->domain == kOwnDomain) ops.insert(n->op_type + " (" + kOwnDomain + ")");
  return {ops.begin(), ops.end()};
}

}  // namespace ortmodule
