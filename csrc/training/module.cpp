#include "training/module.h"

#include <cstdint>
#include <cstring>
#include <set>
#include <stdexcept>

#include "ops/load_model.h"
#include "ops/op_table.h"
#include "training/model_proto.h"

namespace ortmodule {

namespace {

const std::string kResetFlag = "lazy_reset_grad";
const std::string kBufferSuffix = "_grad.accumulation.buffer";
const std::string kFlagSuffix = "_grad.accumulation.out";

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Gradient values of a training model (never user outputs).
bool is_gradient_name(const std::string& name) {
  return ends_with(name, kFlagSuffix) || ends_with(name, kBufferSuffix) || ends_with(name, "_grad");
}

Tensor bool_scalar(bool v) {
  Tensor t = Tensor::empty(DType::Bool, {1});
  t.data<uint8_t>()[0] = v ? 1 : 0;
  return t;
}

}  // namespace

Tensor* find_parameter(TrainingState& state, const std::string& name) {
  auto t = state.data.trainable.find(name);
  if (t != state.data.trainable.end()) return &t->second;
  auto f = state.data.frozen.find(name);
  if (f != state.data.frozen.end()) return &f->second;
  return nullptr;
}

bool is_trainable(const TrainingState& state, const std::string& name) {
  return state.data.trainable.count(name) != 0;
}

TrainingModule::TrainingModule(std::shared_ptr<TrainingState> state,
                               const std::string& training_model, const std::string& eval_model)
    : state_(std::move(state)), eval_model_bytes_(eval_model) {
  if (!state_) throw std::invalid_argument("the training module needs a checkpoint state");
  if (training_model.empty()) throw std::invalid_argument("the training model is empty (0 bytes)");
  // ---- training model: classify the inputs, route the accumulators' results to buffers ----
  std::unique_ptr<Graph> g = load_model(training_model);
  ProgramOptions options;
  std::set<std::string> buffers;
  for (Node* n : g->nodes()) {
    if (n->domain != "com.microsoft" || n->op_type != "InPlaceAccumulatorV2") continue;
    Value* buffer = n->input(0);
    if (!buffer || buffer->producer || buffer->initializer.defined())
      throw std::invalid_argument(n->describe() +
                                  ": input 0 (the accumulation buffer) must be a graph input");
    Value* out = g->add_node_output(n, 1, buffer->name + "/accumulated");
    options.state_outputs.push_back({out->name, buffer->name});
    buffers.insert(buffer->name);
  }
  std::vector<std::string> buffer_of;  // per input: the parameter whose gradient it holds
  for (size_t i = 0; i < g->inputs().size(); ++i) {
    const Value* v = g->inputs()[i];
    const std::string& name = v->name;
    if (Tensor* p = find_parameter(*state_, name)) {
      if (!v->has_shape)
        throw std::invalid_argument("training model input '" + name +
                                    "' (a parameter) declares no shape");
      Shape shape;
      for (const Dim& d : v->shape) {
        if (d.value < 0)
          throw std::invalid_argument("training model input '" + name +
                                      "' (a parameter) has a symbolic dimension");
        shape.push_back(d.value);
      }
      // A nominal checkpoint may leave out the dims (ONNX Runtime Training writes none): the
      // training model's input shape is the parameter's.
      if (state_->data.is_nominal && !p->raw() && p->shape().empty() && !shape.empty())
        *p = Tensor(std::make_shared<Storage>(), p->dtype(), shape);
      if (p->shape() != shape || (v->dtype != DType::Undefined && p->dtype() != v->dtype))
        throw std::invalid_argument("parameter '" + name + "' is " + dtype_name(p->dtype()) + " " +
                                    shape_str(p->shape()) + " in the checkpoint but " +
                                    dtype_name(v->dtype) + " " + shape_str(shape) +
                                    " in the training model");
      parameters_.push_back(name);
      parameter_shapes_.push_back(shape);
      parameter_dtypes_.push_back(p->dtype());
      if (is_trainable(*state_, name)) trainable_.push_back(name);
    } else if (name == kResetFlag) {
      if (v->dtype != DType::Bool && v->dtype != DType::Undefined)
        throw std::invalid_argument("training model input 'lazy_reset_grad' must be bool, got " +
                                    dtype_name(v->dtype));
    } else if (ends_with(name, kBufferSuffix)) {
      const std::string param = name.substr(0, name.size() - kBufferSuffix.size());
      if (!is_trainable(*state_, param))
        throw std::invalid_argument(
            "training model input '" + name + "' is the gradient buffer of '" + param +
            "', which the checkpoint does not hold as a trainable parameter");
      if (!buffers.count(name))
        throw std::invalid_argument("training model input '" + name +
                                    "' is not accumulated by any InPlaceAccumulatorV2 node");
    } else {
      train_.user_inputs.push_back(static_cast<int>(i));
      train_.user_input_names.push_back(name);
    }
  }
  for (const auto& kv : state_->data.trainable) {
    bool present = false;
    for (const std::string& p : trainable_) present |= p == kv.first;
    if (!present)
      throw std::invalid_argument("the checkpoint's trainable parameter '" + kv.first +
                                  "' is not an input of the training model");
    if (!g->find_value(kv.first + kBufferSuffix))
      throw std::invalid_argument("trainable parameter '" + kv.first + "' has no input '" +
                                  kv.first + kBufferSuffix + "' in the training model");
  }
  for (size_t i = 0; i < g->outputs().size(); ++i) {
    const std::string& name = g->outputs()[i]->name;
    if (is_gradient_name(name)) continue;
    train_.user_outputs.push_back(static_cast<int>(i));
    train_.user_output_names.push_back(name);
  }
  train_.program = std::make_unique<Program>(std::move(g), options);

  // ---- eval model ----
  if (!eval_model.empty()) {
    eval_.program = std::make_unique<Program>(eval_model, ProgramOptions{});
    const std::vector<std::string>& names = eval_.program->input_names();
    for (size_t i = 0; i < names.size(); ++i) {
      if (find_parameter(*state_, names[i])) continue;
      eval_.user_inputs.push_back(static_cast<int>(i));
      eval_.user_input_names.push_back(names[i]);
    }
    const std::vector<std::string>& outs = eval_.program->output_names();
    for (size_t i = 0; i < outs.size(); ++i) {
      if (is_gradient_name(outs[i])) continue;
      eval_.user_outputs.push_back(static_cast<int>(i));
      eval_.user_output_names.push_back(outs[i]);
    }
    has_eval_ = true;
  }
  // Parameters belong to the state; kernels must never write into them.
  for (auto* m : {&state_->data.trainable, &state_->data.frozen})
    for (auto& kv : *m)
      if (kv.second.storage()) kv.second.storage()->writable = false;
  if (!state_->data.is_nominal) allocate_gradients();
  state_->has_module = true;
}

void TrainingModule::allocate_gradients() {
  for (const std::string& name : trainable_) {
    Tensor& g = state_->gradients[name];
    const Tensor& p = state_->data.trainable.at(name);
    if (g.defined() && g.shape() == p.shape() && g.dtype() == p.dtype()) continue;
    g = Tensor::zeros(p.dtype(), p.shape());
    g.storage()->writable = false;
  }
}

void TrainingModule::require_parameters(const std::string& what) const {
  if (state_->data.is_nominal)
    throw std::runtime_error(what +
                             ": the checkpoint is nominal (it holds no parameter values). Please "
                             "load the model parameters first (copy_buffer_to_parameters / "
                             "FromBuffer).");
}

std::vector<std::string> TrainingModule::input_names(bool training) const {
  if (!training && !has_eval_) throw std::runtime_error("no eval model was given");
  return training ? train_.user_input_names : eval_.user_input_names;
}

std::vector<std::string> TrainingModule::output_names(bool training) const {
  if (!training && !has_eval_) throw std::runtime_error("no eval model was given");
  return training ? train_.user_output_names : eval_.user_output_names;
}

void TrainingModule::check_user_inputs(const Graph_& g, const std::vector<Tensor>& inputs,
                                       bool training) const {
  const char* step = training ? "train step" : "eval step";
  if (inputs.size() != g.user_inputs.size()) {
    std::string names;
    for (const std::string& n : g.user_input_names) names += (names.empty() ? "" : ", ") + n;
    throw std::invalid_argument(std::string(step) + ": expected " +
                                std::to_string(g.user_inputs.size()) + " inputs (" + names +
                                "), got " + std::to_string(inputs.size()));
  }
  const std::vector<DType>& declared = g.program->input_dtypes();
  for (size_t k = 0; k < inputs.size(); ++k) {
    DType want = declared[g.user_inputs[k]];
    if (!inputs[k].defined())
      throw std::invalid_argument(std::string(step) + ": input '" + g.user_input_names[k] +
                                  "' is missing");
    if (want != DType::Undefined && inputs[k].dtype() != want)
      throw std::invalid_argument(std::string(step) + ": input '" + g.user_input_names[k] +
                                  "' must be " + dtype_name(want) + ", got " +
                                  dtype_name(inputs[k].dtype()));
  }
}

std::vector<Tensor> TrainingModule::run(Graph_& g, const std::vector<Tensor>& inputs,
                                        bool training) {
  check_user_inputs(g, inputs, training);
  const std::vector<std::string>& names = g.program->input_names();
  std::vector<Tensor> feed(names.size());
  for (size_t k = 0; k < inputs.size(); ++k) feed[g.user_inputs[k]] = inputs[k];
  for (size_t i = 0; i < names.size(); ++i) {
    if (feed[i].defined()) continue;
    const std::string& name = names[i];
    if (Tensor* p = find_parameter(*state_, name)) {
      feed[i] = *p;
    } else if (name == kResetFlag) {
      feed[i] = bool_scalar(!accumulate_);
    } else {
      const std::string param = name.substr(0, name.size() - kBufferSuffix.size());
      feed[i] = state_->gradients.at(param);
    }
  }
  std::vector<Tensor> outputs = g.program->executor().forward(feed, rng_(), nullptr);
  std::vector<Tensor> user;
  for (int i : g.user_outputs) user.push_back(outputs[i]);
  return user;
}

std::vector<Tensor> TrainingModule::train_step(const std::vector<Tensor>& inputs) {
  require_parameters("train step");
  std::vector<Tensor> out = run(train_, inputs, true);
  accumulate_ = true;
  return out;
}

std::vector<Tensor> TrainingModule::eval_step(const std::vector<Tensor>& inputs) {
  if (!has_eval_)
    throw std::runtime_error("eval step: no eval model was given when the module was created");
  require_parameters("eval step");
  return run(eval_, inputs, false);
}

int64_t TrainingModule::parameters_size(bool trainable_only) const {
  int64_t n = 0;
  for (size_t i = 0; i < parameters_.size(); ++i) {
    if (trainable_only && !is_trainable(*state_, parameters_[i])) continue;
    n += shape_numel(parameter_shapes_[i]);
  }
  return n;
}

Tensor TrainingModule::copy_parameters_to_buffer(bool trainable_only) const {
  require_parameters("copy parameters to a buffer");
  Tensor buffer = Tensor::empty(DType::Float32, {parameters_size(trainable_only)});
  char* dst = static_cast<char*>(buffer.raw());
  for (const std::string& name : parameters_) {
    if (trainable_only && !is_trainable(*state_, name)) continue;
    const Tensor& p = *find_parameter(*state_, name);
    if (p.dtype() != DType::Float32)
      throw std::runtime_error("parameter '" + name + "' is " + dtype_name(p.dtype()) +
                               "; contiguous parameter buffers hold float32 parameters only");
    std::memcpy(dst, p.raw(), p.nbytes());
    dst += p.nbytes();
  }
  return buffer;
}

void TrainingModule::copy_buffer_to_parameters(const Tensor& buffer, bool trainable_only) {
  const int64_t expected = parameters_size(trainable_only);
  if (buffer.dtype() != DType::Float32 || buffer.rank() != 1 || buffer.numel() != expected)
    throw std::invalid_argument("copy_buffer_to_parameters: expected a 1-D float32 buffer of " +
                                std::to_string(expected) + " elements (" +
                                (trainable_only ? "trainable" : "all") + " parameters), got " +
                                dtype_name(buffer.dtype()) + " " + shape_str(buffer.shape()));
  if (state_->data.is_nominal && !trainable_only) {
    // all parameters arrive: the state becomes complete
  } else if (state_->data.is_nominal) {
    for (const std::string& name : parameters_)
      if (!is_trainable(*state_, name))
        throw std::invalid_argument(
            "copy_buffer_to_parameters: the checkpoint is nominal and frozen parameter '" + name +
            "' has no value; pass a buffer holding all parameters (trainable_only=False)");
  }
  const char* src = static_cast<const char*>(buffer.raw());
  for (size_t i = 0; i < parameters_.size(); ++i) {
    const std::string& name = parameters_[i];
    if (trainable_only && !is_trainable(*state_, name)) continue;
    if (parameter_dtypes_[i] != DType::Float32)
      throw std::runtime_error("parameter '" + name + "' is " + dtype_name(parameter_dtypes_[i]) +
                               "; contiguous parameter buffers hold float32 parameters only");
    Tensor* p = find_parameter(*state_, name);
    if (!p->raw() && shape_numel(parameter_shapes_[i]) > 0) {
      *p = Tensor::empty(DType::Float32, parameter_shapes_[i]);
      p->storage()->writable = false;
    }
    std::memcpy(p->raw(), src, p->nbytes());
    src += p->nbytes();
  }
  if (state_->data.is_nominal) {
    state_->data.is_nominal = false;
    allocate_gradients();
  }
}

std::string TrainingModule::export_model_for_inferencing(
    const std::vector<std::string>& output_names) const {
  if (!has_eval_)
    throw std::runtime_error(
        "export_model_for_inferencing needs the eval model: give it when creating the module");
  require_parameters("export_model_for_inferencing");
  std::map<std::string, Tensor> params;
  for (const std::string& name : parameters_) params[name] = *find_parameter(*state_, name);
  return export_inference_model(eval_model_bytes_, output_names, params);
}

}  // namespace ortmodule
