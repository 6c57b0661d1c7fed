#include "training/model_proto.h"

#include <cstdint>
#include <functional>
#include <set>
#include <stdexcept>
#include <unordered_map>
#include <unordered_set>

#include "ortmodule_onnx.pb.h"

namespace ortmodule {

namespace pb = ::ortmodule_onnx;

namespace {

pb::ModelProto parse_model(const std::string& bytes, const std::string& what) {
  pb::ModelProto model;
  if (bytes.empty()) throw std::invalid_argument(what + " is empty (0 bytes)");
  if (!model.ParseFromString(bytes) || !model.has_graph()) {
    throw std::invalid_argument(what + " (" + std::to_string(bytes.size()) +
                                " bytes) does not parse as an ONNX model with a graph");
  }
  return model;
}

int64_t onnx_opset(const pb::ModelProto& model) {
  int64_t opset = -1;
  for (const auto& op : model.opset_import())
    if (op.domain().empty() || op.domain() == "ai.onnx") opset = op.version();
  return opset;
}

void fill_tensor(const std::string& name, const Tensor& t, pb::TensorProto* tp) {
  tp->set_name(name);
  tp->set_data_type(static_cast<int32_t>(t.dtype()));
  for (int64_t d : t.shape()) tp->add_dims(d);
  tp->set_raw_data(std::string(static_cast<const char*>(t.raw()), t.nbytes()));
}

}  // namespace

ModelSummary summarize_onnx_model(const std::string& bytes, const std::string& what) {
  pb::ModelProto model = parse_model(bytes, what);
  ModelSummary s;
  s.opset = onnx_opset(model);
  for (const auto& vi : model.graph().input()) s.inputs.push_back(vi.name());
  for (const auto& vi : model.graph().output()) s.outputs.push_back(vi.name());
  for (const auto& t : model.graph().initializer()) s.initializers.push_back(t.name());
  return s;
}

std::string export_inference_model(const std::string& eval_model_bytes,
                                   const std::vector<std::string>& output_names,
                                   const std::map<std::string, Tensor>& parameters) {
  pb::ModelProto model = parse_model(eval_model_bytes, "the eval model");
  pb::GraphProto* g = model.mutable_graph();
  if (output_names.empty())
    throw std::invalid_argument(
        "export_model_for_inferencing: give at least one output name (graph outputs: the eval "
        "model's outputs or any value it computes)");
  std::unordered_map<std::string, int> producer;
  for (int i = 0; i < g->node_size(); ++i)
    for (const std::string& out : g->node(i).output())
      if (!out.empty()) producer[out] = i;
  std::unordered_set<std::string> graph_inputs, initializers;
  for (const auto& vi : g->input()) graph_inputs.insert(vi.name());
  for (const auto& t : g->initializer()) initializers.insert(t.name());
  // Types of the requested outputs, where the model records them.
  std::unordered_map<std::string, pb::ValueInfoProto> infos;
  for (const auto* list : {&g->value_info(), &g->output(), &g->input()})
    for (const auto& vi : *list) infos[vi.name()] = vi;
  std::vector<pb::ValueInfoProto> outputs;
  std::set<std::string> seen;
  for (const std::string& name : output_names) {
    if (!seen.insert(name).second)
      throw std::invalid_argument("export_model_for_inferencing: output '" + name +
                                  "' is requested twice");
    if (!producer.count(name) && !graph_inputs.count(name) && !initializers.count(name))
      throw std::invalid_argument("export_model_for_inferencing: the eval model has no value '" +
                                  name + "'");
    auto it = infos.find(name);
    pb::ValueInfoProto vi;
    if (it != infos.end()) vi = it->second;
    vi.set_name(name);
    outputs.push_back(vi);
  }
  // Nodes that lead to the outputs (reverse depth-first search from their producers).
  std::vector<bool> keep(g->node_size(), false);
  std::vector<std::string> stack(output_names.begin(), output_names.end());
  std::unordered_set<std::string> needed;
  while (!stack.empty()) {
    std::string name = stack.back();
    stack.pop_back();
    if (name.empty() || !needed.insert(name).second) continue;
    auto it = producer.find(name);
    if (it == producer.end() || keep[it->second]) continue;
    keep[it->second] = true;
    for (const std::string& in : g->node(it->second).input()) stack.push_back(in);
  }
  pb::GraphProto pruned;
  pruned.set_name(g->name());
  pruned.set_doc_string(g->doc_string());
  for (int i = 0; i < g->node_size(); ++i)
    if (keep[i]) *pruned.add_node() = g->node(i);
  for (const auto& vi : g->input()) {
    if (!needed.count(vi.name())) continue;  // labels and other inputs nothing reads
    auto p = parameters.find(vi.name());
    if (p == parameters.end()) {
      *pruned.add_input() = vi;
      continue;
    }
    if (initializers.count(vi.name()))
      throw std::invalid_argument("export_model_for_inferencing: parameter '" + vi.name() +
                                  "' is already an initializer of the eval model");
    if (!p->second.defined() || (p->second.raw() == nullptr && p->second.numel() > 0))
      throw std::invalid_argument("export_model_for_inferencing: parameter '" + vi.name() +
                                  "' has no data (nominal checkpoint); load the parameters first");
    fill_tensor(vi.name(), p->second, pruned.add_initializer());
  }
  for (const auto& t : g->initializer())
    if (needed.count(t.name())) *pruned.add_initializer() = t;
  for (const auto& vi : g->value_info())
    if (needed.count(vi.name())) *pruned.add_value_info() = vi;
  for (const auto& vi : outputs) *pruned.add_output() = vi;
  *g = std::move(pruned);
  return model.SerializeAsString();
}

OptimizerModelInfo parse_optimizer_model(const std::string& bytes) {
  pb::ModelProto model = parse_model(bytes, "the optimizer model");
  const pb::GraphProto& g = model.graph();
  OptimizerModelInfo info;
  const pb::NodeProto* optimizer = nullptr;
  const pb::NodeProto* clip = nullptr;
  for (const auto& n : g.node()) {
    const std::string domain = n.domain();
    const std::string what = n.op_type() + " '" + n.name() + "'";
    if (domain == "com.microsoft" &&
        (n.op_type() == "AdamWOptimizer" || n.op_type() == "SGDOptimizerV2")) {
      if (optimizer)
        throw std::invalid_argument("the optimizer model has two optimizer nodes (" +
                                    optimizer->op_type() + " and " + n.op_type() +
                                    "); exactly one parameter group is supported");
      optimizer = &n;
    } else if (domain == "com.microsoft" && n.op_type() == "InplaceClipGradNorm") {
      if (clip) throw std::invalid_argument("the optimizer model clips the gradients twice");
      clip = &n;
    } else {
      throw std::invalid_argument("the optimizer model contains " + what +
                                  (domain.empty() ? "" : " (" + domain + ")") +
                                  "; expected one AdamWOptimizer or SGDOptimizerV2 "
                                  "(com.microsoft), optionally after InplaceClipGradNorm");
    }
  }
  if (!optimizer)
    throw std::invalid_argument(
        "the optimizer model has no AdamWOptimizer or SGDOptimizerV2 (com.microsoft) node");
  info.kind = optimizer->op_type() == "AdamWOptimizer" ? OptimizerModelInfo::Kind::AdamW
                                                       : OptimizerModelInfo::Kind::SGD;
  // Attribute defaults are the op schema's.
  if (info.kind == OptimizerModelInfo::Kind::AdamW) {
    info.epsilon = 1e-8f;
    info.adam_mode = 0;
  }
  for (const auto& a : optimizer->attribute()) {
    if (a.name() == "alpha")
      info.alpha = a.f();
    else if (a.name() == "beta")
      info.beta = a.f();
    else if (a.name() == "epsilon")
      info.epsilon = a.f();
    else if (a.name() == "weight_decay")
      info.weight_decay = a.f();
    else if (a.name() == "correct_bias")
      info.correct_bias = a.i() != 0;
    else if (a.name() == "adam_mode")
      info.adam_mode = a.i();
    else
      throw std::invalid_argument("the optimizer model's " + optimizer->op_type() +
                                  " has an unknown attribute '" + a.name() + "'");
  }
  if (info.adam_mode != 0 && info.adam_mode != 1)
    throw std::invalid_argument("AdamWOptimizer adam_mode must be 0 or 1, got " +
                                std::to_string(info.adam_mode));
  if (clip) {
    info.clip_grad_norm = true;
    for (const auto& a : clip->attribute()) {
      if (a.name() == "max_norm")
        info.max_norm = a.f();
      else if (a.name() == "norm_type") {
        if (a.s() != "fro")
          throw std::invalid_argument("InplaceClipGradNorm norm_type '" + a.s() +
                                      "' is not supported (only 'fro')");
      } else {
        throw std::invalid_argument("InplaceClipGradNorm has an unknown attribute '" + a.name() +
                                    "'");
      }
    }
  }
  // The inputs the runtime feeds, by name and in order.
  std::vector<std::string> expected = {"learning_rate", "step", "params", "gradients",
                                       "first_order_moments"};
  if (info.kind == OptimizerModelInfo::Kind::AdamW) expected.push_back("second_order_moments");
  std::vector<std::string> got;
  for (const auto& vi : g.input()) got.push_back(vi.name());
  if (got.size() < expected.size() || !std::equal(expected.begin(), expected.end(), got.begin())) {
    std::string e, r;
    for (const auto& s : expected) e += (e.empty() ? "" : ", ") + s;
    for (const auto& s : got) r += (r.empty() ? "" : ", ") + s;
    throw std::invalid_argument("the optimizer model's inputs are (" + r + "); expected (" + e +
                                ")");
  }
  return info;
}

}  // namespace ortmodule
