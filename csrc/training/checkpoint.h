// The on-device training checkpoint file: parameters (trainable and frozen), optimizer
// state and user properties in one FlatBuffers buffer (identifier "ODTC", schema
// checkpoint_format.fbs), read and written in the format of onnxruntime-training's
// checkpoints so that either side loads the other's files. docs/checkpoint_format.md
// describes the format and what is supported.
//
// Engine-only: no torch, no Python. Everything here runs on the CPU.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <variant>

#include "ir/tensor.h"

namespace ortmodule {

// The version written; files of versions 1 and 2 are read (see checkpoint.cpp).
constexpr int32_t kCheckpointVersion = 2;

// int64, float32 or string, as the file stores them.
using PropertyValue = std::variant<int64_t, float, std::string>;

struct OptimizerGroupState {
  int64_t step = 0;
  float initial_learning_rate = 0.f;
  // param name -> momentum name ("momentum0", "momentum1") -> tensor
  std::map<std::string, std::map<std::string, Tensor>> param_states;
};

struct CheckpointData {
  std::map<std::string, Tensor> trainable;  // requires_grad params
  std::map<std::string, Tensor> frozen;
  // The tensors keep names, dtypes and shapes but hold no data: their storage has a null
  // data pointer and 0 bytes.
  bool is_nominal = false;
  std::map<std::string, OptimizerGroupState> optimizer_groups;  // "group0"
  std::map<std::string, PropertyValue> properties;
};

// Parses a checkpoint buffer. `origin` (a file path, "<bytes>", ...) starts every error
// message. Throws std::runtime_error naming what was wrong (truncated or corrupted buffer,
// bad identifier, unsupported version or dtype, dims vs raw_data size mismatch, duplicate
// names, external data, ...). Hostile input never crashes it: the FlatBuffers verifier
// runs first, then every field is validated.
CheckpointData parse_checkpoint(const void* data, size_t size, const std::string& origin);

// The bytes of a checkpoint holding `c`; the optimizer groups only when
// include_optimizer_state. Every list is sorted by name. Throws std::runtime_error for a
// state that cannot be written (a name both trainable and frozen, an undefined tensor, a
// buffer over the 2 GiB FlatBuffers limit, ...).
std::string serialize_checkpoint(const CheckpointData& c, bool include_optimizer_state);

CheckpointData load_checkpoint_file(const std::string& path);
// Writes to a temporary file next to `path`, then renames it over `path`.
void save_checkpoint_file(const CheckpointData& c, const std::string& path,
                          bool include_optimizer_state);

}  // namespace ortmodule
