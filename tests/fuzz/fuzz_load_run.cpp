// libFuzzer target: bytes -> ONNX load -> plan -> forward run, with inputs synthesized from
// the graph's declared input types and shapes (small sizes). Any exception is a clean
// rejection; a crash, hang, sanitizer report or leak is a finding.
//
// Built by tests/fuzz/CMakeLists.txt with clang and -fsanitize=fuzzer,address,undefined
// over the engine sources and the serial backend (no torch). `make fuzz` runs it.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "base/allocator.h"
#include "ops/load_model.h"
#include "runtime/program.h"

namespace {

using ortmodule::DType;
using ortmodule::Shape;
using ortmodule::Tensor;

constexpr int64_t kMaxInputElements = 4096;

// Declared dims are used when small; symbolic or large dims become 2.
Shape synthesize_shape(const ortmodule::Value& v) {
  Shape shape;
  if (!v.has_shape) return {2, 3};
  int64_t numel = 1;
  for (const ortmodule::Dim& d : v.shape) {
    int64_t n = d.value >= 0 && d.value <= 16 ? d.value : 2;
    if (numel * std::max<int64_t>(n, 1) > kMaxInputElements) n = 1;
    numel *= std::max<int64_t>(n, 1);
    shape.push_back(n);
  }
  return shape;
}

Tensor synthesize_input(const ortmodule::Value& v) {
  DType dt = ortmodule::dtype_size(v.dtype) ? v.dtype : DType::Float32;
  Tensor t = Tensor::empty(dt, synthesize_shape(v));
  const int64_t n = t.numel();
  for (int64_t i = 0; i < n; ++i) {
    // Small values: valid as indices into most small axes, never NaN.
    const int64_t k = i % 3;
    switch (dt) {
      case DType::Float32:
        t.data<float>()[i] = 0.5f * static_cast<float>(k) - 0.25f;
        break;
      case DType::Float64:
        t.data<double>()[i] = 0.5 * static_cast<double>(k) - 0.25;
        break;
      case DType::Int64:
        t.data<int64_t>()[i] = k;
        break;
      case DType::Int32:
        t.data<int32_t>()[i] = static_cast<int32_t>(k);
        break;
      case DType::Float16:
      case DType::BFloat16:
        t.data<uint16_t>()[i] = 0;
        break;
      default:
        static_cast<uint8_t*>(t.raw())[i] = static_cast<uint8_t>(k & 1);
        break;
    }
  }
  return t;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // Far below libFuzzer's malloc limit, so that an absurd size is the engine's clean
  // refusal rather than an out-of-memory report, and small enough that no op over tensors
  // of this size runs into the per-input timeout under the sanitizers.
  ortmodule::allocator_set_limit(size_t(4) << 20);
  return 0;
}

namespace {

// Reads every byte of the outputs, so that a short or unallocated output shows up.
void touch(const std::vector<Tensor>& tensors) {
  volatile uint8_t sink = 0;
  for (const Tensor& t : tensors) {
    if (!t.defined() || !t.raw()) continue;
    const auto* p = static_cast<const uint8_t*>(t.raw());
    for (size_t i = 0; i < t.nbytes(); ++i) sink = sink ^ p[i];
  }
  (void)sink;
}

Tensor ones_like(const Tensor& t) {
  Tensor g = Tensor::zeros(t.dtype(), t.shape());
  for (int64_t i = 0; i < g.numel(); ++i) {
    if (t.dtype() == DType::Float64) g.data<double>()[i] = 1.0;
    if (t.dtype() == DType::Float32) g.data<float>()[i] = 1.0f;
  }
  return g;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  std::vector<Tensor> inputs;
  std::vector<std::string> float_inputs;
  try {
    auto graph = ortmodule::load_model(bytes, ortmodule::LoadOptions{});
    for (const ortmodule::Value* v : graph->inputs()) {
      inputs.push_back(synthesize_input(*v));
      if (ortmodule::dtype_is_floating(inputs.back().dtype())) float_inputs.push_back(v->name);
    }
  } catch (const std::exception&) {
    return 0;  // a clean rejection with a message
  }
  // Forward only (inference).
  try {
    ortmodule::Program program(bytes, ortmodule::ProgramOptions{});
    if (program.input_names().size() == inputs.size())
      touch(program.executor().forward(inputs, /*seed=*/1, nullptr));
  } catch (const std::exception&) {
  }
  // Forward and backward with respect to every floating input: gradient rules, the
  // internal gradient ops and the backward plan.
  if (float_inputs.empty()) return 0;
  try {
    ortmodule::ProgramOptions options;
    options.wrt = float_inputs;
    ortmodule::Program program(bytes, options);
    if (program.input_names().size() != inputs.size()) return 0;
    std::shared_ptr<ortmodule::RunState> state;
    std::vector<Tensor> outputs = program.executor().forward(inputs, /*seed=*/1, &state);
    touch(outputs);
    std::vector<Tensor> output_grads(outputs.size());
    for (size_t i = 0; i < outputs.size(); ++i)
      if (program.output_differentiable()[i] && outputs[i].defined())
        output_grads[i] = ones_like(outputs[i]);
    touch(program.executor().backward(*state, output_grads));
  } catch (const std::exception&) {
  }
  return 0;
}
