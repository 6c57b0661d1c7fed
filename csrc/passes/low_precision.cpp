#include "passes/low_precision.h"

#include <cstdint>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "ops/op_table.h"

namespace ortmodule {

namespace {

// Ops that move or describe 16-bit float data without arithmetic (their kernels copy
// elements bit for bit), or convert it themselves.
bool keeps_low_precision(const Node& n) {
  static const std::unordered_set<std::string> ops = {
      "Cast",    "CastLike",     "Constant",  "ConstantOfShape", "Shape",
      "Size",    "Identity",     "Reshape",   "Unsqueeze",       "Squeeze",
      "Flatten", "StopGradient", "Transpose", "Concat",          "Split",
      "Slice",   "Gather",       "Embedding", "GatherElements",  "GatherND",
      "Expand",  "Tile",         "Pad",       "Where",           "Trilu"};
  // NextAfter steps on the 16-bit bits (the neighbour of a widened value rounds back to it).
  if (n.op_type == "NextAfter" && n.domain == "ai.ortmodule") return true;
  return ops.count(n.op_type) != 0 && (n.domain.empty() || n.domain == "ai.ortmodule");
}

// A Conv, ConvGrad or ConvTranspose whose pads are the same at both ends of every axis (and,
// for ConvTranspose, whose output_padding is below its strides): the ones the CUDA kernels
// hand to torch's convolution (cuDNN) in any floating type, see runtime/aten_conv.h. Uneven
// pads (explicit, or from auto_pad SAME_*) compute in float32.
bool conv_pads_even(const Node& n) {
  const Attribute* auto_pad = n.attr("auto_pad");
  if (auto_pad && auto_pad->s != "NOTSET" && auto_pad->s != "VALID") return false;
  if (const Attribute* out_pad = n.attr("output_padding")) {
    const Attribute* strides = n.attr("strides");
    for (size_t i = 0; i < out_pad->ints.size(); ++i) {
      const int64_t stride = strides && i < strides->ints.size() ? strides->ints[i] : 1;
      if (out_pad->ints[i] >= stride) return false;
    }
  }
  const Attribute* pads = n.attr("pads");
  if (!pads) return true;
  const std::vector<int64_t>& p = pads->ints;
  const size_t half = p.size() / 2;
  for (size_t i = 0; i < half; ++i)
    if (p[i] != p[i + half]) return false;
  return true;
}

// Products (and the biased ones of passes/matmul_bias_fusion.h), and convolutions with even
// pads, with every floating operand and result in one 16-bit type: their kernels take
// float16/bfloat16 themselves (float32 accumulation, one rounding of each result; on CUDA
// tensor-core GEMMs and cuDNN), so they are left as they are.
bool computes_low_precision(const Node& n) {
  static const std::unordered_set<std::string> ops = {
      "MatMul",          "Gemm", "FusedMatMul", "FusedMatMulSumToShape",
      "FusedMatMulBias", "Conv", "ConvGrad",    "ConvTranspose"};
  if (!ops.count(n.op_type) || !n.def || n.def->host_call) return false;
  if ((n.op_type == "Conv" || n.op_type == "ConvGrad" || n.op_type == "ConvTranspose") &&
      !conv_pads_even(n))
    return false;
  DType low = DType::Undefined;
  auto same = [&low](const Value* v) {
    if (!v || !dtype_is_floating(v->dtype)) return true;
    if (!dtype_is_low_precision(v->dtype) || (low != DType::Undefined && v->dtype != low))
      return false;
    low = v->dtype;
    return true;
  };
  for (const Value* v : n.inputs)
    if (!same(v)) return false;
  for (const Value* v : n.outputs)
    if (!same(v)) return false;
  return low != DType::Undefined;
}

// The dtype of output k of n from its inputs' dtypes and attributes (what the ops' shape
// rules compute), so values the model declares no type for are still found; Undefined
// where it depends on something unknown (bridge nodes run by the host framework).
DType inferred_dtype(const Node& n, size_t k) {
  if (!n.def || n.def->host_call) return DType::Undefined;
  auto in = [&n](size_t i) {
    return i < n.inputs.size() && n.inputs[i] ? n.inputs[i]->dtype : DType::Undefined;
  };
  static const std::unordered_set<std::string> bool_ops = {
      "Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "Not",
      "And",   "Or",   "Xor",     "IsNaN",       "IsInf"};
  static const std::unordered_set<std::string> int64_ops = {"Shape", "Size", "ArgMax", "ArgMin",
                                                            "NonZero"};
  const std::string& op = n.op_type;
  if (bool_ops.count(op) || (op == "Dropout" && k == 1)) return DType::Bool;
  if (int64_ops.count(op) || (op == "MaxPool" && k == 1)) return DType::Int64;
  if (op == "Cast") return static_cast<DType>(n.attr_int("to", 0));
  if (op == "CastLike" || op == "Where" || op == "SoftmaxCrossEntropyLossGrad") return in(1);
  if (op == "GatherGrad" || op == "GatherNDGrad" || op == "EmbeddingGrad") return in(2);
  if (op == "Constant" || op == "ConstantOfShape") {
    const Attribute* value = n.attr("value");
    if (value && value->kind == Attribute::Kind::Tensor && value->t.defined())
      return value->t.dtype();
    if (op == "ConstantOfShape" || n.attr("value_float") || n.attr("value_floats"))
      return DType::Float32;
    return n.attr("value_int") || n.attr("value_ints") ? DType::Int64 : DType::Undefined;
  }
  return in(0);
}

Node* add_cast(Graph& graph, Value* in, Value* out, DType to) {
  Node* cast = graph.add_node("Cast", "", {in}, {out}, out->name + "_cast");
  cast->attrs["to"] = Attribute::make_int(static_cast<int64_t>(to));
  // The engine's own Cast (integer `to`), whatever opset the model declares.
  cast->def = find_op("", "Cast", kMaxOnnxOpset);
  cast->source = in->producer ? in->producer->source : "";
  return cast;
}

}  // namespace

int compute_low_precision_in_float32(Graph& graph) {
  std::unordered_map<Value*, Value*> as_float;  // 16-bit float value -> its float32 copy
  int moved = 0;
  for (Node* n : graph.nodes()) {
    // Nodes run in order, so the inputs' dtypes are known (or unknowable) by now.
    for (size_t k = 0; k < n->outputs.size(); ++k) {
      Value* out = n->outputs[k];
      if (out && out->dtype == DType::Undefined) out->dtype = inferred_dtype(*n, k);
    }
    if (keeps_low_precision(*n) || computes_low_precision(*n)) continue;
    bool any = false;
    for (Value* v : n->inputs) any = any || (v && dtype_is_low_precision(v->dtype));
    for (Value* v : n->outputs) any = any || (v && dtype_is_low_precision(v->dtype));
    if (!any) continue;
    ++moved;
    for (Value*& in : n->inputs) {
      if (!in || !dtype_is_low_precision(in->dtype)) continue;
      auto it = as_float.find(in);
      if (it == as_float.end()) {
        Value* f = graph.new_value(in->name + "_f32");
        f->dtype = DType::Float32;
        f->shape = in->shape;
        f->has_shape = in->has_shape;
        add_cast(graph, in, f, DType::Float32);
        it = as_float.emplace(in, f).first;
      }
      in = it->second;
    }
    for (Value*& out : n->outputs) {
      if (!out || !dtype_is_low_precision(out->dtype)) continue;
      const DType low = out->dtype;
      Value* f = graph.new_value(out->name + "_f32");
      f->dtype = DType::Float32;
      f->shape = out->shape;
      f->has_shape = out->has_shape;
      f->producer = n;
      Value* rounded = out;
      rounded->producer = nullptr;
      out = f;
      add_cast(graph, f, rounded, low);
      // Later readers of the rounded value that compute in float32 read the rounded one.
      as_float.erase(rounded);
    }
  }
  if (moved) {
    graph.rebuild_consumers();
    graph.topological_sort();
  }
  return moved;
}

}  // namespace ortmodule
