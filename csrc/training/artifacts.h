// Training artifacts: from an ONNX model whose first output is the loss, the training model
// (forward, loss, gradients accumulated into buffers) and the eval model (forward and loss
// in inference mode), in ONNX Runtime Training's layout so that the files move between the
// two runtimes:
//   training model inputs:  user inputs, parameters (requires_grad and frozen initializers,
//                           in initializer order), <p>_grad.accumulation.buffer per trainable
//                           parameter, lazy_reset_grad (bool [1])
//   training model outputs: the model's outputs, then <p>_grad.accumulation.out (bool [1])
//   eval model:             the same user inputs and parameters; the model's outputs
#pragma once

#include <string>
#include <vector>

namespace ortmodule {

struct TrainingGraphs {
  std::string training_model;  // ONNX bytes
  std::string eval_model;      // ONNX bytes
  // Ops of the training model that only this engine runs (empty: the model also runs in
  // ONNX Runtime Training).
  std::vector<std::string> engine_only_ops;
};

// requires_grad: initializers (or graph inputs) that get gradients; frozen: initializers that
// become inputs without gradients. Other initializers stay constants of the graphs.
TrainingGraphs build_training_graphs(const std::string& model_bytes,
                                     const std::vector<std::string>& requires_grad,
                                     const std::vector<std::string>& frozen);

}  // namespace ortmodule
