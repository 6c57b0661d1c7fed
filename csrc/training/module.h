// A training module over artifacts: runs the training model (forward, loss, gradients
// accumulated into the state's buffers) and the eval model, with ONNX Runtime Training's
// semantics (lazy_reset_grad, contiguous parameter buffers, export for inferencing).
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "runtime/program.h"
#include "training/training_state.h"

namespace ortmodule {

class TrainingModule {
 public:
  // eval_model may be empty (no eval step, no export).
  TrainingModule(std::shared_ptr<TrainingState> state, const std::string& training_model,
                 const std::string& eval_model);

  // inputs: the user inputs in input_names(true) order. Returns the user outputs.
  std::vector<Tensor> train_step(const std::vector<Tensor>& inputs);
  std::vector<Tensor> eval_step(const std::vector<Tensor>& inputs);
  // The next train step overwrites the gradient buffers instead of adding to them.
  void lazy_reset_grad() { accumulate_ = false; }

  std::vector<std::string> input_names(bool training) const;
  std::vector<std::string> output_names(bool training) const;
  // Trainable parameters in training-model input order (the optimizer's order).
  const std::vector<std::string>& trainable_parameters() const { return trainable_; }
  const std::vector<std::string>& parameters() const { return parameters_; }

  int64_t parameters_size(bool trainable_only) const;
  Tensor copy_parameters_to_buffer(bool trainable_only) const;
  void copy_buffer_to_parameters(const Tensor& buffer, bool trainable_only);
  std::string export_model_for_inferencing(const std::vector<std::string>& output_names) const;

  void set_seed(uint64_t seed) { rng_.seed(seed); }
  const std::shared_ptr<TrainingState>& state() const { return state_; }
  // Throws "load the model parameters first" while the state is nominal.
  void require_parameters(const std::string& what) const;

 private:
  struct Graph_ {
    std::unique_ptr<Program> program;
    std::vector<int> user_inputs;      // positions in the program's inputs
    std::vector<std::string> user_input_names;
    std::vector<int> user_outputs;     // positions in the program's outputs
    std::vector<std::string> user_output_names;
  };
  std::vector<Tensor> run(Graph_& g, const std::vector<Tensor>& inputs, bool training);
  void check_user_inputs(const Graph_& g, const std::vector<Tensor>& inputs, bool training) const;
  void allocate_gradients();

  std::shared_ptr<TrainingState> state_;
  Graph_ train_, eval_;
  bool has_eval_ = false;
  std::string eval_model_bytes_;
  std::vector<std::string> parameters_;  // all parameters, training-model input order
  std::vector<std::string> trainable_;
  std::vector<Shape> parameter_shapes_;  // from the training model's declared input shapes
  std::vector<DType> parameter_dtypes_;
  bool accumulate_ = false;
  std::mt19937_64 rng_{0x5eed};
};

}  // namespace ortmodule
