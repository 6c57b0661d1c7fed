// Bindings of the on-device training engine: artifacts, the checkpoint state, the training
// module, its optimizer and the linear learning-rate scheduler. Tensors cross as numpy
// arrays (copied); ortmodule/training/api wraps these classes in the public Python API.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "python/checkpoint_py.h"
#include "training/artifacts.h"
#include "training/checkpoint.h"
#include "training/module.h"
#include "training/optimizer.h"

namespace py = pybind11;

namespace ortmodule {

namespace {

using checkpoint_py::tensor_from_py;
using checkpoint_py::tensor_to_py;

std::vector<Tensor> inputs_from_py(const std::vector<py::object>& inputs) {
  std::vector<Tensor> out;
  for (size_t i = 0; i < inputs.size(); ++i)
    out.push_back(tensor_from_py(inputs[i], false, "input " + std::to_string(i)));
  return out;
}

py::list outputs_to_py(const std::vector<Tensor>& outputs) {
  py::list out;
  for (const Tensor& t : outputs) out.append(tensor_to_py(t, false));
  return out;
}

Tensor& parameter_or_throw(TrainingState& s, const std::string& name) {
  Tensor* p = find_parameter(s, name);
  if (!p) throw py::key_error("the checkpoint has no parameter '" + name + "'");
  return *p;
}

}  // namespace

void bind_training(py::module_& m) {
  m.def(
      "build_training_graphs",
      [](const py::bytes& model, const std::vector<std::string>& requires_grad,
         const std::vector<std::string>& frozen) {
        std::string bytes = model;
        TrainingGraphs g;
        {
          py::gil_scoped_release release;
          g = build_training_graphs(bytes, requires_grad, frozen);
        }
        return py::make_tuple(py::bytes(g.training_model), py::bytes(g.eval_model),
                              g.engine_only_ops);
      },
      py::arg("model"), py::arg("requires_grad"), py::arg("frozen"),
      "(training model, eval model, engine-only ops) in ONNX Runtime Training's artifact layout, "
      "from an ONNX model whose first output is the loss.");

  py::class_<TrainingState, std::shared_ptr<TrainingState>>(m, "TrainingState")
      .def_static(
          "from_bytes",
          [](const py::bytes& data, const std::string& origin) {
            std::string bytes = data;
            auto s = std::make_shared<TrainingState>();
            s->data = parse_checkpoint(bytes.data(), bytes.size(), origin);
            return s;
          },
          py::arg("data"), py::arg("origin"))
      .def(
          "to_bytes",
          [](const TrainingState& s, bool include_optimizer_state) {
            return py::bytes(serialize_checkpoint(s.data, include_optimizer_state));
          },
          py::arg("include_optimizer_state"))
      .def("save",
           [](const TrainingState& s, const std::string& path, bool include_optimizer_state) {
             save_checkpoint_file(s.data, path, include_optimizer_state);
           })
      .def_property_readonly("is_nominal", [](const TrainingState& s) { return s.data.is_nominal; })
      .def_property_readonly("has_module", [](const TrainingState& s) { return s.has_module; })
      .def("parameter_names",
           [](const TrainingState& s) {
             std::vector<std::string> names;
             for (const auto* mp : {&s.data.trainable, &s.data.frozen})
               for (const auto& kv : *mp) names.push_back(kv.first);
             std::sort(names.begin(), names.end());
             return names;
           })
      .def("requires_grad",
           [](TrainingState& s, const std::string& name) {
             parameter_or_throw(s, name);
             return is_trainable(s, name);
           })
      .def("get_parameter",
           [](TrainingState& s, const std::string& name) {
             Tensor& p = parameter_or_throw(s, name);
             if (s.data.is_nominal)
               throw std::runtime_error("parameter '" + name +
                                        "' has no value: the checkpoint is nominal. Please load "
                                        "the model parameters first.");
             return tensor_to_py(p, false);
           })
      .def("parameter_info",
           [](TrainingState& s, const std::string& name) {
             Tensor& p = parameter_or_throw(s, name);
             return py::make_tuple(dtype_name(p.dtype()), p.shape());
           })
      .def("set_parameter",
           [](TrainingState& s, const std::string& name, const py::object& value) {
             Tensor& p = parameter_or_throw(s, name);
             if (s.data.is_nominal)
               throw std::runtime_error("parameter '" + name +
                                        "' cannot be set: the checkpoint is nominal. Please load "
                                        "the model parameters first.");
             Tensor v = tensor_from_py(value, false, "the value of parameter '" + name + "'");
             if (v.dtype() != p.dtype() || v.shape() != p.shape())
               throw py::value_error("parameter '" + name + "' is " + dtype_name(p.dtype()) + " " +
                                     shape_str(p.shape()) + "; got " + dtype_name(v.dtype()) + " " +
                                     shape_str(v.shape()));
             if (p.nbytes()) std::memcpy(p.raw(), v.raw(), p.nbytes());
           })
      .def("get_grad",
           [](TrainingState& s, const std::string& name) -> py::object {
             parameter_or_throw(s, name);
             auto it = s.gradients.find(name);
             if (!is_trainable(s, name)) return py::none();
             if (it == s.gradients.end() || !it->second.defined())
               throw std::runtime_error("parameter '" + name +
                                        "' has no gradient buffer yet: create a Module on this "
                                        "checkpoint state (and load its parameters if nominal)");
             return tensor_to_py(it->second, false);
           })
      .def("properties",
           [](const TrainingState& s) {
             py::dict d;
             for (const auto& kv : s.data.properties)
               std::visit([&](const auto& v) { d[py::str(kv.first)] = v; }, kv.second);
             return d;
           })
      .def("set_property",
           [](TrainingState& s, const std::string& name, const py::object& value) {
             s.data.properties[name] =
                 checkpoint_py::property_from_py(value, "property '" + name + "'");
           })
      .def("remove_property", [](TrainingState& s, const std::string& name) {
        if (!s.data.properties.erase(name))
          throw py::key_error("the checkpoint has no property '" + name + "'");
      });

  py::class_<TrainingModule, std::shared_ptr<TrainingModule>>(m, "TrainingModule")
      .def(py::init([](std::shared_ptr<TrainingState> state, const py::bytes& train,
                       const py::bytes& eval) {
             std::string t = train, e = eval;
             py::gil_scoped_release release;
             return std::make_shared<TrainingModule>(std::move(state), t, e);
           }),
           py::arg("state"), py::arg("training_model"), py::arg("eval_model"))
      .def("train_step",
           [](TrainingModule& mod, const std::vector<py::object>& inputs) {
             std::vector<Tensor> in = inputs_from_py(inputs);
             std::vector<Tensor> out;
             {
               py::gil_scoped_release release;
               out = mod.train_step(in);
             }
             return outputs_to_py(out);
           })
      .def("eval_step",
           [](TrainingModule& mod, const std::vector<py::object>& inputs) {
             std::vector<Tensor> in = inputs_from_py(inputs);
             std::vector<Tensor> out;
             {
               py::gil_scoped_release release;
               out = mod.eval_step(in);
             }
             return outputs_to_py(out);
           })
      .def("lazy_reset_grad", &TrainingModule::lazy_reset_grad)
      .def("input_names", &TrainingModule::input_names, py::arg("training"))
      .def("output_names", &TrainingModule::output_names, py::arg("training"))
      .def("parameters", &TrainingModule::parameters)
      .def("trainable_parameters", &TrainingModule::trainable_parameters)
      .def("parameters_size", &TrainingModule::parameters_size, py::arg("trainable_only"))
      .def(
          "copy_parameters_to_buffer",
          [](const TrainingModule& mod, bool trainable_only) {
            return tensor_to_py(mod.copy_parameters_to_buffer(trainable_only), false);
          },
          py::arg("trainable_only"))
      .def(
          "copy_buffer_to_parameters",
          [](TrainingModule& mod, const py::object& buffer, bool trainable_only) {
            mod.copy_buffer_to_parameters(tensor_from_py(buffer, false, "the buffer"),
                                          trainable_only);
          },
          py::arg("buffer"), py::arg("trainable_only"))
      .def(
          "export_model_for_inferencing",
          [](const TrainingModule& mod, const std::vector<std::string>& names) {
            return py::bytes(mod.export_model_for_inferencing(names));
          },
          py::arg("output_names"))
      .def("set_seed", &TrainingModule::set_seed, py::arg("seed"));

  py::class_<TrainingOptimizer, std::shared_ptr<TrainingOptimizer>>(m, "TrainingOptimizer")
      .def(py::init([](const py::bytes& model, std::shared_ptr<TrainingModule> module) {
             return std::make_shared<TrainingOptimizer>(std::string(model), std::move(module));
           }),
           py::arg("optimizer_model"), py::arg("module"))
      .def("step",
           [](TrainingOptimizer& o) {
             py::gil_scoped_release release;
             o.step();
           })
      .def_property("learning_rate", &TrainingOptimizer::learning_rate,
                    &TrainingOptimizer::set_learning_rate)
      .def_property_readonly("initial_learning_rate", &TrainingOptimizer::initial_learning_rate)
      .def_property_readonly("step_count", &TrainingOptimizer::step_count)
      .def_property_readonly("kind", [](const TrainingOptimizer& o) {
        return o.info().kind == OptimizerModelInfo::Kind::AdamW ? "AdamW" : "SGD";
      });

  py::class_<LinearLRScheduler, std::shared_ptr<LinearLRScheduler>>(m, "LinearLRScheduler")
      .def(py::init<std::shared_ptr<TrainingOptimizer>, int64_t, int64_t, float>(),
           py::arg("optimizer"), py::arg("warmup_step_count"), py::arg("total_step_count"),
           py::arg("initial_lr"))
      .def("step", &LinearLRScheduler::step);
}

}  // namespace ortmodule
