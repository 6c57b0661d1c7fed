#include "passes/rmsnorm_fusion.h"

#include <cstdint>
#include <string>
#include <vector>

#include "ops/op_table.h"
#include "passes/chain_rewrite.h"
#include "passes/constant_value.h"

namespace ortmodule {
namespace {

using chain::is_op;
using chain::other_input;
using chain::private_value;

// The only reader of v when it is `op` of the default domain and v is private.
Node* private_consumer(const Graph& g, const Value* v, const char* op,
                       const std::vector<Value*>& keep) {
  return private_value(g, v, keep) && is_op(v->consumers[0], op) ? v->consumers[0] : nullptr;
}

// x when sq is Pow(x, 2) or Mul(x, x).
Value* squared(const Node* sq) {
  double p = 0;
  if (is_op(sq, "Pow") && sq->num_inputs() == 2 && constant_float_scalar(sq->input(1), 1, p) &&
      p == 2.0)
    return sq->input(0);
  if (is_op(sq, "Mul") && sq->num_inputs() == 2 && sq->input(0) == sq->input(1))
    return sq->input(0);
  return nullptr;
}

// The axes tensor of a ReduceMean: a constant, or a Reshape of one (torch.onnx's dynamo
// exporter writes a dim as Reshape(Constant(dim), [-1])).
const Tensor* reduce_axes(const Value* axes) {
  if (const Tensor* t = constant_tensor(axes)) return t;
  const Node* reshape = axes ? axes->producer : nullptr;
  return is_op(reshape, "Reshape") ? constant_tensor(reshape->input(0)) : nullptr;
}

// Whether mean averages x's last axis alone, keeping it.
bool means_last_axis(const Node* mean, const Value* x) {
  if (mean->attr_int("keepdims", 1) != 1) return false;
  std::vector<int64_t> axes;
  if (mean->input(1)) {
    const Tensor* t = reduce_axes(mean->input(1));
    if (!t || t->numel() != 1 || dtype_is_floating(t->dtype())) return false;
    axes.push_back(t->int_at(0));
  } else {
    axes = mean->attr_ints("axes");
  }
  if (axes.size() != 1) return false;
  return axes[0] == -1 || (x->has_shape && axes[0] == static_cast<int64_t>(x->shape.size()) - 1);
}

// x's last dim when its shape is known and that dim static, else -1.
int64_t static_last_dim(const Value* x) {
  return x->has_shape && !x->shape.empty() ? x->shape.back().value : -1;
}

// For the norm's output n read by Mul(n, w) (through same-dtype Identity/Cast nodes) with w
// a [cols] float32/float64 vector: the Mul, with the pass-through nodes appended to chain.
Node* weight_multiply(const Graph& g, Value* n, const Value* x, const std::vector<Value*>& keep,
                      std::vector<Node*>& chain, Value** weight) {
  std::vector<Node*> through;
  while (private_value(g, n, keep)) {
    Node* next = n->consumers[0];
    const bool same_dtype_cast = is_op(next, "Cast") && x->dtype != DType::Undefined &&
                                 next->attr_int("to", -1) == static_cast<int64_t>(x->dtype);
    if (!is_op(next, "Identity") && !same_dtype_cast) break;
    through.push_back(next);
    n = next->output(0);
  }
  Node* mul = private_consumer(g, n, "Mul", keep);
  Value* w = other_input(mul, n);
  if (!w || !(w->dtype == DType::Float32 || w->dtype == DType::Float64) || !w->has_shape ||
      w->shape.size() != 1 || w->shape[0].value < 1)
    return nullptr;
  if (x->dtype != DType::Undefined && x->dtype != w->dtype) return nullptr;
  // The product keeps x's shape only if k is x's last dim: where that dim is unknown, a
  // k > 1 that broadcasts must be it (or the dim is 1, which the fused node's shape rule
  // refuses by name); k = 1 could broadcast against any dim, so it must be known.
  const int64_t k = w->shape[0].value, cols = static_last_dim(x);
  if (cols >= 0 ? cols != k : k == 1) return nullptr;
  chain.insert(chain.end(), through.begin(), through.end());
  *weight = w;
  return mul;
}

// Whether v's only reader is a Cast to float16 or bfloat16.
bool rounded_to_16_bits(const Graph& g, const Value* v, const std::vector<Value*>& keep) {
  const Node* cast = private_consumer(g, v, "Cast", keep);
  const int64_t to = cast ? cast->attr_int("to", -1) : -1;
  return to == static_cast<int64_t>(DType::Float16) || to == static_cast<int64_t>(DType::BFloat16);
}

// ConstantOfShape(Shape(x, start=-1), value=1): ones as wide as x's last dim, for a float32
// or float64 x (the loader knows intermediates' dtypes, not their shapes); null otherwise.
Value* ones_like_last_dim(Graph& g, Value* x, const std::string& name) {
  const OpDef* shape_def = find_op("", "Shape", g.opset_version);
  const OpDef* fill_def = find_op("", "ConstantOfShape", g.opset_version);
  if (g.opset_version < 15 || !shape_def || !fill_def ||
      !(x->dtype == DType::Float32 || x->dtype == DType::Float64))
    return nullptr;
  Value* width = g.new_value(name + "/width");
  Node* shape = g.add_node("Shape", "", {x}, {width}, name + "/shape");
  shape->attrs["start"] = Attribute::make_int(-1);
  shape->def = shape_def;
  Tensor one = Tensor::empty(x->dtype, {1});
  if (x->dtype == DType::Float32)
    one.data<float>()[0] = 1.0f;
  else
    one.data<double>()[0] = 1.0;
  Value* ones = g.new_value(name);
  ones->dtype = x->dtype;
  Node* fill = g.add_node("ConstantOfShape", "", {width}, {ones}, name + "/fill");
  fill->attrs["value"] = Attribute::make_tensor(one);
  fill->def = fill_def;
  return ones;
}

}  // namespace

int fuse_rmsnorm(Graph& graph, const std::vector<Value*>& keep) {
  const OpDef* fused_def = find_op("com.microsoft", "SimplifiedLayerNormalization", 1);
  if (!fused_def) return 0;
  graph.rebuild_consumers();
  int fused = 0;
  for (Node* mean : graph.nodes()) {
    if (!is_op(mean, "ReduceMean") || !mean->input(0)) continue;
    // mean(x^2) + eps
    Node* square = mean->input(0)->producer;
    Value* x = squared(square);
    if (!x || !private_value(graph, mean->input(0), keep) || !means_last_axis(mean, x)) continue;
    Node* add = private_consumer(graph, mean->output(0), "Add", keep);
    double eps = 0;
    if (!add || !constant_float_scalar(other_input(add, mean->output(0)), 1, eps) || eps < 0)
      continue;
    // x * 1 / sqrt(...), x * Reciprocal(sqrt(...)) or x / sqrt(...)
    Node* sqrt = private_consumer(graph, add->output(0), "Sqrt", keep);
    if (!sqrt || !private_value(graph, sqrt->output(0), keep)) continue;
    Node* inverse = sqrt->output(0)->consumers[0];
    double one = 0;
    const bool reciprocal = is_op(inverse, "Reciprocal") ||
                            (is_op(inverse, "Div") && inverse->input(1) == sqrt->output(0) &&
                             constant_float_scalar(inverse->input(0), 1, one) && one == 1.0);
    Node* normalise = nullptr;
    if (reciprocal) {
      normalise = private_consumer(graph, inverse->output(0), "Mul", keep);
      if (other_input(normalise, inverse->output(0)) != x) continue;
    } else if (is_op(inverse, "Div") && inverse->input(0) == x &&
               inverse->input(1) == sqrt->output(0)) {
      normalise = inverse;
      inverse = nullptr;
    } else {
      continue;
    }
    std::vector<Node*> chain = {square, mean, add, sqrt};
    if (inverse) chain.push_back(inverse);
    chain.push_back(normalise);
    Value* weight = nullptr;
    Node* scaled = weight_multiply(graph, normalise->output(0), x, keep, chain, &weight);
    if (scaled) {
      chain.push_back(scaled);
    } else {
      // No weight multiply to take in: a ones scale as wide as x's last dim, only where the
      // norm is rounded to 16 bits next (a bfloat16 LlamaRMSNorm), which hides the fused
      // kernel's last-bit differences from the chain; elsewhere (a float64 model's float32
      // norm) the chain stays as the model rounds it.
      if (!rounded_to_16_bits(graph, normalise->output(0), keep)) continue;
      weight = ones_like_last_dim(graph, x, mean->name + "/rmsnorm_ones");
      if (!weight) continue;
    }
    Node* n = replace_chain(graph, chain, chain.back(), fused_def, {x, weight}, "/rmsnorm");
    n->attrs["axis"] = Attribute::make_int(-1);
    n->attrs["epsilon"] = Attribute::make_float(eps);
    ++fused;
  }
  return finish_rewrites(graph, fused);
}

}  // namespace ortmodule
