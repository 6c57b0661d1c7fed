// Python access to the optimizer arithmetic (csrc/optim): the on-device training updates on
// numpy float32 arrays (used by the tests that compare them with PyTorch and with the
// reference runtime), and the multi-tensor AdamW/SGD steps of ortmodule.optim on lists of
// torch tensors.
#include <c10/core/DeviceGuard.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/extension.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "optim/multi_tensor.h"
#include "optim/multi_tensor_cuda.h"
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

// ---- multi-tensor AdamW / SGD on torch tensors ----

// Names the parameter as the user addressed it: its place in the optimizer's param_groups
// and, where the group carries them (named parameters), its name.
struct ParamLabels {
  const char* optimizer;
  int64_t group;
  const std::vector<int64_t>& positions;
  const py::object& names;

  std::string operator()(size_t i) const { return std::string(optimizer) + ": " + where(i); }

  // param_groups[g]['params'][i], and ('name') where the group has names.
  std::string where(size_t i) const {
    const int64_t pos = positions.at(i);
    std::string label =
        "param_groups[" + std::to_string(group) + "]['params'][" + std::to_string(pos) + "]";
    if (!names.is_none()) {
      py::gil_scoped_acquire gil;
      label += " ('" + py::cast<std::string>(py::str(names[py::int_(pos)])) + "')";
    }
    return label;
  }
};

std::string shape_string(const at::Tensor& t) {
  std::string s = "[";
  for (int64_t d = 0; d < t.dim(); ++d) s += (d ? ", " : "") + std::to_string(t.size(d));
  return s + "]";
}

// The device the group's tensors live on (its first parameter's), checked to be one the
// fused optimizers run on in this build.
at::Device group_device(const ParamLabels& label, const std::vector<at::Tensor>& params) {
  if (params.empty()) return at::Device(at::kCPU);
  const at::Tensor& p = params.front();
  if (!p.defined()) throw std::invalid_argument(label(0) + " is an undefined tensor");
  const at::Device device = p.device();
  if (device.is_cuda() && !ortmodule::cuda_multi_tensor_optimizers_linked()) {
    throw std::invalid_argument(
        label(0) + " is on " + device.str() +
        " but this build of ortmodule has no CUDA kernels (a CPU build): build it against a "
        "CUDA build of torch with nvcc (docs/install.md), or use torch.optim");
  }
  if (!device.is_cpu() && !device.is_cuda()) {
    throw std::invalid_argument(label(0) + " is on " + device.str() +
                                "; the fused optimizers run on CPU tensors only, and on CUDA "
                                "tensors in a CUDA build of ortmodule");
  }
  return device;
}

void check_param(const ParamLabels& label, size_t i, const at::Tensor& p, at::Device device) {
  if (p.is_sparse()) throw std::invalid_argument(label(i) + " is sparse; use a dense parameter");
  if (p.is_complex()) {
    throw std::invalid_argument(label(i) + " is complex (" +
                                std::string(c10::toString(p.scalar_type())) +
                                "); complex parameters are not supported, use torch.optim");
  }
  if (p.device() != device) {
    throw std::invalid_argument(label(i) + " is on " + p.device().str() + ", " + label.where(0) +
                                " on " + device.str() +
                                "; one step updates one device's tensors: give each device's "
                                "parameters a parameter group of their own");
  }
  if (p.scalar_type() != at::kFloat && p.scalar_type() != at::kDouble) {
    throw std::invalid_argument(label(i) + " has dtype " +
                                std::string(c10::toString(p.scalar_type())) +
                                "; expected float32 or float64");
  }
  if (!p.is_contiguous()) {
    throw std::invalid_argument(label(i) + " (shape " + shape_string(p) +
                                ") is not contiguous; make it contiguous before building the "
                                "optimizer");
  }
}

// A gradient or state tensor that is updated alongside parameter p.
void check_companion(const ParamLabels& label, size_t i, const char* what, const at::Tensor& t,
                     const at::Tensor& p) {
  if (!t.defined()) throw std::invalid_argument(label(i) + ": " + what + " is missing");
  if (t.is_sparse()) {
    throw std::invalid_argument(label(i) + ": " + what +
                                " is sparse; the fused optimizers need dense gradients (use "
                                "torch.optim.SparseAdam for sparse ones)");
  }
  if (t.device() != p.device() || t.scalar_type() != p.scalar_type() ||
      !t.sizes().equals(p.sizes()) || !t.is_contiguous()) {
    throw std::invalid_argument(
        label(i) + ": " + what + " must be a contiguous " + p.device().str() +
        " tensor of the parameter's dtype " + std::string(c10::toString(p.scalar_type())) +
        " and shape " + shape_string(p) + ", got " + std::string(c10::toString(t.scalar_type())) +
        " " + shape_string(t) + " on " + t.device().str() +
        (t.is_contiguous() ? "" : " (not contiguous)"));
  }
}

// Adds one to the step counter in its own dtype (torch's state['step'] += 1) and returns it.
double increment_step(const ParamLabels& label, size_t i, const at::Tensor& step) {
  if (!step.defined() || !step.device().is_cpu() || step.numel() != 1 ||
      (step.scalar_type() != at::kFloat && step.scalar_type() != at::kDouble)) {
    throw std::invalid_argument(label(i) +
                                ": state['step'] must be a one-element float32 or float64 CPU "
                                "tensor");
  }
  step.unsafeGetTensorImpl()->bump_version();
  if (step.scalar_type() == at::kFloat) {
    float* s = step.data_ptr<float>();
    *s = *s + 1.0f;
    return *s;
  }
  double* s = step.data_ptr<double>();
  *s = *s + 1.0;
  return *s;
}

// torch.sqrt over raw arrays: the AdamW step takes its square roots from torch so that they
// round as torch's (MKL's vector sqrt is not the IEEE one; see multi_tensor.h).
template <typename T>
void torch_sqrt(const T* in, T* out, int64_t n) {
  c10::InferenceMode no_autograd;
  const auto options = at::TensorOptions().dtype(c10::CppTypeToScalarType<T>::value);
  at::Tensor dst = at::from_blob(out, {n}, options);
  at::sqrt_out(dst, at::from_blob(const_cast<T*>(in), {n}, options));
}

template <typename T>
T* data_of(const at::Tensor& t) {
  t.unsafeGetTensorImpl()->bump_version();  // autograd sees the in-place update
  return t.data_ptr<T>();
}

void check_lengths(const char* optimizer, size_t n, std::initializer_list<size_t> lengths) {
  for (size_t len : lengths) {
    if (len != n) {
      throw std::invalid_argument(std::string(optimizer) + ": the tensor lists differ in length (" +
                                  std::to_string(len) + " vs " + std::to_string(n) +
                                  " parameters)");
    }
  }
}

ortmodule::MultiplyAdd multiply_add_mode(bool fused) {
  return fused ? ortmodule::MultiplyAdd::kFused : ortmodule::MultiplyAdd::kSeparate;
}

void fused_adamw_step(const std::vector<at::Tensor>& params, const std::vector<at::Tensor>& grads,
                      const std::vector<at::Tensor>& exp_avgs,
                      const std::vector<at::Tensor>& exp_avg_sqs,
                      const std::vector<at::Tensor>& max_exp_avg_sqs,
                      const std::vector<at::Tensor>& steps, const std::vector<int64_t>& positions,
                      int64_t group, const py::object& names, const ortmodule::AdamWHyperParams& h,
                      bool fused_multiply_add, bool match_torch_sqrt) {
  const ParamLabels label{"FusedAdamW", group, positions, names};
  const size_t n = params.size();
  check_lengths(
      label.optimizer, n,
      {grads.size(), exp_avgs.size(), exp_avg_sqs.size(), steps.size(), positions.size()});
  if (h.amsgrad) check_lengths(label.optimizer, n, {max_exp_avg_sqs.size()});
  const at::Device device = group_device(label, params);
  std::vector<ortmodule::AdamWTensor<float>> f32;
  std::vector<ortmodule::AdamWTensor<double>> f64;
  for (size_t i = 0; i < n; ++i) {
    const at::Tensor& p = params[i];
    check_param(label, i, p, device);
    check_companion(label, i, "grad", grads[i], p);
    check_companion(label, i, "state['exp_avg']", exp_avgs[i], p);
    check_companion(label, i, "state['exp_avg_sq']", exp_avg_sqs[i], p);
    if (h.amsgrad) check_companion(label, i, "state['max_exp_avg_sq']", max_exp_avg_sqs[i], p);
  }
  for (size_t i = 0; i < n; ++i) {
    const at::Tensor& p = params[i];
    const double step = increment_step(label, i, steps[i]);
    if (p.scalar_type() == at::kFloat) {
      f32.push_back({data_of<float>(p), grads[i].data_ptr<float>(), data_of<float>(exp_avgs[i]),
                     data_of<float>(exp_avg_sqs[i]),
                     h.amsgrad ? data_of<float>(max_exp_avg_sqs[i]) : nullptr, p.numel(), step});
    } else {
      f64.push_back({data_of<double>(p), grads[i].data_ptr<double>(), data_of<double>(exp_avgs[i]),
                     data_of<double>(exp_avg_sqs[i]),
                     h.amsgrad ? data_of<double>(max_exp_avg_sqs[i]) : nullptr, p.numel(), step});
    }
  }
  py::gil_scoped_release release;
  if (device.is_cuda()) {
    const c10::DeviceGuard guard(device);  // the kernels' stream is torch's current one there
    ortmodule::cuda_multi_tensor_adamw(h, device.index(), f32, f64);
    return;
  }
  const ortmodule::MultiplyAdd mode = multiply_add_mode(fused_multiply_add);
  if (!f32.empty()) {
    ortmodule::multi_tensor_adamw(h, mode, match_torch_sqrt ? &torch_sqrt<float> : nullptr, f32);
  }
  if (!f64.empty()) {
    ortmodule::multi_tensor_adamw(h, mode, match_torch_sqrt ? &torch_sqrt<double> : nullptr, f64);
  }
}

void fused_sgd_step(const std::vector<at::Tensor>& params, const std::vector<at::Tensor>& grads,
                    const std::vector<at::Tensor>& momentum_buffers,
                    const std::vector<bool>& first_steps, const std::vector<int64_t>& positions,
                    int64_t group, const py::object& names, const ortmodule::SGDHyperParams& h,
                    bool fused_multiply_add) {
  const ParamLabels label{"FusedSGD", group, positions, names};
  const size_t n = params.size();
  const bool momentum = h.momentum != 0;
  check_lengths(label.optimizer, n, {grads.size(), positions.size()});
  if (momentum) check_lengths(label.optimizer, n, {momentum_buffers.size(), first_steps.size()});
  const at::Device device = group_device(label, params);
  std::vector<ortmodule::SGDTensor<float>> f32;
  std::vector<ortmodule::SGDTensor<double>> f64;
  for (size_t i = 0; i < n; ++i) {
    const at::Tensor& p = params[i];
    check_param(label, i, p, device);
    check_companion(label, i, "grad", grads[i], p);
    if (momentum) check_companion(label, i, "state['momentum_buffer']", momentum_buffers[i], p);
  }
  for (size_t i = 0; i < n; ++i) {
    const at::Tensor& p = params[i];
    const bool first = momentum && first_steps[i];
    if (p.scalar_type() == at::kFloat) {
      f32.push_back({data_of<float>(p), grads[i].data_ptr<float>(),
                     momentum ? data_of<float>(momentum_buffers[i]) : nullptr, first, p.numel()});
    } else {
      f64.push_back({data_of<double>(p), grads[i].data_ptr<double>(),
                     momentum ? data_of<double>(momentum_buffers[i]) : nullptr, first, p.numel()});
    }
  }
  py::gil_scoped_release release;
  if (device.is_cuda()) {
    const c10::DeviceGuard guard(device);
    ortmodule::cuda_multi_tensor_sgd(h, device.index(), f32, f64);
    return;
  }
  const ortmodule::MultiplyAdd mode = multiply_add_mode(fused_multiply_add);
  if (!f32.empty()) ortmodule::multi_tensor_sgd(h, mode, f32);
  if (!f64.empty()) ortmodule::multi_tensor_sgd(h, mode, f64);
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
  m.def(
      "_fused_adamw_step",
      [](const std::vector<at::Tensor>& params, const std::vector<at::Tensor>& grads,
         const std::vector<at::Tensor>& exp_avgs, const std::vector<at::Tensor>& exp_avg_sqs,
         const std::vector<at::Tensor>& max_exp_avg_sqs, const std::vector<at::Tensor>& steps,
         const std::vector<int64_t>& positions, int64_t group, const py::object& param_names,
         double lr, double beta1, double beta2, double eps, double weight_decay, bool amsgrad,
         bool maximize, bool fused_multiply_add, bool match_torch_sqrt) {
        ortmodule::AdamWHyperParams h;
        h.lr = lr;
        h.beta1 = beta1;
        h.beta2 = beta2;
        h.eps = eps;
        h.weight_decay = weight_decay;
        h.amsgrad = amsgrad;
        h.maximize = maximize;
        fused_adamw_step(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, steps, positions,
                         group, param_names, h, fused_multiply_add, match_torch_sqrt);
      },
      py::arg("params"), py::arg("grads"), py::arg("exp_avgs"), py::arg("exp_avg_sqs"),
      py::arg("max_exp_avg_sqs"), py::arg("steps"), py::arg("positions"), py::arg("group"),
      py::arg("param_names"), py::arg("lr"), py::arg("beta1"), py::arg("beta2"), py::arg("eps"),
      py::arg("weight_decay"), py::arg("amsgrad"), py::arg("maximize"),
      py::arg("fused_multiply_add"), py::arg("match_torch_sqrt"),
      "One AdamW step (torch.optim.AdamW foreach arithmetic) over a parameter group's tensors, "
      "in place; increments each state['step'] tensor. match_torch_sqrt=False: the IEEE square "
      "root instead of torch.sqrt's. positions/group/param_names only name parameters in errors.");
  m.def(
      "_fused_sgd_step",
      [](const std::vector<at::Tensor>& params, const std::vector<at::Tensor>& grads,
         const std::vector<at::Tensor>& momentum_buffers, const std::vector<bool>& first_steps,
         const std::vector<int64_t>& positions, int64_t group, const py::object& param_names,
         double lr, double momentum, double dampening, double weight_decay, bool nesterov,
         bool maximize, bool fused_multiply_add) {
        ortmodule::SGDHyperParams h;
        h.lr = lr;
        h.momentum = momentum;
        h.dampening = dampening;
        h.weight_decay = weight_decay;
        h.nesterov = nesterov;
        h.maximize = maximize;
        fused_sgd_step(params, grads, momentum_buffers, first_steps, positions, group, param_names,
                       h, fused_multiply_add);
      },
      py::arg("params"), py::arg("grads"), py::arg("momentum_buffers"), py::arg("first_steps"),
      py::arg("positions"), py::arg("group"), py::arg("param_names"), py::arg("lr"),
      py::arg("momentum"), py::arg("dampening"), py::arg("weight_decay"), py::arg("nesterov"),
      py::arg("maximize"), py::arg("fused_multiply_add"),
      "One SGD step (torch.optim.SGD foreach arithmetic) over a parameter group's tensors, in "
      "place. momentum_buffers/first_steps are used only with momentum != 0; a first step "
      "writes the buffer as the gradient.");
  m.def("_fused_optimizers_have_cuda_kernels", &ortmodule::cuda_multi_tensor_optimizers_linked,
        "Whether FusedAdamW/FusedSGD can update CUDA tensors (a CUDA build of the extension).");
  m.def("_cpu_has_fused_multiply_add", &ortmodule::cpu_has_fused_multiply_add,
        "Whether this CPU has AVX2 and FMA (needed to reproduce torch's vectorized kernels).");
}
