// libFuzzer target: bytes -> parse_checkpoint -> serialize -> parse again. A
// std::runtime_error from the first parse is a clean rejection; a crash, sanitizer
// report, leak, an error from serializing or re-parsing an accepted state, or a state
// that does not read back identical is a finding.
//
// Built by tests/fuzz/CMakeLists.txt with clang and -fsanitize=fuzzer,address,undefined
// over the engine sources (no torch). `make fuzz` runs it on the seeds that
// make_checkpoint_seeds.cpp writes and on tests/fuzz/regressions_checkpoint/.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

#include "training/checkpoint.h"

namespace {

using ortmodule::CheckpointData;
using ortmodule::Tensor;

[[noreturn]] void finding(const std::string& what) {
  std::fprintf(stderr, "checkpoint fuzz finding: %s\n", what.c_str());
  std::abort();
}

void check_same(const std::map<std::string, Tensor>& a, const std::map<std::string, Tensor>& b,
                bool nominal, const std::string& what) {
  if (a.size() != b.size()) finding(what + ": tensor count changed");
  for (const auto& [name, t] : a) {
    const auto it = b.find(name);
    if (it == b.end()) finding(what + ": tensor '" + name + "' lost");
    const Tensor& u = it->second;
    if (t.dtype() != u.dtype() || t.shape() != u.shape()) {
      finding(what + ": tensor '" + name + "' changed dtype or shape");
    }
    if (nominal) {
      if (u.raw() != nullptr) finding(what + ": nominal tensor '" + name + "' has data");
    } else if (t.nbytes() != u.nbytes() ||
               (t.nbytes() && std::memcmp(t.raw(), u.raw(), t.nbytes()) != 0)) {
      finding(what + ": tensor '" + name + "' changed data");
    }
  }
}

void check_same(const CheckpointData& a, const CheckpointData& b) {
  if (a.is_nominal != b.is_nominal) finding("nominal flag changed");
  check_same(a.trainable, b.trainable, a.is_nominal, "trainable");
  check_same(a.frozen, b.frozen, a.is_nominal, "frozen");
  if (a.optimizer_groups.size() != b.optimizer_groups.size()) finding("group count changed");
  for (const auto& [name, g] : a.optimizer_groups) {
    const auto it = b.optimizer_groups.find(name);
    if (it == b.optimizer_groups.end()) finding("group '" + name + "' lost");
    const auto& h = it->second;
    // Compare bit patterns: a NaN learning rate must survive too.
    if (g.step != h.step ||
        std::memcmp(&g.initial_learning_rate, &h.initial_learning_rate, sizeof(float)) != 0) {
      finding("group '" + name + "' step or learning rate changed");
    }
    if (g.param_states.size() != h.param_states.size()) finding("group state count changed");
    for (const auto& [param, moments] : g.param_states) {
      const auto pit = h.param_states.find(param);
      if (pit == h.param_states.end()) finding("state of '" + param + "' lost");
      check_same(moments, pit->second, false, "momentums of '" + param + "'");
    }
  }
  if (a.properties.size() != b.properties.size()) finding("property count changed");
  for (const auto& [name, v] : a.properties) {
    const auto it = b.properties.find(name);
    if (it == b.properties.end() || it->second.index() != v.index()) {
      finding("property '" + name + "' lost or retyped");
    }
    if (const float* f = std::get_if<float>(&v)) {
      if (std::memcmp(f, &std::get<float>(it->second), sizeof(float)) != 0) {
        finding("property '" + name + "' changed");
      }
    } else if (it->second != v) {
      finding("property '" + name + "' changed");
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  CheckpointData c;
  try {
    c = ortmodule::parse_checkpoint(data, size, "<fuzz input>");
  } catch (const std::runtime_error&) {
    return 0;
  }
  std::string bytes;
  CheckpointData r;
  try {
    bytes = ortmodule::serialize_checkpoint(c, true);
    r = ortmodule::parse_checkpoint(bytes.data(), bytes.size(), "<re-serialized>");
  } catch (const std::exception& e) {
    finding(std::string("an accepted checkpoint does not write and read back: ") + e.what());
  }
  check_same(c, r);
  return 0;
}
