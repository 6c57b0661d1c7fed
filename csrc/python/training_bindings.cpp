// Bindings of the on-device training engine: artifacts, the training module and optimizer.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "training/artifacts.h"

namespace py = pybind11;

namespace ortmodule {

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
}

}  // namespace ortmodule
