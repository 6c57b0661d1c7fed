// ortmodule on-device training, C++ API.
//
// Trains ONNX training artifacts (training, eval and optimizer models plus a checkpoint, made
// by ortmodule.training.artifacts.generate_artifacts or by ONNX Runtime Training) from a plain
// C++ program: no Python and no PyTorch at run time. Link libortmodule_training.so.
//
//   auto state = ortmodule::CheckpointState::LoadCheckpoint("artifacts/checkpoint");
//   ortmodule::TrainingSession session(state, "artifacts/training_model.onnx",
//                                      "artifacts/eval_model.onnx",
//                                      "artifacts/optimizer_model.onnx");
//   for (...) {
//     auto outputs = session.TrainStep({x, labels});   // outputs[0]: the loss
//     session.OptimizerStep();
//     session.LazyResetGrad();
//   }
//   ortmodule::CheckpointState::SaveCheckpoint(state, "artifacts/checkpoint_out");
//
// Errors are thrown as std::exception subclasses whose message says what was wrong.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#define ORTMODULE_API __attribute__((visibility("default")))

namespace ortmodule {

namespace api_detail {
struct StateHandle;
struct SessionHandle;
}  // namespace api_detail

// Element types, numbered as ONNX numbers them (TensorProto.DataType).
enum class ElementType : int32_t {
  Float32 = 1,
  UInt8 = 2,
  Int8 = 3,
  UInt16 = 4,
  Int16 = 5,
  Int32 = 6,
  Int64 = 7,
  Bool = 9,
  Float16 = 10,
  Float64 = 11,
  UInt32 = 12,
  UInt64 = 13,
  BFloat16 = 16,
};

// A dense, row-major tensor on the CPU that owns its bytes.
class ORTMODULE_API TensorValue {
 public:
  TensorValue() = default;
  // Zero-filled.
  TensorValue(ElementType type, std::vector<int64_t> shape);
  static TensorValue FromFloats(std::vector<int64_t> shape, const std::vector<float>& values);
  static TensorValue FromInt64s(std::vector<int64_t> shape, const std::vector<int64_t>& values);

  ElementType type() const { return type_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  int64_t numel() const;
  size_t nbytes() const { return bytes_.size(); }
  void* data() { return bytes_.data(); }
  const void* data() const { return bytes_.data(); }
  // The values as floats (float32 tensors only).
  std::vector<float> ToFloats() const;
  // The single value of a one-element float32 tensor (a loss).
  float Item() const;

 private:
  ElementType type_ = ElementType::Float32;
  std::vector<int64_t> shape_;
  std::vector<uint8_t> bytes_;
};

using Property = std::variant<int64_t, float, std::string>;

// Parameters, optimizer state and properties. Copies share one state: a session created
// from a state keeps it alive and sees every change.
class ORTMODULE_API CheckpointState {
 public:
  static CheckpointState LoadCheckpoint(const std::string& path);
  static CheckpointState LoadCheckpointFromBuffer(const std::vector<uint8_t>& buffer);
  // Writes parameters and properties, and the optimizer state when asked.
  static void SaveCheckpoint(const CheckpointState& state, const std::string& path,
                             bool include_optimizer_state = false);

  void AddProperty(const std::string& name, const Property& value);
  Property GetProperty(const std::string& name) const;
  bool HasProperty(const std::string& name) const;
  // Copies `value` into the parameter (same type and shape).
  void UpdateParameter(const std::string& name, const TensorValue& value);
  TensorValue GetParameter(const std::string& name) const;
  std::vector<std::string> ParameterNames() const;  // sorted
  bool IsNominal() const;

 private:
  friend class TrainingSession;
  explicit CheckpointState(std::shared_ptr<api_detail::StateHandle> handle);
  std::shared_ptr<api_detail::StateHandle> handle_;
};

class ORTMODULE_API TrainingSession {
 public:
  // Empty eval / optimizer paths: no eval step / no optimizer.
  TrainingSession(const CheckpointState& state, const std::string& train_model_path,
                  const std::string& eval_model_path = "",
                  const std::string& optimizer_model_path = "");
  // From model bytes; an empty training model is an error.
  TrainingSession(const CheckpointState& state, const std::vector<uint8_t>& train_model_data,
                  const std::vector<uint8_t>& eval_model_data = {},
                  const std::vector<uint8_t>& optimizer_model_data = {});
  ~TrainingSession();
  TrainingSession(TrainingSession&&) noexcept;
  TrainingSession& operator=(TrainingSession&&) noexcept;

  // Forward, loss and gradients (accumulated until LazyResetGrad). Returns the user outputs.
  std::vector<TensorValue> TrainStep(const std::vector<TensorValue>& inputs);
  std::vector<TensorValue> EvalStep(const std::vector<TensorValue>& inputs);
  void LazyResetGrad();

  void SetLearningRate(float learning_rate);
  float GetLearningRate() const;
  void RegisterLinearLRScheduler(int64_t warmup_step_count, int64_t total_step_count,
                                 float initial_lr);
  void SchedulerStep();
  void OptimizerStep();

  // Writes an inference model (standard ONNX ops, parameters as initializers).
  void ExportModelForInferencing(const std::string& inference_model_path,
                                 const std::vector<std::string>& graph_output_names);
  std::vector<std::string> InputNames(bool training) const;
  std::vector<std::string> OutputNames(bool training) const;

  // All (or the trainable) float32 parameters, concatenated in training-model input order.
  TensorValue ToBuffer(bool only_trainable) const;
  // The inverse; the buffer's size selects trainable-only or all parameters.
  void FromBuffer(const TensorValue& buffer);
  int64_t GetParametersSize(bool only_trainable) const;
  void SetSeed(int64_t seed);

 private:
  std::unique_ptr<api_detail::SessionHandle> impl_;
};

}  // namespace ortmodule
