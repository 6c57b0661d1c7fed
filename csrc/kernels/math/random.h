// Counter-based random numbers: element i of a stream is a pure function of
// (seed, i), so any thread (or CUDA thread) can produce any element and results do
// not depend on how work is split.
#pragma once

#include <cstdint>

#include "kernels/math/host_device.h"

namespace ortmodule {
namespace math {

ORTM_HOST_DEVICE uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Uniform in [0, 1) with 53 random bits.
ORTM_HOST_DEVICE double uniform01(uint64_t seed, uint64_t i) {
  return static_cast<double>(splitmix64(seed ^ splitmix64(i)) >> 11) * (1.0 / 9007199254740992.0);
}

// Dropout's stream for one node: the per-run seed mixed with the node's random stream, so two
// dropout nodes draw different masks and the same node draws the same mask in every graph
// built from the model.
ORTM_HOST_DEVICE uint64_t dropout_seed(uint64_t run_seed, uint64_t random_stream) {
  return splitmix64(run_seed ^ (random_stream << 32));
}

// Whether dropout keeps element i (with probability 1 - ratio).
ORTM_HOST_DEVICE bool dropout_keeps(uint64_t seed, uint64_t i, double ratio) {
  return uniform01(seed, i) >= ratio;
}

}  // namespace math
}  // namespace ortmodule
