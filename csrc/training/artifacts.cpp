#include "training/artifacts.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <set>
#include <stdexcept>

#include "grad/gradient_builder.h"
#include "onnx/saver.h"
#include "ops/load_model.h"
#include "ops/op_table.h"
#include "training/graph_edit.h"
#include "training/interchange.h"
#include "training/model_proto.h"

namespace ortmodule {

namespace {

[[noreturn]] void artifact_error(const std::string& what) {
  throw std::invalid_argument("generate_artifacts: " + what);
}

std::string join(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "'" : ", '") + n + "'";
  return out;
}

// A 1-element tensor of `dtype` holding 1 (the seed of the loss gradient).
Tensor one_of(DType dtype, const std::string& loss_name) {
  Tensor t = Tensor::empty(dtype, {1});
  switch (dtype) {
    case DType::Float32:
      t.data<float>()[0] = 1.f;
      break;
    case DType::Float64:
      t.data<double>()[0] = 1.0;
      break;
    case DType::Float16:
      t.data<uint16_t>()[0] = 0x3C00;
      break;
    case DType::BFloat16:
      t.data<uint16_t>()[0] = 0x3F80;
      break;
    default:
      artifact_error("the loss output '" + loss_name + "' is " + dtype_name(dtype) +
                     "; a loss must be a floating-point tensor (declare its type in the model)");
  }
  t.storage()->writable = false;
  return t;
}

// Inference-mode copies of the ops that behave differently in training.
void set_inference_mode(Graph& g) {
  for (Node* n : g.nodes()) {
    if (n->domain.empty() && n->op_type == "Dropout") {
      if (n->inputs.size() > 2) n->inputs[2] = nullptr;  // training_mode
      n->attrs.erase("training_mode");
    } else if (n->domain.empty() && n->op_type == "BatchNormalization") {
      if (n->has_attr("training_mode")) n->attrs["training_mode"] = Attribute::make_int(0);
      // Running statistics are outputs only in training mode.
      for (size_t i = 1; i < n->outputs.size(); ++i) {
        if (!n->outputs[i]) continue;
        for (Value* out : g.outputs())
          if (out == n->outputs[i])
            artifact_error("graph output '" + out->name + "' is a running statistic of " +
                           n->describe() + ", which the eval model computes in inference mode");
        if (!n->outputs[i]->consumers.empty())
          artifact_error(n->describe() + " output '" + n->outputs[i]->name +
                         "' (a running statistic) is read by other nodes; the eval model "
                         "cannot compute it in inference mode");
        n->outputs[i]->producer = nullptr;
        n->outputs[i] = nullptr;
      }
      while (!n->outputs.empty() && !n->outputs.back()) n->outputs.pop_back();
    }
  }
  g.rebuild_consumers();
}

}  // namespace

TrainingGraphs build_training_graphs(const std::string& model_bytes,
                                     const std::vector<std::string>& requires_grad,
                                     const std::vector<std::string>& frozen) {
  const ModelSummary model = summarize_onnx_model(model_bytes, "the model");
  if (model.opset < 13) {
    artifact_error("the model's ONNX opset is " + std::to_string(model.opset) +
                   "; training artifacts need opset 13 or newer (export with opset_version=17)");
  }
  if (model.outputs.empty()) artifact_error("the model has no output (the loss comes first)");
  std::set<std::string> trainable(requires_grad.begin(), requires_grad.end());
  std::set<std::string> fixed(frozen.begin(), frozen.end());
  if (trainable.size() != requires_grad.size())
    artifact_error("requires_grad lists a name twice: " + join(requires_grad));
  if (fixed.size() != frozen.size())
    artifact_error("frozen_params lists a name twice: " + join(frozen));
  for (const std::string& name : requires_grad)
    if (fixed.count(name))
      artifact_error("'" + name +
                     "' is in both requires_grad and frozen_params; a parameter is either "
                     "trainable or frozen");
  const std::set<std::string> inits(model.initializers.begin(), model.initializers.end());
  const std::set<std::string> inputs(model.inputs.begin(), model.inputs.end());
  for (const std::string& name : requires_grad)
    if (!inits.count(name) && !inputs.count(name))
      artifact_error("requires_grad names '" + name +
                     "', which is neither an initializer nor an input of the model");
  for (const std::string& name : frozen)
    if (!inits.count(name))
      artifact_error("frozen_params names '" + name +
                     "', which is not an initializer of the model");
  for (const std::string& name : model.inputs)
    if (inits.count(name) && (trainable.count(name) || fixed.count(name)))
      artifact_error("'" + name +
                     "' is both a graph input and an initializer (an input default); "
                     "export the model with keep_initializers_as_inputs=False");
  LoadOptions load;
  for (const std::string& name : model.initializers)
    if (trainable.count(name) || fixed.count(name)) load.feed_initializers.push_back(name);

  TrainingGraphs result;
  // ---- eval model: forward and loss, parameters as inputs, inference mode ----
  {
    std::unique_ptr<Graph> eval = load_model(model_bytes, load);
    set_inference_mode(*eval);
    result.eval_model = save_onnx_model(*eval);
  }

  // ---- training model ----
  std::unique_ptr<Graph> g = load_model(model_bytes, load);
  std::vector<Value*> wrt;
  for (Value* in : g->inputs())
    if (trainable.count(in->name)) wrt.push_back(in);
  const std::vector<Value*> outputs = g->outputs();
  Value* loss = outputs[0];
  Tensor seed_value = one_of(loss->dtype, loss->name);
  g->mutable_outputs().assign(1, loss);  // gradients flow from the loss only
  GradientGraphInfo info = build_gradient_graph(*g, wrt);
  g->mutable_outputs() = outputs;
  if (!wrt.empty() && !info.output_grads[0])
    artifact_error("the loss output '" + loss->name +
                   "' does not depend on any parameter in requires_grad");
  if (Value* seed = info.output_grads[0]) {
    // d loss / d loss = 1, in the loss's shape.
    Value* shape = add_op(*g, "Shape", "", {loss}, {}, loss->name + "_grad/shape");
    add_op(*g, "ConstantOfShape", "", {shape}, {{"value", Attribute::make_tensor(seed_value)}},
           loss->name + "_grad/seed", seed);
  }
  Value* reset = g->new_value("lazy_reset_grad");
  reset->dtype = DType::Bool;
  reset->has_shape = true;
  reset->shape = {Dim{1, ""}};
  std::vector<Value*> buffers, flags;
  for (size_t i = 0; i < wrt.size(); ++i) {
    Value* p = wrt[i];
    Value* grad = info.input_grads[i];
    if (!grad) {
      artifact_error("parameter '" + p->name +
                     "' does not influence the loss, so it has no gradient; list it in "
                     "frozen_params instead of requires_grad");
    }
    Value* buffer = g->new_value(p->name + "_grad.accumulation.buffer");
    if (buffer->name != p->name + "_grad.accumulation.buffer")
      artifact_error("the model already has a value named '" + p->name +
                     "_grad.accumulation.buffer'");
    buffer->dtype = p->dtype;
    buffer->has_shape = p->has_shape;
    buffer->shape = p->shape;
    Value* flag = g->new_value(p->name + "_grad.accumulation.out");
    flag->dtype = DType::Bool;
    flag->has_shape = true;
    flag->shape = {Dim{1, ""}};
    Node* acc = g->add_node("InPlaceAccumulatorV2", "com.microsoft", {buffer, grad, reset}, {flag},
                            p->name + "_grad.accumulation");
    acc->def = find_op("com.microsoft", "InPlaceAccumulatorV2", g->opset_version);
    buffers.push_back(buffer);
    flags.push_back(flag);
  }
  std::vector<Value*>& graph_inputs = g->mutable_inputs();
  graph_inputs.insert(graph_inputs.end(), buffers.begin(), buffers.end());
  graph_inputs.push_back(reset);
  std::vector<Value*>& graph_outputs = g->mutable_outputs();
  graph_outputs.insert(graph_outputs.end(), flags.begin(), flags.end());
  g->topological_sort();
  lower_to_interchange_ops(*g);
  result.engine_only_ops = engine_only_ops(*g);
  result.training_model = save_onnx_model(*g);
  // The files must load again here: check now rather than at the first training step.
  load_model(result.training_model);
  load_model(result.eval_model);
  return result;
}

}  // namespace ortmodule
