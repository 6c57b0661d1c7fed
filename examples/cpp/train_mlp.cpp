// Trains an MLP from on-device training artifacts with the C++ API alone (no Python, no
// PyTorch): the artifacts and the batches come from make_artifacts.py.
//
//   train_mlp ARTIFACT_DIR [BATCHES_FILE]
//
// BATCHES_FILE (default ARTIFACT_DIR/batches.bin) holds little-endian int64 steps, batch and
// features, then per step the float32 inputs [batch, features] and the int64 labels [batch].
// Prints the loss of every step, the eval loss after training, and writes
// ARTIFACT_DIR/inference_model.onnx.
#include <cstdint>
#include <cstdio>
#include <exception>
#include <fstream>
#include <string>
#include <vector>

#include "ortmodule/training_api.h"

namespace {

struct Batches {
  int64_t steps = 0, batch = 0, features = 0;
  std::vector<ortmodule::TensorValue> inputs, labels;
};

Batches read_batches(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("cannot open " + path);
  Batches b;
  f.read(reinterpret_cast<char*>(&b.steps), sizeof(int64_t));
  f.read(reinterpret_cast<char*>(&b.batch), sizeof(int64_t));
  f.read(reinterpret_cast<char*>(&b.features), sizeof(int64_t));
  if (!f || b.steps <= 0 || b.batch <= 0 || b.features <= 0)
    throw std::runtime_error(path + ": bad header");
  for (int64_t s = 0; s < b.steps; ++s) {
    ortmodule::TensorValue x(ortmodule::ElementType::Float32, {b.batch, b.features});
    ortmodule::TensorValue y(ortmodule::ElementType::Int64, {b.batch});
    f.read(static_cast<char*>(x.data()), static_cast<std::streamsize>(x.nbytes()));
    f.read(static_cast<char*>(y.data()), static_cast<std::streamsize>(y.nbytes()));
    if (!f) throw std::runtime_error(path + ": truncated at step " + std::to_string(s));
    b.inputs.push_back(std::move(x));
    b.labels.push_back(std::move(y));
  }
  return b;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s ARTIFACT_DIR [BATCHES_FILE]\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  const std::string batches_path = argc > 2 ? argv[2] : dir + "/batches.bin";
  try {
    Batches data = read_batches(batches_path);
    ortmodule::CheckpointState state =
        ortmodule::CheckpointState::LoadCheckpoint(dir + "/checkpoint");
    ortmodule::TrainingSession session(state, dir + "/training_model.onnx",
                                       dir + "/eval_model.onnx", dir + "/optimizer_model.onnx");
    session.SetLearningRate(0.01f);
    for (int64_t s = 0; s < data.steps; ++s) {
      std::vector<ortmodule::TensorValue> out = session.TrainStep({data.inputs[s], data.labels[s]});
      session.OptimizerStep();
      session.LazyResetGrad();
      std::printf("step %lld loss %.9g\n", static_cast<long long>(s + 1), out[0].Item());
    }
    std::vector<ortmodule::TensorValue> eval = session.EvalStep({data.inputs[0], data.labels[0]});
    std::printf("eval loss %.9g\n", eval[0].Item());
    state.AddProperty("steps_trained", data.steps);
    ortmodule::CheckpointState::SaveCheckpoint(state, dir + "/checkpoint_trained", true);
    session.ExportModelForInferencing(dir + "/inference_model.onnx", {"logits"});
    std::printf("wrote %s/checkpoint_trained and %s/inference_model.onnx\n", dir.c_str(),
                dir.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train_mlp: %s\n", e.what());
    return 1;
  }
  return 0;
}
