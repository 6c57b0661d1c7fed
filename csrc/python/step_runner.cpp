// The per-call path of an ORTModule (ortmodule/module.py) in C++: feeding one compiled
// graph from a call (EntryRunner) and telling, without building the cache key, whether a
// call takes the same graph as the previous one (StepCall).
#include <ATen/autocast_mode.h>
#include <c10/util/SmallVector.h>
#include <torch/csrc/Device.h>
#include <torch/csrc/Dtype.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/jit/frontend/tracer.h>
#include <torch/extension.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/profiler.h"
#include "python/torch_boundary.h"

namespace py = pybind11;

namespace ortmodule {

namespace {

// The tensor `obj` holds, or null when it is not a tensor.
const at::Tensor* as_tensor(PyObject* obj) {
  return THPVariable_Check(obj) ? &THPVariable_Unpack(obj) : nullptr;
}

// A call's flattened tensors (positional, then keyword values in call order); borrowed.
using FlatTensors = c10::SmallVector<PyObject*, 8>;

// A value of `d` (a dict), or null; borrowed.
PyObject* dict_item(const py::object& d, const py::object& key) {
  return PyDict_GetItemWithError(d.ptr(), key.ptr());
}

// An interned string kept for the life of the process (never released: it may be used
// until the interpreter is gone).
PyObject* interned(const char* s) { return PyUnicode_InternFromString(s); }

// One program input: a flattened call tensor, or a parameter or buffer read from its
// owner's table (or through getattr when something shadows the table entry).
struct Source {
  int index = -1;         // in the call's tensors; -1: read from the owner
  py::object owner;       // the owner module, when read through getattr
  py::object owner_dict;  // its __dict__, when read from a table
  py::object table;       // "_parameters" or "_buffers"; None: getattr
  py::object attr;
};

// Feeds one compiled graph (ortmodule._entry._Entry.sources).
class EntryRunner {
 public:
  EntryRunner(std::shared_ptr<Program> program, const py::list& sources)
      : program_(std::move(program)) {
    for (const py::handle& s : sources) {
      auto t = s.cast<py::tuple>();
      Source src;
      src.index = t[0].cast<int>();
      if (src.index < 0) {
        src.owner = py::reinterpret_borrow<py::object>(t[1]);
        src.table = py::reinterpret_borrow<py::object>(t[2]);
        src.attr = py::reinterpret_borrow<py::object>(t[3]);
        if (!src.table.is_none()) src.owner_dict = src.owner.attr("__dict__");
      }
      sources_.push_back(std::move(src));
    }
  }

  // The program's outputs for a call whose flattened tensors are `tensors`.
  std::vector<at::Tensor> launch(const FlatTensors& tensors) const {
    std::vector<at::Tensor> inputs;
    inputs.reserve(sources_.size());
    for (const Source& s : sources_) inputs.push_back(read(s, tensors));
    py::gil_scoped_release release;
    return run_program(program_, inputs);
  }

 private:
  static at::Tensor read(const Source& s, const FlatTensors& tensors) {
    if (s.index >= 0) {
      if (static_cast<size_t>(s.index) >= tensors.size()) {
        throw py::index_error("ORTModule: the compiled graph reads input " +
                              std::to_string(s.index) + " of a call that has " +
                              std::to_string(tensors.size()));
      }
      return checked(tensors[s.index], s);
    }
    if (s.table.is_none()) return checked(s.owner.attr(s.attr).ptr(), s);
    PyObject* table = dict_item(s.owner_dict, s.table);
    PyObject* item = table != nullptr ? PyDict_GetItemWithError(table, s.attr.ptr()) : nullptr;
    if (item == nullptr) {
      if (PyErr_Occurred()) throw py::error_already_set();
      return checked(s.owner.attr(s.attr).ptr(), s);  // gone from the table: getattr says why
    }
    return checked(item, s);
  }

  static at::Tensor checked(PyObject* obj, const Source& s) {
    const at::Tensor* t = as_tensor(obj);
    if (t != nullptr) return *t;
    const std::string what = s.index >= 0 ? "input " + std::to_string(s.index)
                                          : "attribute '" + s.attr.cast<std::string>() + "'";
    throw py::type_error("ORTModule: " + what + " of the compiled graph is a " +
                         std::string(Py_TYPE(obj)->tp_name) +
                         ", not a tensor; pass tensors where the graph was traced with tensors");
  }

  std::shared_ptr<Program> program_;
  std::vector<Source> sources_;
};

// The graph-cache key of one call (ortmodule._call_key.CallKey: the contract with
// module.py, read field by field) and a check of every field against later calls of tensors
// only: a later call whose fields are equal has the same key and runs the same graph.
// While profiling: the time of a StepCall's own work (argument flattening, key checks,
// building the result), the launch of the program excluded, as phase "boundary.call".
class CallTimer {
 public:
  using Clock = std::chrono::steady_clock;
  CallTimer() : on_(profiling_enabled()) {
    if (on_) start_ = Clock::now();
  }
  ~CallTimer() {
    if (!on_) return;
    const std::chrono::duration<double> elapsed = Clock::now() - start_;
    record_phase_time("boundary.call", elapsed.count() - excluded_);
  }
  CallTimer(const CallTimer&) = delete;
  CallTimer& operator=(const CallTimer&) = delete;

  // Leaves its own lifetime out of the enclosing CallTimer's time.
  class Excluded {
   public:
    explicit Excluded(CallTimer& timer) : timer_(timer) {
      if (timer_.on_) start_ = Clock::now();
    }
    ~Excluded() {
      if (!timer_.on_) return;
      const std::chrono::duration<double> elapsed = Clock::now() - start_;
      timer_.excluded_ += elapsed.count();
    }
    Excluded(const Excluded&) = delete;
    Excluded& operator=(const Excluded&) = delete;

   private:
    CallTimer& timer_;
    Clock::time_point start_;
  };

 private:
  bool on_;
  double excluded_ = 0;
  Clock::time_point start_;
};

class StepCall {
 public:
  StepCall(std::shared_ptr<EntryRunner> runner, py::object entry, const py::object& key,
           const py::tuple& args, const py::dict& kwargs, const py::list& modules,
           const py::list& param_slots, const py::object& attributes, py::object accepts,
           py::object finish, py::object miss, py::list structure_version)
      : runner_(std::move(runner)),
        entry_(std::move(entry)),
        accepts_(std::move(accepts)),
        finish_(std::move(finish)),
        miss_(std::move(miss)),
        structure_version_(std::move(structure_version)),
        module_globals_(py::module_::import("torch.nn.modules.module").attr("__dict__")),
        handle_class_(py::module_::import("torch.utils.hooks").attr("RemovableHandle")) {
    check_key_fields(key);
    grad_ = key.attr("grad").cast<bool>();
    const py::tuple autocast = key.attr("autocast");
    if (autocast.size() == 3) {
      autocast_.enabled = true;
      autocast_.cuda = autocast[0].cast<std::string>() == "cuda";
      autocast_.dtype = dtype_of(autocast[1]);
      autocast_.cache = autocast[2].cast<bool>();
    }
    num_args_ = args.size();
    for (const auto& item : kwargs)
      kwarg_names_.push_back(py::reinterpret_borrow<py::object>(item.first));
    FlatTensors flat;
    if (!flatten(args, kwargs, flat)) throw py::type_error("StepCall takes tensor arguments only");
    for (const py::handle& s : key.attr("tensors"))
      args_.push_back({dtype_of(s.attr("dtype")), s.attr("rank").cast<int64_t>(),
                       s.attr("requires_grad").cast<bool>(), device_of(s.attr("device"))});
    if (args_.size() != flat.size()) throw py::value_error("StepCall: the key is another call's");
    for (PyObject* a : flat) {
      const at::Tensor* t = as_tensor(a);
      if (t == nullptr) throw py::type_error("StepCall takes tensor arguments only");
      accepted_sizes_.push_back(t->sizes().vec());
    }
    if (!attributes.is_none()) {
      for (const py::handle& v : attributes.attr("values")) {
        auto t = v.cast<py::tuple>();
        values_.push_back({t[0], t[1], t[2]});
      }
      for (const py::handle& v : attributes.attr("tensors")) {
        auto t = v.cast<py::tuple>();
        tensors_.push_back({t[0], t[1], t[2], t[3].cast<int64_t>()});
      }
    }
    for (const py::handle& m : modules)
      module_dicts_.push_back(py::reinterpret_borrow<py::object>(m).attr("__dict__"));
    for (const py::handle& flag : key.attr("training")) training_.push_back(flag.cast<bool>());
    const py::tuple params = key.attr("params");
    if (training_.size() != module_dicts_.size() || params.size() != param_slots.size())
      throw py::value_error("StepCall: the key is another module's");
    for (size_t i = 0; i < params.size(); ++i) {
      auto pair = param_slots[i].cast<py::tuple>();
      const py::tuple p = params[i];
      params_.push_back({pair[0].attr("_parameters"), py::reinterpret_borrow<py::object>(pair[1]),
                         dtype_of(p[0]), p[2].cast<bool>(), device_of(p[1])});
    }
  }

  // The call's result when `args` and `kwargs` take the same graph as the call this was
  // made from; `miss` when they may not.
  py::object call(const py::tuple& args, const py::dict& kwargs) {
    CallTimer timer;
    FlatTensors flat;
    if (!flatten(args, kwargs, flat) || !matches(flat) || !attributes_hold()) return miss_;
    if (!accepts_.is_none() && !sizes_accepted(flat)) {
      // Other sizes: the entry's shape guard decides, and these sizes pass from now on.
      py::list tensors(flat.size());
      for (size_t i = 0; i < flat.size(); ++i)
        tensors[i] = py::reinterpret_borrow<py::object>(flat[i]);
      if (!accepts_(tensors).cast<bool>()) return miss_;
      for (size_t i = 0; i < accepted_sizes_.size(); ++i)
        accepted_sizes_[i] = THPVariable_Unpack(flat[i]).sizes().vec();
    }
    std::vector<at::Tensor> outputs;
    {
      const CallTimer::Excluded launch(timer);
      outputs = runner_->launch(flat);
    }
    if (finish_.is_none()) return py::cast(std::move(outputs.front()));
    return finish_(py::cast(std::move(outputs)));
  }

  // call(args) for the whole nn.Module call of the ORTModule whose __dict__ is `wrapper`,
  // when nothing stands between nn.Module.__call__ and the wrapper's own forward (no module
  // hooks, global or the wrapper's, no torch.compile of the wrapper, no TorchScript
  // tracing, forward not replaced) and no module anywhere registered a parameter, buffer or
  // submodule since the wrapper last looked; otherwise `miss`, and the caller goes through
  // nn.Module.__call__.
  py::object step(const py::dict& wrapper, const py::tuple& args, const py::dict& kwargs) {
    if (!structure_unchanged(wrapper) || !hooks_unchanged(wrapper) || hooked(wrapper) ||
        !own_forward(wrapper) || torch::jit::tracer::isTracing())
      return miss_;
    return call(args, kwargs);
  }

  const py::object& entry() const { return entry_; }

 private:
  struct TensorKey {
    at::ScalarType dtype;
    int64_t dim;
    bool requires_grad;
    c10::Device device;
    bool operator==(const TensorKey& o) const {
      return dtype == o.dtype && dim == o.dim && requires_grad == o.requires_grad &&
             device == o.device;
    }
  };
  struct ParamKey {
    py::object table;  // the owner's _parameters
    py::object name;
    at::ScalarType dtype;
    bool requires_grad;  // under grad mode
    c10::Device device;  // a graph runs the kernels of one device
  };
  // CallKey.autocast: the first enabled region of the CPU and CUDA, as _autocast.state().
  struct Autocast {
    bool enabled = false, cuda = false, cache = false;
    at::ScalarType dtype = at::kFloat;
    bool operator==(const Autocast& o) const {
      return enabled == o.enabled &&
             (!enabled || (cuda == o.cuda && dtype == o.dtype && cache == o.cache));
    }
  };

  // The CallKey fields this checks (matches()), in their order.
  static void check_key_fields(const py::object& key) {
    static const std::vector<std::string> known = {"inputs", "tensors", "training",
                                                   "grad",   "params",  "autocast"};
    std::vector<std::string> fields;
    for (const py::handle& f : py::module_::import("dataclasses").attr("fields")(key))
      fields.push_back(f.attr("name").cast<std::string>());
    if (fields != known) {
      std::string have, want;
      for (const std::string& f : fields) have += (have.empty() ? "" : ", ") + f;
      for (const std::string& f : known) want += (want.empty() ? "" : ", ") + f;
      throw py::value_error("StepCall checks the CallKey fields " + want + " but the key has " +
                            have +
                            ": teach StepCall::matches (csrc/python/step_runner.cpp) to "
                            "check each one");
    }
  }

  static at::ScalarType dtype_of(const py::handle& h) {
    if (!THPDtype_Check(h.ptr())) throw py::type_error("StepCall: a CallKey dtype is no dtype");
    return reinterpret_cast<THPDtype*>(h.ptr())->scalar_type;
  }

  static c10::Device device_of(const py::handle& h) {
    if (!THPDevice_Check(h.ptr())) throw py::type_error("StepCall: a CallKey device is no device");
    return reinterpret_cast<THPDevice*>(h.ptr())->device;
  }

  static Autocast autocast_state() {
    Autocast a;
    for (const at::DeviceType device : {at::kCPU, at::kCUDA}) {
      if (!at::autocast::is_autocast_enabled(device)) continue;
      a.enabled = true;
      a.cuda = device == at::kCUDA;
      a.dtype = at::autocast::get_autocast_dtype(device);
      a.cache = at::autocast::is_autocast_cache_enabled();
      break;
    }
    return a;
  }

  // CallKey.tensors' entry of `t` (its requires_grad under grad mode).
  TensorKey describe(const at::Tensor& t) const {
    return {t.scalar_type(), t.dim(), grad_ && t.requires_grad(), t.device()};
  }

  // The call's arguments in the order ortmodule._schema.flatten((args, kwargs)) gives
  // their tensors, when the call has this one's structure: as many positional arguments
  // and the same keywords in the same order (their values are checked by matches()).
  bool flatten(const py::tuple& args, const py::dict& kwargs, FlatTensors& flat) const {
    if (args.size() != num_args_ || kwargs.size() != kwarg_names_.size()) return false;
    for (size_t i = 0; i < num_args_; ++i) flat.push_back(PyTuple_GET_ITEM(args.ptr(), i));
    Py_ssize_t pos = 0;
    PyObject *key = nullptr, *value = nullptr;
    for (size_t k = 0; PyDict_Next(kwargs.ptr(), &pos, &key, &value); ++k) {
      if (k >= kwarg_names_.size()) return false;
      const int equal = PyObject_RichCompareBool(key, kwarg_names_[k].ptr(), Py_EQ);
      if (equal < 0) throw py::error_already_set();
      if (equal == 0) return false;
      flat.push_back(value);
    }
    return true;
  }

  // _guards._version[0] == wrapper["_seen_version"].
  bool structure_unchanged(const py::dict& wrapper) const {
    static PyObject* const seen = interned("_seen_version");
    return equals_seen(PyList_GetItem(structure_version_.ptr(), 0), wrapper, seen);
  }

  // RemovableHandle.next_id == wrapper["_seen_hooks"]: no hook registered anywhere since the
  // wrapper checked the modules inside it for hooks the graph cannot run.
  bool hooks_unchanged(const py::dict& wrapper) const {
    static PyObject* const seen = interned("_seen_hooks");
    static PyObject* const next_id = interned("next_id");
    const py::object current =
        py::reinterpret_steal<py::object>(PyObject_GetAttr(handle_class_.ptr(), next_id));
    if (!current) throw py::error_already_set();
    return equals_seen(current.ptr(), wrapper, seen);
  }

  // current == wrapper[seen] (a missing one differs).
  static bool equals_seen(PyObject* current, const py::dict& wrapper, PyObject* seen) {
    PyObject* known = PyDict_GetItemWithError(wrapper.ptr(), seen);
    if (current == nullptr || known == nullptr) {
      if (PyErr_Occurred()) throw py::error_already_set();
      return false;
    }
    const int equal = PyObject_RichCompareBool(current, known, Py_EQ);
    if (equal < 0) throw py::error_already_set();
    return equal == 1;
  }

  // Whether nn.Module._wrapped_call_impl would do more than call forward (the test of
  // nn.Module._call_impl, plus the wrapper's own torch.compile, which nn.Module.compile
  // sets on the instance over the class's None). Hook tables it cannot find count as
  // hooked: nn.Module.__call__ then decides.
  bool hooked(const py::dict& wrapper) const {
    static PyObject* const compiled = interned("_compiled_call_impl");
    static PyObject* const own[] = {interned("_backward_hooks"), interned("_backward_pre_hooks"),
                                    interned("_forward_hooks"), interned("_forward_pre_hooks")};
    static PyObject* const global[] = {
        interned("_global_backward_pre_hooks"), interned("_global_backward_hooks"),
        interned("_global_forward_hooks"), interned("_global_forward_pre_hooks")};
    PyObject* impl = PyDict_GetItemWithError(wrapper.ptr(), compiled);
    if (impl == nullptr && PyErr_Occurred()) throw py::error_already_set();
    if (impl != nullptr && impl != Py_None) return true;
    for (PyObject* name : own)
      if (non_empty(wrapper.ptr(), name)) return true;
    for (PyObject* name : global)
      if (non_empty(module_globals_.ptr(), name)) return true;
    return false;
  }

  // Whether wrapper["forward"] is still the method made of wrapper["_own_forward"] (a
  // library that wraps forward, as accelerate's hooks do, replaces it).
  static bool own_forward(const py::dict& wrapper) {
    static PyObject* const forward = interned("forward");
    static PyObject* const own = interned("_own_forward");
    PyObject* method = PyDict_GetItemWithError(wrapper.ptr(), forward);
    PyObject* function = method != nullptr ? PyDict_GetItemWithError(wrapper.ptr(), own) : nullptr;
    if (function == nullptr) {
      if (PyErr_Occurred()) throw py::error_already_set();
      return false;
    }
    return PyMethod_Check(method) && PyMethod_GET_FUNCTION(method) == function;
  }

  // Whether d[name] is missing or true.
  static bool non_empty(PyObject* d, PyObject* name) {
    PyObject* value = PyDict_GetItemWithError(d, name);
    if (value == nullptr) {
      if (PyErr_Occurred()) throw py::error_already_set();
      return true;
    }
    const int truth = PyObject_IsTrue(value);
    if (truth < 0) throw py::error_already_set();
    return truth == 1;
  }

  static PyObject* module_training(const py::object& d) {
    static PyObject* const training = interned("training");
    return PyDict_GetItemWithError(d.ptr(), training);
  }

  // One check per CallKey field: inputs (flatten(): as many positional arguments, the same
  // keywords in the same order, tensors only), tensors, grad, training, params, autocast.
  bool matches(const FlatTensors& flat) const {
    if (flat.size() != args_.size()) return false;
    if (torch::autograd::GradMode::is_enabled() != grad_) return false;
    for (size_t i = 0; i < args_.size(); ++i) {
      const at::Tensor* t = as_tensor(flat[i]);
      if (t == nullptr || !(describe(*t) == args_[i])) return false;
    }
    for (size_t i = 0; i < module_dicts_.size(); ++i)
      if ((module_training(module_dicts_[i]) == Py_True) != training_[i]) return false;
    for (const ParamKey& p : params_) {
      const at::Tensor* t = as_tensor_or_null(PyDict_GetItemWithError(p.table.ptr(), p.name.ptr()));
      if (t == nullptr || t->scalar_type() != p.dtype ||
          (grad_ && t->requires_grad()) != p.requires_grad || t->device() != p.device)
        return false;
    }
    if (PyErr_Occurred()) throw py::error_already_set();
    return autocast_state() == autocast_;
  }

  // The entry's AttributeGuard.holds(): the attribute values forward read while it was
  // traced are unchanged.
  bool attributes_hold() const {
    for (const AttributeValue& a : values_) {
      PyObject* current = PyDict_GetItemWithError(a.dict.ptr(), a.name.ptr());
      if (current == nullptr) {
        if (PyErr_Occurred()) throw py::error_already_set();
        return false;
      }
      const int equal = PyObject_RichCompareBool(current, a.value.ptr(), Py_EQ);
      if (equal < 0) throw py::error_already_set();
      if (equal == 0) return false;
    }
    for (const AttributeTensor& a : tensors_) {
      PyObject* current = PyDict_GetItemWithError(a.dict.ptr(), a.name.ptr());
      if (current != a.tensor.ptr()) {
        if (PyErr_Occurred()) throw py::error_already_set();
        return false;
      }
      if (THPVariable_Unpack(current)._version() != a.version) return false;
    }
    return true;
  }

  bool sizes_accepted(const FlatTensors& flat) const {
    for (size_t i = 0; i < accepted_sizes_.size(); ++i)
      if (THPVariable_Unpack(flat[i]).sizes() != accepted_sizes_[i]) return false;
    return true;
  }

  static const at::Tensor* as_tensor_or_null(PyObject* obj) {
    return obj != nullptr ? as_tensor(obj) : nullptr;
  }

  std::shared_ptr<EntryRunner> runner_;
  py::object entry_;            // the ortmodule._entry._Entry the runner feeds
  py::object accepts_;          // the entry's accepts() when it has a shape guard, or None
  py::object finish_;           // makes the result from the list of outputs; None: the one output
  py::object miss_;             // returned when the call may not take this graph
  py::list structure_version_;  // ortmodule._guards._version
  py::object module_globals_;   // torch.nn.modules.module's globals (the global hooks)
  py::object handle_class_;     // torch.utils.hooks.RemovableHandle (its next_id counts hooks)
  struct AttributeValue {
    py::object dict, name, value;
  };
  struct AttributeTensor {
    py::object dict, name, tensor;
    int64_t version;
  };
  std::vector<AttributeValue> values_;
  std::vector<AttributeTensor> tensors_;
  std::vector<std::vector<int64_t>> accepted_sizes_;  // sizes the shape guard accepted
  bool grad_ = true;
  Autocast autocast_;
  size_t num_args_ = 0;                  // positional arguments
  std::vector<py::object> kwarg_names_;  // keyword arguments, in call order
  std::vector<TensorKey> args_;          // per flattened tensor
  std::vector<py::object> module_dicts_;
  std::vector<bool> training_;
  std::vector<ParamKey> params_;
};

}  // namespace

void bind_step_runner(py::module_& m) {
  py::class_<EntryRunner, std::shared_ptr<EntryRunner>>(m, "EntryRunner")
      .def(py::init<std::shared_ptr<Program>, const py::list&>(), py::arg("program"),
           py::arg("sources"),
           "sources: per program input (flat index, None, None, None) or (-1, owner, "
           "'_parameters'/'_buffers' or None for getattr, attribute).")
      .def(
          "launch",
          [](const EntryRunner& r, const py::sequence& tensors) {
            FlatTensors flat;
            for (const py::handle& t : tensors) flat.push_back(t.ptr());
            return r.launch(flat);
          },
          py::arg("tensors"), "Runs the graph on a call's flattened tensors; returns its outputs.");
  py::class_<StepCall>(m, "StepCall")
      .def(py::init<std::shared_ptr<EntryRunner>, py::object, const py::object&, const py::tuple&,
                    const py::dict&, const py::list&, const py::list&, const py::object&,
                    py::object, py::object, py::object, py::list>(),
           py::arg("runner"), py::arg("entry"), py::arg("key"), py::arg("args"), py::arg("kwargs"),
           py::arg("modules"), py::arg("param_slots"), py::arg("attributes"), py::arg("accepts"),
           py::arg("finish"), py::arg("miss"), py::arg("structure_version"),
           "A call of tensors `args` and `kwargs` that took `entry` (whose runner is `runner`) "
           "under the graph-cache key `key` (ortmodule._call_key.CallKey); "
           "attributes: its AttributeGuard or None; accepts: its accepts() when it has a shape "
           "guard, else None; finish: makes the result from the list of outputs, None when the "
           "result is the one output; miss: what a call that may not take the graph returns; "
           "structure_version: ortmodule._guards._version.")
      .def("__call__", &StepCall::call, py::arg("args"), py::arg("kwargs"),
           "The result when the call takes the same graph as the one this describes, else miss.")
      .def("step", &StepCall::step, py::arg("wrapper"), py::arg("args"), py::arg("kwargs"),
           "__call__(args, kwargs) for a whole call of the ORTModule whose __dict__ is `wrapper`, "
           "when no "
           "hook, torch.compile, tracing or registration since stands in between; else miss.")
      .def_property_readonly("entry", &StepCall::entry, "The entry this call takes.");
}

}  // namespace ortmodule
