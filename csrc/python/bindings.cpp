// Python bindings: one module, ortmodule._C.
#include <torch/extension.h>

#include "base/allocator.h"
#include "base/profiler.h"
#include "kernels/cpu/cpu_isa.h"
#include "ops/attention_probs.h"
#include "ops/load_model.h"
#include "ops/op_table.h"
#include "python/torch_boundary.h"
#include "python/torch_call.h"
#include "runtime/cpu_gemm.h"
#include "runtime/program.h"

namespace py = pybind11;
using namespace ortmodule;

namespace ortmodule {
void bind_training(py::module_& m);     // training_bindings.cpp
void bind_checkpoint(py::module_& m);   // checkpoint_bindings.cpp
void bind_step_runner(py::module_& m);  // step_runner.cpp
}  // namespace ortmodule
void bind_optim(py::module_& m);  // optim_bindings.cpp

namespace {

std::string domain_label(const std::string& d) { return d; }

std::string inplace_label(const OpDef& d) {
  if (d.inplace_input >= 0) return "in-place on input " + std::to_string(d.inplace_input);
  return "";
}

py::list op_table_py() {
  py::list rows;
  for (const OpDef& d : op_table()) {
    py::dict r;
    r["domain"] = domain_label(d.domain);
    r["op_type"] = d.op_type;
    r["since_version"] = d.since_version;
    r["until_version"] = d.until_version;
    r["has_gradient"] = d.grad != nullptr;
    r["differentiable"] = d.differentiable;
    r["zero_gradient"] = d.zero_gradient;
    r["internal"] = d.internal;
    r["inplace"] = inplace_label(d);
    r["grad_rtol"] = d.grad_rtol;
    r["grad_atol"] = d.grad_atol;
    r["cuda"] = d.reads_shapes_only || d.runs_on_host ? "host" : d.cuda_twin ? "yes" : "";
    r["cuda_linked"] = d.cuda != nullptr;
    rows.append(r);
  }
  return rows;
}

// What this build knows of CUDA: whether its CUDA kernels are compiled in, how many
// devices the process sees, and the ops that have a CUDA kernel here.
py::dict cuda_info() {
  py::dict d;
  const CudaBackend* backend = cuda_backend();
  d["compiled"] = backend != nullptr;
  d["device_count"] = backend ? backend->device_count() : 0;
  py::list kernels;
  for (const OpDef& def : op_table())
    if (backend && def.cuda)
      kernels.append(py::make_tuple(domain_label(def.domain), def.op_type, def.since_version));
  d["kernels"] = kernels;
  return d;
}

py::dict describe_graph(const Graph& g) {
  py::dict d;
  py::list inputs, outputs, nodes;
  for (Value* v : g.inputs()) inputs.append(v->name);
  for (Value* v : g.outputs()) outputs.append(v->name);
  for (Node* n : g.nodes()) nodes.append(py::make_tuple(n->domain, n->op_type, n->name));
  d["inputs"] = inputs;
  d["outputs"] = outputs;
  d["nodes"] = nodes;
  d["opset"] = g.opset_version;
  return d;
}

py::dict timing_dict(const std::map<std::string, OpTiming>& table) {
  py::dict d;
  for (const auto& kv : table)
    d[py::str(kv.first)] = py::make_tuple(kv.second.calls, kv.second.seconds);
  return d;
}

// {"forward": {op_type: count}, "backward": {...}} of the plan's steps.
py::dict node_counts(const Plan& plan) {
  py::dict d;
  const std::pair<const char*, const std::vector<PlanStep>*> parts[] = {
      {"forward", &plan.forward}, {"backward", &plan.backward}};
  for (const auto& [part, steps] : parts) {
    std::map<std::string, int> counts;
    for (const PlanStep& step : *steps) ++counts[step.node->op_type];
    py::dict c;
    for (const auto& kv : counts) c[py::str(kv.first)] = kv.second;
    d[part] = c;
  }
  return d;
}

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "ortmodule engine";
  install_torch_bridge();
  set_op_events(true);
  m.def("register_callable", &register_callable, py::arg("fn"),
        "Registers fn(*tensors) -> tuple of tensors for TorchCall nodes; returns its id.");
  m.def("release_callable", &release_callable, py::arg("id"));
  m.def("op_table", &op_table_py, "One dict per op-table row.");
  m.def("cuda_info", &cuda_info,
        "{'compiled': CUDA kernels built in, 'device_count': visible devices, 'kernels': "
        "[(domain, op_type, since_version)] of the ops with a CUDA kernel in this build}.");
  // The newest opset of the default ONNX domain the loader accepts (from opset 1).
  m.attr("max_onnx_opset") = kMaxOnnxOpset;
  m.def(
      "load_onnx",
      [](py::bytes data, std::vector<std::string> feed) {
        LoadOptions o;
        o.feed_initializers = std::move(feed);
        return describe_graph(*load_model(std::string(data), o));
      },
      py::arg("data"), py::arg("feed_initializers") = std::vector<std::string>{},
      "Loads and validates ONNX bytes; returns a summary of the graph.");
  m.def(
      "load_onnx_file",
      [](const std::string& path) { return describe_graph(*load_model_file(path)); },
      py::arg("path"));

  py::class_<Program, std::shared_ptr<Program>>(m, "Program")
      .def(
          py::init([](py::bytes data, std::vector<std::string> feed, std::vector<std::string> wrt,
                      std::vector<std::pair<std::string, std::string>> state_outputs,
                      bool graph_optimizations, std::string label_sparsity,
                      std::map<std::string, at::Tensor> sample_inputs,
                      std::string linear_cross_entropy) {
            ProgramOptions o;
            o.feed_initializers = std::move(feed);
            o.wrt = std::move(wrt);
            o.state_outputs = std::move(state_outputs);
            o.graph_optimizations = graph_optimizations;
            if (label_sparsity != "auto" && label_sparsity != "always" && label_sparsity != "never")
              throw py::value_error(
                  "label_sparsity must be \"auto\", \"always\" or "
                  "\"never\"; got \"" +
                  label_sparsity + "\"");
            o.label_sparsity = label_sparsity;
            if (linear_cross_entropy != "auto" && linear_cross_entropy != "always" &&
                linear_cross_entropy != "never")
              throw py::value_error(
                  "linear_cross_entropy must be \"auto\", \"always\" or \"never\"; got \"" +
                  linear_cross_entropy + "\"");
            o.linear_cross_entropy = linear_cross_entropy;
            for (const auto& [name, t] : sample_inputs)
              o.sample_inputs[name] = from_torch(t.cpu().contiguous(), "sample input", name);
            std::string bytes(data);
            py::gil_scoped_release release;
            return std::make_shared<Program>(bytes, o);
          }),
          py::arg("onnx_bytes"), py::arg("feed_initializers"), py::arg("wrt"),
          py::arg("state_outputs") = std::vector<std::pair<std::string, std::string>>{},
          py::arg("graph_optimizations") = true, py::arg("label_sparsity") = "auto",
          py::arg("sample_inputs") = std::map<std::string, at::Tensor>{},
          py::arg("linear_cross_entropy") = "auto")
      .def_property_readonly("notes", &Program::notes)
      .def_property_readonly("input_names", &Program::input_names)
      .def_property_readonly("output_names", &Program::output_names)
      .def_property_readonly("output_differentiable", &Program::output_differentiable)
      .def("training_graph_onnx",
           [](const Program& p) { return py::bytes(p.training_graph_onnx()); })
      .def("plan_description", &Program::plan_description)
      .def_property_readonly(
          "passes",
          [](const Program& p) {
            py::list out;
            for (const PassRecord& r : p.passes())
              out.append(py::make_tuple(r.name, r.nodes_before, r.nodes_after, r.changed));
            return out;
          },
          "(name, nodes before, nodes after, changed) per graph pass, in the order they ran.")
      .def_property_readonly(
          "node_counts", [](Program& p) { return node_counts(p.executor().plan()); },
          "{'forward': {op_type: steps}, 'backward': {...}} of the plan.")
      .def_property_readonly(
          "bridged_nodes",
          [](Program& p) {
            py::list names;
            for (const PlanStep& step : p.executor().plan().forward)
              if (step.node->op_type == "TorchCall") names.append(step.node->name);
            return names;
          },
          "Names of forward's TorchCall nodes (ops that run on PyTorch).")
      .def_property_readonly(
          "stash_bytes", [](Program& p) { return p.executor().stash_bytes(); },
          "Bytes of activations the last measured forward run kept for backward (the first "
          "run, and every run while profiling); -1 before any.")
      .def("folded_constants", &Program::folded_constants)
      .def(
          "shape_cache_stats",
          [](Program& p) {
            ShapeCacheStats s = p.executor().shape_cache_stats();
            py::dict d;
            d["cached_steps"] = p.executor().plan().num_shape_cached();
            d["forward_steps"] = p.executor().plan().forward.size();
            d["hits"] = s.hits;
            d["misses"] = s.misses;
            d["steps_skipped"] = s.steps_skipped;
            d["shape_rules_run"] = s.shape_rules_run;
            d["zero_steps"] = s.zero_steps;
            return d;
          },
          "Shape-cached forward steps (computed once per set of input shapes) and how often "
          "the cache was used; zero_steps: backward steps that handed on zeros (the gradient "
          "of an output nobody differentiated) instead of computing.");

  m.def(
      "run",
      [](const std::shared_ptr<Program>& p, const std::vector<at::Tensor>& inputs) {
        py::gil_scoped_release release;
        return run_program(p, inputs);
      },
      py::arg("program"), py::arg("inputs"),
      "Runs the program's forward; outputs carry an autograd node when gradients flow.");

  m.def("allocator_stats", []() {
    AllocatorStats s = allocator_stats();
    py::dict d;
    d["allocated_bytes"] = s.allocated_bytes;
    d["cached_bytes"] = s.cached_bytes;
    d["peak_allocated_bytes"] = s.peak_allocated_bytes;
    d["os_allocations"] = s.os_allocations;
    d["window_peak_bytes"] = s.window_peak_bytes;
    return d;
  });
  m.def("allocator_reset_peak", &allocator_reset_peak);
  m.def("allocator_reset_window_peak", &allocator_reset_window_peak,
        "Restarts window_peak_bytes (a second peak counter for reports) at the live bytes.");
  m.def("set_op_events", &set_op_events, py::arg("enabled"),
        "Whether engine ops appear as torch.profiler events (on by default; benchmarks compare).");
  m.def("op_events_enabled", &op_events_enabled);
  m.def(
      "set_step_observer",
      [](py::object fn) {
        if (fn.is_none()) {
          set_step_observer({});
          return;
        }
        auto holder = std::shared_ptr<py::object>(new py::object(std::move(fn)), [](py::object* o) {
          py::gil_scoped_acquire gil;
          delete o;
        });
        set_step_observer([holder](const char* phase) {
          py::gil_scoped_acquire gil;
          (*holder)(phase);
        });
      },
      py::arg("fn"),
      "fn('forward') after each engine forward run and fn('backward') after each backward "
      "run; None removes it.");
  m.def("set_attention_probs_limit", &set_attention_probs_limit, py::arg("bytes"),
        "FusedAttention keeps its softmax for backward while it is at most this many bytes per "
        "call and recomputes it block by block above (a tuning and testing knob).");
  m.def("attention_probs_limit", &attention_probs_limit);
  m.def("set_profiling", &set_profiling, py::arg("enabled"),
        "Times every executed op (for benchmarks/profile_ops.py).");
  m.def(
      "profile_snapshot",
      [](bool reset) {
        py::dict d;
        for (const auto& kv : profile_snapshot(reset))
          d[py::str(kv.first)] = py::make_tuple(kv.second.calls, kv.second.seconds);
        return d;
      },
      py::arg("reset") = true, "{op_type: (calls, kernel seconds)} since the last reset.");
  m.def(
      "op_profile_snapshot",
      [](bool reset) {
        py::dict d;
        d["forward"] = timing_dict(op_snapshot(false, reset));
        d["backward"] = timing_dict(op_snapshot(true, reset));
        return d;
      },
      py::arg("reset") = true,
      "{'forward': {op_type: (calls, kernel seconds)}, 'backward': {...}} since the last reset.");
  m.def(
      "gemm_profile_snapshot",
      [](bool reset) {
        py::dict d;
        for (const auto& kv : gemm_snapshot(reset))
          d[py::str(kv.first)] =
              py::make_tuple(kv.second.calls, kv.second.seconds, kv.second.flops);
        return d;
      },
      py::arg("reset") = true,
      "{'<op(A)><op(B)> [batch x ]MxNxK': (calls, seconds, flops)} of the CPU GEMM calls since "
      "the last reset (N: as stored, T: transposed).");
  m.def(
      "phase_snapshot",
      [](bool reset) {
        py::dict d;
        for (const auto& kv : phase_snapshot(reset))
          d[py::str(kv.first)] = py::make_tuple(kv.second.calls, kv.second.seconds);
        return d;
      },
      py::arg("reset") = true,
      "{phase: (calls, seconds)} since the last reset: executor.forward, executor.backward (per "
      "stage), boundary.forward (_C.run), boundary.backward (per autograd node).");
  m.def(
      "cpu_isa", [] { return std::string(cpu_isa_name(active_cpu_isa())); },
      "The instruction set of the vector kernels: baseline, avx2 or avx512.");
  m.def(
      "cpu_isa_supported",
      [](const std::string& name) { return cpu_isa_supported(parse_cpu_isa(name)); },
      py::arg("name"));
  m.def(
      "set_cpu_isa", [](const std::string& name) { set_cpu_isa(parse_cpu_isa(name)); },
      py::arg("name"), "Switches the vector kernels (tests and benchmarks compare the paths).");
  m.def(
      "cpu_gemm", [] { return std::string(use_packed_sgemm() ? "packed" : "blas"); },
      "What runs float32 CPU GEMMs now: packed (the engine's) or blas (torch's BLAS).");
  m.def("cpu_gemm_reason", &cpu_gemm_reason, "cpu_gemm() and why it was chosen, for reports.");
  m.def("auto_convolutions_on_blas", &auto_convolutions_on_blas,
        "Whether auto keeps the 3x3 convolutions (gradients included) on im2col + the BLAS.");
  m.def(
      "set_cpu_gemm", [](const std::string& name) { set_cpu_gemm(parse_cpu_gemm(name)); },
      py::arg("name"), "auto, blas or packed (tests and benchmarks compare the paths).");
  m.def("allocator_empty_cache", &allocator_empty_cache);
  bind_training(m);
  bind_checkpoint(m);
  bind_step_runner(m);
  bind_optim(m);
}
