// Python access to the optimizer arithmetic (csrc/optim), on numpy float32 arrays updated
// in place. Used by the tests that compare it with PyTorch and with the reference runtime.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "optim/optimizers.h"

namespace py = pybind11;

namespace {

// The array's float32 buffer, refusing anything that cannot be updated in place.
float* float_buffer(py::array& a, const char* op, const char* what, bool writable) {
  if (!a.dtype().is(py::dtype::of<float>())) {
    throw std::invalid_argument(std::string(op) + ": " + what + " must be a float32 array, got " +
                                std::string(py::str(a.dtype())));
  }
  if (!(a.flags() & py::array::c_style)) {
    throw std::invalid_argument(std::string(op) + ": " + what + " must be C-contiguous");
  }
  if (writable && !a.writeable()) {
    throw std::invalid_argument(std::string(op) + ": " + what +
                                " must be writable (it is updated in place)");
  }
  return static_cast<float*>(a.mutable_data());
}

void check_same_size(const char* op, const char* what, const py::array& a, const py::array& ref) {
  if (a.size() != ref.size()) {
    throw std::invalid_argument(std::string(op) + ": " + what + " has " + std::to_string(a.size()) +
                                " elements, expected " + std::to_string(ref.size()) +
                                " (the parameter's)");
  }
}

ortmodule::AdamWConfig adamw_config(const py::dict& d) {
  ortmodule::AdamWConfig c;
  for (const auto& kv : d) {
    const std::string key = py::cast<std::string>(kv.first);
    py::handle val = kv.second;
    if (key == "alpha") {
      c.alpha = py::cast<float>(val);
    } else if (key == "beta") {
      c.beta = py::cast<float>(val);
    } else if (key == "epsilon") {
      c.epsilon = py::cast<float>(val);
    } else if (key == "weight_decay") {
      c.weight_decay = py::cast<float>(val);
    } else if (key == "correct_bias") {
      c.correct_bias = py::cast<int64_t>(val) != 0;
    } else if (key == "adam_mode") {
      c.adam_mode = py::cast<int64_t>(val);
    } else {
      throw std::invalid_argument(
          "AdamWOptimizer: unknown attribute '" + key +
          "' (expected alpha, beta, epsilon, weight_decay, correct_bias, adam_mode)");
    }
  }
  return c;
}

}  // namespace

void bind_optim(py::module_& m) {
  m.def(
      "_adamw_update",
      [](const py::dict& cfg, float lr, int64_t step, py::array p, py::array g, py::array mom1,
         py::array mom2) {
        const char* op = "AdamWOptimizer";
        const ortmodule::AdamWConfig c = adamw_config(cfg);
        float* pp = float_buffer(p, op, "parameter", true);
        float* gp = float_buffer(g, op, "gradient", false);
        float* mp = float_buffer(mom1, op, "first moment", true);
        float* vp = float_buffer(mom2, op, "second moment", true);
        check_same_size(op, "gradient", g, p);
        check_same_size(op, "first moment", mom1, p);
        check_same_size(op, "second moment", mom2, p);
        const int64_t n = static_cast<int64_t>(p.size());
        py::gil_scoped_release release;
        ortmodule::adamw_update(c, lr, step, pp, gp, mp, vp, n);
      },
      py::arg("config"), py::arg("lr"), py::arg("step"), py::arg("param"), py::arg("grad"),
      py::arg("exp_avg"), py::arg("exp_avg_sq"),
      "AdamWOptimizer update of one float32 parameter; param, exp_avg, exp_avg_sq in place. "
      "config: dict of the op's attributes (alpha, beta, epsilon, weight_decay, correct_bias, "
      "adam_mode); step: the op's step input (1 on the first update).");
  m.def(
      "_sgd_update",
      [](float lr, py::array p, py::array g) {
        const char* op = "SGDOptimizerV2";
        float* pp = float_buffer(p, op, "parameter", true);
        float* gp = float_buffer(g, op, "gradient", false);
        check_same_size(op, "gradient", g, p);
        const int64_t n = static_cast<int64_t>(p.size());
        py::gil_scoped_release release;
        ortmodule::sgd_update(lr, pp, gp, n);
      },
      py::arg("lr"), py::arg("param"), py::arg("grad"),
      "SGDOptimizerV2 update of one float32 parameter in place: param -= lr * grad.");
  m.def(
      "_clip_grad_norm",
      [](std::vector<py::array> grads, float max_norm) {
        std::vector<std::pair<float*, int64_t>> bufs;
        for (size_t i = 0; i < grads.size(); ++i) {
          const std::string what = "gradient " + std::to_string(i);
          bufs.emplace_back(float_buffer(grads[i], "InplaceClipGradNorm", what.c_str(), true),
                            static_cast<int64_t>(grads[i].size()));
        }
        py::gil_scoped_release release;
        return ortmodule::clip_grad_norm(bufs, max_norm);
      },
      py::arg("grads"), py::arg("max_norm"),
      "InplaceClipGradNorm (Frobenius norm over all gradients): scales the float32 gradients in "
      "place by min(max_norm / (norm + 1e-6), 1); returns the norm.");
  m.def("_linear_lr", &ortmodule::linear_lr, py::arg("step"), py::arg("warmup_step_count"),
        py::arg("total_step_count"), py::arg("initial_lr"),
        "LinearLRScheduler's learning rate after `step` optimizer steps.");
}
