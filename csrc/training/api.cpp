// The public C++ API (include/ortmodule/training_api.h) over the training engine.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "ortmodule/training_api.h"
#include "training/checkpoint.h"
#include "training/module.h"
#include "training/optimizer.h"

namespace ortmodule {

namespace api_detail {
struct StateHandle {
  std::shared_ptr<TrainingState> state = std::make_shared<TrainingState>();
};
struct SessionHandle {
  std::shared_ptr<TrainingModule> module;
  std::shared_ptr<TrainingOptimizer> optimizer;
  std::shared_ptr<LinearLRScheduler> scheduler;
};
}  // namespace api_detail

namespace {

// The public ElementType numbers the types as DType does (ONNX's numbering): casts between them
// are exact.
#define ORTM_SAME_CODE(name) \
  static_assert(static_cast<int32_t>(ElementType::name) == static_cast<int32_t>(DType::name))
ORTM_SAME_CODE(Float32);
ORTM_SAME_CODE(UInt8);
ORTM_SAME_CODE(Int8);
ORTM_SAME_CODE(UInt16);
ORTM_SAME_CODE(Int16);
ORTM_SAME_CODE(Int32);
ORTM_SAME_CODE(Int64);
ORTM_SAME_CODE(Bool);
ORTM_SAME_CODE(Float16);
ORTM_SAME_CODE(Float64);
ORTM_SAME_CODE(UInt32);
ORTM_SAME_CODE(UInt64);
ORTM_SAME_CODE(BFloat16);
#undef ORTM_SAME_CODE

int64_t numel_of(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0)
      throw std::invalid_argument("tensor dimensions must be >= 0, got " + shape_str(shape));
    n *= d;
  }
  return n;
}

Tensor to_engine(const TensorValue& v, const std::string& what) {
  const DType dtype = static_cast<DType>(v.type());
  const size_t bytes = static_cast<size_t>(v.numel()) * dtype_size(dtype);
  if (bytes != v.nbytes())
    throw std::invalid_argument(what + ": " + std::to_string(v.nbytes()) + " bytes do not hold a " +
                                shape_str(v.shape()) + " tensor of " + dtype_name(dtype));
  Tensor t = Tensor::empty(dtype, v.shape());
  if (bytes) std::memcpy(t.raw(), v.data(), bytes);
  return t;
}

TensorValue from_engine(const Tensor& t) {
  TensorValue v(static_cast<ElementType>(t.dtype()), t.shape());
  if (t.nbytes()) std::memcpy(v.data(), t.raw(), t.nbytes());
  return v;
}

std::string read_file(const std::string& path, const std::string& what) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::invalid_argument("cannot open the " + what + " '" + path + "'");
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

api_detail::SessionHandle& require(const std::unique_ptr<api_detail::SessionHandle>& impl) {
  if (!impl) throw std::logic_error("the TrainingSession was moved from");
  return *impl;
}

TrainingOptimizer& require_optimizer(const std::unique_ptr<api_detail::SessionHandle>& impl,
                                     const char* what) {
  auto& s = require(impl);
  if (!s.optimizer)
    throw std::runtime_error(std::string(what) +
                             " needs an optimizer: create the session with an optimizer model");
  return *s.optimizer;
}

std::unique_ptr<api_detail::SessionHandle> make_session(const std::shared_ptr<TrainingState>& st,
                                                        const std::string& train,
                                                        const std::string& eval,
                                                        const std::string& optim) {
  auto s = std::make_unique<api_detail::SessionHandle>();
  s->module = std::make_shared<TrainingModule>(st, train, eval);
  if (!optim.empty()) s->optimizer = std::make_shared<TrainingOptimizer>(optim, s->module);
  return s;
}

}  // namespace

// ---- TensorValue ----

TensorValue::TensorValue(ElementType type, std::vector<int64_t> shape)
    : type_(type), shape_(std::move(shape)) {
  const DType d = static_cast<DType>(type);
  if (dtype_size(d) == 0)
    throw std::invalid_argument("unsupported element type " + std::to_string(int(type)));
  bytes_.assign(static_cast<size_t>(numel_of(shape_)) * dtype_size(d), 0);
}

TensorValue TensorValue::FromFloats(std::vector<int64_t> shape, const std::vector<float>& values) {
  TensorValue v(ElementType::Float32, std::move(shape));
  if (static_cast<int64_t>(values.size()) != v.numel())
    throw std::invalid_argument("FromFloats: " + std::to_string(values.size()) +
                                " values for a tensor of " + std::to_string(v.numel()));
  if (!values.empty()) std::memcpy(v.data(), values.data(), v.nbytes());
  return v;
}

TensorValue TensorValue::FromInt64s(std::vector<int64_t> shape,
                                    const std::vector<int64_t>& values) {
  TensorValue v(ElementType::Int64, std::move(shape));
  if (static_cast<int64_t>(values.size()) != v.numel())
    throw std::invalid_argument("FromInt64s: " + std::to_string(values.size()) +
                                " values for a tensor of " + std::to_string(v.numel()));
  if (!values.empty()) std::memcpy(v.data(), values.data(), v.nbytes());
  return v;
}

int64_t TensorValue::numel() const { return numel_of(shape_); }

std::vector<float> TensorValue::ToFloats() const {
  if (type_ != ElementType::Float32)
    throw std::invalid_argument("ToFloats: the tensor is " + dtype_name(static_cast<DType>(type_)));
  std::vector<float> out(static_cast<size_t>(numel()));
  if (!out.empty()) std::memcpy(out.data(), bytes_.data(), bytes_.size());
  return out;
}

float TensorValue::Item() const {
  if (type_ != ElementType::Float32 || numel() != 1)
    throw std::invalid_argument("Item: expected one float32 value, got " +
                                dtype_name(static_cast<DType>(type_)) + " " + shape_str(shape_));
  float v;
  std::memcpy(&v, bytes_.data(), sizeof v);
  return v;
}

// ---- CheckpointState ----

CheckpointState::CheckpointState(std::shared_ptr<api_detail::StateHandle> handle)
    : handle_(std::move(handle)) {}

CheckpointState CheckpointState::LoadCheckpoint(const std::string& path) {
  auto h = std::make_shared<api_detail::StateHandle>();
  h->state->data = load_checkpoint_file(path);
  return CheckpointState(h);
}

CheckpointState CheckpointState::LoadCheckpointFromBuffer(const std::vector<uint8_t>& buffer) {
  auto h = std::make_shared<api_detail::StateHandle>();
  h->state->data = parse_checkpoint(buffer.data(), buffer.size(), "<checkpoint buffer>");
  return CheckpointState(h);
}

void CheckpointState::SaveCheckpoint(const CheckpointState& state, const std::string& path,
                                     bool include_optimizer_state) {
  save_checkpoint_file(state.handle_->state->data, path, include_optimizer_state);
}

void CheckpointState::AddProperty(const std::string& name, const Property& value) {
  std::visit([&](const auto& v) { handle_->state->data.properties[name] = v; }, value);
}

Property CheckpointState::GetProperty(const std::string& name) const {
  const auto& props = handle_->state->data.properties;
  auto it = props.find(name);
  if (it == props.end()) throw std::out_of_range("the checkpoint has no property '" + name + "'");
  return std::visit([](const auto& v) -> Property { return v; }, it->second);
}

bool CheckpointState::HasProperty(const std::string& name) const {
  return handle_->state->data.properties.count(name) != 0;
}

void CheckpointState::UpdateParameter(const std::string& name, const TensorValue& value) {
  TrainingState& s = *handle_->state;
  Tensor* p = find_parameter(s, name);
  if (!p) throw std::out_of_range("the checkpoint has no parameter '" + name + "'");
  if (s.data.is_nominal)
    throw std::runtime_error("parameter '" + name +
                             "' cannot be set: the checkpoint is nominal; load the model "
                             "parameters first (FromBuffer)");
  const DType dtype = static_cast<DType>(value.type());
  if (dtype != p->dtype() || value.shape() != p->shape())
    throw std::invalid_argument("parameter '" + name + "' is " + dtype_name(p->dtype()) + " " +
                                shape_str(p->shape()) + "; got " + dtype_name(dtype) + " " +
                                shape_str(value.shape()));
  if (p->nbytes()) std::memcpy(p->raw(), value.data(), p->nbytes());
}

TensorValue CheckpointState::GetParameter(const std::string& name) const {
  TrainingState& s = *handle_->state;
  Tensor* p = find_parameter(s, name);
  if (!p) throw std::out_of_range("the checkpoint has no parameter '" + name + "'");
  if (s.data.is_nominal)
    throw std::runtime_error("parameter '" + name +
                             "' has no value: the checkpoint is nominal; load the model "
                             "parameters first (FromBuffer)");
  return from_engine(*p);
}

std::vector<std::string> CheckpointState::ParameterNames() const {
  std::vector<std::string> names;
  for (const auto* m : {&handle_->state->data.trainable, &handle_->state->data.frozen})
    for (const auto& kv : *m) names.push_back(kv.first);
  std::sort(names.begin(), names.end());
  return names;
}

bool CheckpointState::IsNominal() const { return handle_->state->data.is_nominal; }

// ---- TrainingSession ----

TrainingSession::TrainingSession(const CheckpointState& state, const std::string& train_model_path,
                                 const std::string& eval_model_path,
                                 const std::string& optimizer_model_path)
    : impl_(make_session(
          state.handle_->state, read_file(train_model_path, "training model"),
          eval_model_path.empty() ? std::string() : read_file(eval_model_path, "eval model"),
          optimizer_model_path.empty() ? std::string()
                                       : read_file(optimizer_model_path, "optimizer model"))) {}

TrainingSession::TrainingSession(const CheckpointState& state,
                                 const std::vector<uint8_t>& train_model_data,
                                 const std::vector<uint8_t>& eval_model_data,
                                 const std::vector<uint8_t>& optimizer_model_data)
    : impl_(make_session(state.handle_->state,
                         std::string(train_model_data.begin(), train_model_data.end()),
                         std::string(eval_model_data.begin(), eval_model_data.end()),
                         std::string(optimizer_model_data.begin(), optimizer_model_data.end()))) {}

TrainingSession::~TrainingSession() = default;
TrainingSession::TrainingSession(TrainingSession&&) noexcept = default;
TrainingSession& TrainingSession::operator=(TrainingSession&&) noexcept = default;

std::vector<TensorValue> TrainingSession::TrainStep(const std::vector<TensorValue>& inputs) {
  auto& s = require(impl_);
  std::vector<Tensor> in;
  for (size_t i = 0; i < inputs.size(); ++i)
    in.push_back(to_engine(inputs[i], "train step input " + std::to_string(i)));
  std::vector<TensorValue> out;
  for (const Tensor& t : s.module->train_step(in)) out.push_back(from_engine(t));
  return out;
}

std::vector<TensorValue> TrainingSession::EvalStep(const std::vector<TensorValue>& inputs) {
  auto& s = require(impl_);
  std::vector<Tensor> in;
  for (size_t i = 0; i < inputs.size(); ++i)
    in.push_back(to_engine(inputs[i], "eval step input " + std::to_string(i)));
  std::vector<TensorValue> out;
  for (const Tensor& t : s.module->eval_step(in)) out.push_back(from_engine(t));
  return out;
}

void TrainingSession::LazyResetGrad() { require(impl_).module->lazy_reset_grad(); }

void TrainingSession::SetLearningRate(float learning_rate) {
  require_optimizer(impl_, "SetLearningRate").set_learning_rate(learning_rate);
}

float TrainingSession::GetLearningRate() const {
  return require_optimizer(impl_, "GetLearningRate").learning_rate();
}

void TrainingSession::RegisterLinearLRScheduler(int64_t warmup_step_count, int64_t total_step_count,
                                                float initial_lr) {
  require_optimizer(impl_, "RegisterLinearLRScheduler");
  impl_->scheduler = std::make_shared<LinearLRScheduler>(impl_->optimizer, warmup_step_count,
                                                         total_step_count, initial_lr);
}

void TrainingSession::SchedulerStep() {
  auto& s = require(impl_);
  if (!s.scheduler)
    throw std::runtime_error(
        "SchedulerStep: no learning-rate scheduler; call RegisterLinearLRScheduler first");
  s.scheduler->step();
}

void TrainingSession::OptimizerStep() { require_optimizer(impl_, "OptimizerStep").step(); }

void TrainingSession::ExportModelForInferencing(
    const std::string& inference_model_path, const std::vector<std::string>& graph_output_names) {
  std::string bytes = require(impl_).module->export_model_for_inferencing(graph_output_names);
  std::ofstream f(inference_model_path, std::ios::binary);
  if (!f) throw std::runtime_error("cannot write '" + inference_model_path + "'");
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!f) throw std::runtime_error("writing '" + inference_model_path + "' failed");
}

std::vector<std::string> TrainingSession::InputNames(bool training) const {
  return require(impl_).module->input_names(training);
}

std::vector<std::string> TrainingSession::OutputNames(bool training) const {
  return require(impl_).module->output_names(training);
}

TensorValue TrainingSession::ToBuffer(bool only_trainable) const {
  return from_engine(require(impl_).module->copy_parameters_to_buffer(only_trainable));
}

void TrainingSession::FromBuffer(const TensorValue& buffer) {
  auto& m = *require(impl_).module;
  if (buffer.shape().size() != 1)
    throw std::invalid_argument("FromBuffer: the buffer must be 1-D, got " +
                                shape_str(buffer.shape()));
  const bool trainable_only =
      buffer.numel() == m.parameters_size(true) && buffer.numel() != m.parameters_size(false);
  m.copy_buffer_to_parameters(to_engine(buffer, "FromBuffer"), trainable_only);
}

int64_t TrainingSession::GetParametersSize(bool only_trainable) const {
  return require(impl_).module->parameters_size(only_trainable);
}

void TrainingSession::SetSeed(int64_t seed) {
  require(impl_).module->set_seed(static_cast<uint64_t>(seed));
}

}  // namespace ortmodule
