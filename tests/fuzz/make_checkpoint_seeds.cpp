// Writes the seed corpus of fuzz_checkpoint: a few valid checkpoints covering every part
// of the format (each dtype family, scalars and empty tensors, a nominal state, optimizer
// groups, each property type), one file each. Run at fuzz time; the seeds are not kept
// in git.
//
//     make_checkpoint_seeds OUT_DIR
#include <sys/stat.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "training/checkpoint.h"

namespace {

using namespace ortmodule;

Tensor filled(DType dtype, const Shape& shape, uint8_t seed) {
  Tensor t = Tensor::empty(dtype, shape);
  auto* p = static_cast<uint8_t*>(t.raw());
  const int bits = dtype_packed_bits(dtype);
  for (size_t i = 0; i < t.nbytes(); ++i) {
    p[i] = static_cast<uint8_t>(seed + 37 * i);
    if (bits < 8) p[i] &= static_cast<uint8_t>((1u << bits) - 1);  // one element per byte
    if (dtype == DType::Bool) p[i] &= 1;
  }
  return t;
}

std::vector<std::pair<std::string, std::string>> seeds() {
  std::vector<std::pair<std::string, std::string>> out;
  CheckpointData empty;
  out.emplace_back("empty", serialize_checkpoint(empty, true));

  CheckpointData params;
  params.trainable["fc.weight"] = filled(DType::Float32, {3, 4}, 1);
  params.trainable["fc.bias"] = filled(DType::Float32, {4}, 2);
  params.frozen["embed"] = filled(DType::Float16, {2, 2}, 3);
  params.frozen["steps"] = filled(DType::Int64, {}, 4);
  out.emplace_back("params", serialize_checkpoint(params, false));

  CheckpointData dtypes;
  const DType all[] = {DType::Float64, DType::BFloat16,  DType::Int32,        DType::Int16,
                       DType::Int8,    DType::UInt8,     DType::UInt16,       DType::UInt32,
                       DType::UInt64,  DType::Bool,      DType::Float8E4M3FN, DType::Int4,
                       DType::UInt2,   DType::Float6E2M3};
  uint8_t seed = 10;
  for (DType d : all) dtypes.frozen["t_" + dtype_name(d)] = filled(d, {3}, seed++);
  dtypes.trainable["empty"] = filled(DType::Float32, {0, 5}, 0);
  out.emplace_back("dtypes", serialize_checkpoint(dtypes, false));

  CheckpointData nominal = params;
  nominal.is_nominal = true;
  out.emplace_back("nominal", serialize_checkpoint(nominal, false));

  CheckpointData full = params;
  OptimizerGroupState g;
  g.step = 12;
  g.initial_learning_rate = 1e-3f;
  for (const auto& [name, t] : params.trainable) {
    g.param_states[name]["momentum0"] = filled(t.dtype(), t.shape(), 5);
    g.param_states[name]["momentum1"] = filled(t.dtype(), t.shape(), 6);
  }
  full.optimizer_groups["group0"] = g;
  full.properties["epoch"] = int64_t{3};
  full.properties["best_loss"] = 0.125f;
  full.properties["run"] = std::string("seed run");
  out.emplace_back("optimizer_and_properties", serialize_checkpoint(full, true));
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
    return 2;
  }
  if (mkdir(argv[1], 0755) != 0 && errno != EEXIST) {
    std::fprintf(stderr, "cannot create %s: %s\n", argv[1], std::strerror(errno));
    return 1;
  }
  try {
    const auto all = seeds();
    for (const auto& [name, bytes] : all) {
      const std::string path = std::string(argv[1]) + "/" + name + ".ckpt";
      std::FILE* f = std::fopen(path.c_str(), "wb");
      if (!f || std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size() ||
          std::fclose(f) != 0) {
        std::fprintf(stderr, "cannot write %s: %s\n", path.c_str(), std::strerror(errno));
        return 1;
      }
    }
    std::printf("%zu seed checkpoints written to %s\n", all.size(), argv[1]);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
