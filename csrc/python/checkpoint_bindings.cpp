// Python access to the checkpoint file format (training/checkpoint.h), as plain dicts:
//
//   {"trainable": {name: array}, "frozen": {name: array}, "is_nominal": bool,
//    "optimizer_groups": {"group0": {"step": int, "initial_learning_rate": float,
//                                    "param_states": {param: {"momentum0": array, ...}}}},
//    "properties": {name: int | float | str}}
//
// Arrays are numpy arrays (bfloat16 and the low-bit types as ml_dtypes dtypes). The
// tensors of a nominal checkpoint hold no data and appear as ("nominal", dtype, shape)
// tuples, dtype an engine dtype name ("float32", "bfloat16", "float8e4m3fn", ...);
// serializing a nominal state also accepts arrays (only their dtype and shape are kept).
// An int property is stored as int64, a float one as float32.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <cstring>
#include <set>
#include <string>

#include "python/checkpoint_py.h"
#include "training/checkpoint.h"

namespace py = pybind11;

namespace ortmodule {

namespace checkpoint_py {

// Numpy dtype names of the types numpy lacks (provided by ml_dtypes).
const char* ml_dtypes_name(DType t) {
  switch (t) {
    case DType::BFloat16:
      return "bfloat16";
    case DType::Float8E4M3FN:
      return "float8_e4m3fn";
    case DType::Float8E4M3FNUZ:
      return "float8_e4m3fnuz";
    case DType::Float8E5M2:
      return "float8_e5m2";
    case DType::Float8E5M2FNUZ:
      return "float8_e5m2fnuz";
    case DType::UInt4:
      return "uint4";
    case DType::Int4:
      return "int4";
    case DType::Float4E2M1:
      return "float4_e2m1fn";
    case DType::Float8E8M0:
      return "float8_e8m0fnu";
    case DType::UInt2:
      return "uint2";
    case DType::Int2:
      return "int2";
    case DType::Float6E2M3:
      return "float6_e2m3fn";
    case DType::Float6E3M2:
      return "float6_e3m2fn";
    default:
      return nullptr;
  }
}

constexpr int32_t kMaxDTypeCode = static_cast<int32_t>(DType::Float6E3M2);

py::dtype numpy_dtype(DType t) {
  if (const char* name = ml_dtypes_name(t)) {
    return py::dtype::from_args(py::module_::import("ml_dtypes").attr(name));
  }
  return py::dtype(dtype_name(t));  // the engine's other names are numpy's
}

DType dtype_from_numpy(const py::dtype& dt, const std::string& what) {
  const std::string name = py::str(dt.attr("name"));
  for (int32_t code = 1; code <= kMaxDTypeCode; ++code) {
    const DType t = static_cast<DType>(code);
    if (!dtype_is_supported(code)) continue;
    const char* ml = ml_dtypes_name(t);
    if (name == (ml ? std::string(ml) : dtype_name(t))) return t;
  }
  throw py::type_error(what + " has numpy dtype " + name + ", which checkpoints do not support");
}

DType dtype_from_engine_name(const std::string& name, const std::string& what) {
  for (int32_t code = 1; code <= kMaxDTypeCode; ++code) {
    if (dtype_is_supported(code) && dtype_name(static_cast<DType>(code)) == name) {
      return static_cast<DType>(code);
    }
  }
  throw py::value_error(what + " has unknown dtype name '" + name + "'");
}

py::object tensor_to_py(const Tensor& t, bool nominal) {
  if (nominal) {
    return py::make_tuple("nominal", dtype_name(t.dtype()), py::tuple(py::cast(t.shape())));
  }
  std::vector<py::ssize_t> shape(t.shape().begin(), t.shape().end());
  py::array out(numpy_dtype(t.dtype()), shape);
  if (t.nbytes()) std::memcpy(out.mutable_data(), t.raw(), t.nbytes());
  return py::object(std::move(out));  // explicit: C++17 and C++20 both move
}

Tensor tensor_from_py(const py::handle& obj, bool nominal, const std::string& what) {
  if (nominal && py::isinstance<py::tuple>(obj)) {
    const auto tup = obj.cast<py::tuple>();
    if (tup.size() != 3 || !py::isinstance<py::str>(tup[0]) ||
        tup[0].cast<std::string>() != "nominal") {
      throw py::value_error(what + ": a nominal tensor is a tuple (\"nominal\", dtype, shape)");
    }
    const DType dtype = dtype_from_engine_name(tup[1].cast<std::string>(), what);
    Shape shape = tup[2].cast<Shape>();
    return Tensor(std::make_shared<Storage>(), dtype, std::move(shape));
  }
  if (!py::isinstance<py::array>(obj)) {
    throw py::type_error(what + " must be a numpy array" +
                         (nominal ? std::string(" or a (\"nominal\", dtype, shape) tuple") : "") +
                         ", got " +
                         std::string(py::str(py::type::handle_of(obj).attr("__name__"))));
  }
  const auto numpy = py::module_::import("numpy");
  // Not ascontiguousarray: it turns 0-d arrays into 1-d ones.
  const py::array arr = numpy.attr("asarray")(obj, py::arg("order") = "C");
  const DType dtype = dtype_from_numpy(arr.dtype(), what);
  Shape shape(arr.shape(), arr.shape() + arr.ndim());
  if (nominal) return Tensor(std::make_shared<Storage>(), dtype, std::move(shape));
  if (static_cast<size_t>(arr.itemsize()) != dtype_size(dtype)) {
    throw py::type_error(what + " has " + std::to_string(arr.itemsize()) +
                         "-byte elements, expected " + std::to_string(dtype_size(dtype)) + " for " +
                         dtype_name(dtype));
  }
  Tensor t = Tensor::empty(dtype, shape);
  if (t.nbytes()) std::memcpy(t.raw(), arr.data(), t.nbytes());
  return t;
}

py::dict tensors_to_py(const std::map<std::string, Tensor>& tensors, bool nominal) {
  py::dict d;
  for (const auto& [name, t] : tensors) d[py::str(name)] = tensor_to_py(t, nominal);
  return d;
}

std::map<std::string, Tensor> tensors_from_py(const py::handle& obj, bool nominal,
                                              const std::string& what) {
  if (!py::isinstance<py::dict>(obj)) throw py::type_error(what + " must be a dict");
  std::map<std::string, Tensor> out;
  for (const auto& [key, value] : obj.cast<py::dict>()) {
    const std::string name = py::cast<std::string>(key);
    out.emplace(name, tensor_from_py(value, nominal, what + "['" + name + "']"));
  }
  return out;
}

void check_keys(const py::dict& d, const std::set<std::string>& allowed, const std::string& what) {
  for (const auto& item : d) {
    const std::string key = py::str(item.first);
    if (!allowed.count(key)) {
      std::string list;
      for (const auto& k : allowed) list += (list.empty() ? "" : ", ") + k;
      throw py::key_error(what + " has unknown key '" + key + "' (expected: " + list + ")");
    }
  }
}

py::dict checkpoint_to_py(const CheckpointData& c) {
  py::dict d;
  d["trainable"] = tensors_to_py(c.trainable, c.is_nominal);
  d["frozen"] = tensors_to_py(c.frozen, c.is_nominal);
  d["is_nominal"] = c.is_nominal;
  py::dict groups;
  for (const auto& [name, g] : c.optimizer_groups) {
    py::dict group, states;
    group["step"] = g.step;
    group["initial_learning_rate"] = g.initial_learning_rate;
    for (const auto& [param, moments] : g.param_states) {
      states[py::str(param)] = tensors_to_py(moments, false);
    }
    group["param_states"] = states;
    groups[py::str(name)] = group;
  }
  d["optimizer_groups"] = groups;
  py::dict properties;
  for (const auto& [name, value] : c.properties) {
    std::visit([&](const auto& v) { properties[py::str(name)] = v; }, value);
  }
  d["properties"] = properties;
  return d;
}

PropertyValue property_from_py(const py::handle& v, const std::string& what) {
  if (py::isinstance<py::bool_>(v)) {
    throw py::type_error(what + " is a bool; properties are int, float or str");
  }
  if (py::isinstance<py::int_>(v)) {
    try {
      return v.cast<int64_t>();
    } catch (const py::cast_error&) {
      throw py::value_error(what + " = " + std::string(py::str(v)) + " does not fit in int64");
    }
  }
  if (py::isinstance<py::float_>(v)) return static_cast<float>(v.cast<double>());
  if (py::isinstance<py::str>(v)) return v.cast<std::string>();
  throw py::type_error(what + " has type " +
                       std::string(py::str(py::type::handle_of(v).attr("__name__"))) +
                       "; properties are int, float or str");
}

CheckpointData checkpoint_from_py(const py::dict& d) {
  check_keys(d, {"trainable", "frozen", "is_nominal", "optimizer_groups", "properties"},
             "checkpoint state");
  CheckpointData c;
  if (d.contains("is_nominal")) c.is_nominal = d["is_nominal"].cast<bool>();
  if (d.contains("trainable"))
    c.trainable = tensors_from_py(d["trainable"], c.is_nominal, "trainable");
  if (d.contains("frozen")) c.frozen = tensors_from_py(d["frozen"], c.is_nominal, "frozen");
  if (d.contains("optimizer_groups")) {
    for (const auto& [key, value] : d["optimizer_groups"].cast<py::dict>()) {
      const std::string name = py::cast<std::string>(key);
      const std::string what = "optimizer_groups['" + name + "']";
      const auto group = value.cast<py::dict>();
      check_keys(group, {"step", "initial_learning_rate", "param_states"}, what);
      for (const char* k : {"step", "initial_learning_rate", "param_states"}) {
        if (!group.contains(k)) throw py::key_error(what + " has no '" + std::string(k) + "'");
      }
      OptimizerGroupState g;
      g.step = group["step"].cast<int64_t>();
      g.initial_learning_rate = static_cast<float>(group["initial_learning_rate"].cast<double>());
      for (const auto& [pkey, moments] : group["param_states"].cast<py::dict>()) {
        const std::string param = py::cast<std::string>(pkey);
        g.param_states[param] =
            tensors_from_py(moments, false, what + "['param_states']['" + param + "']");
      }
      c.optimizer_groups.emplace(name, std::move(g));
    }
  }
  if (d.contains("properties")) {
    for (const auto& [key, value] : d["properties"].cast<py::dict>()) {
      const std::string name = py::cast<std::string>(key);
      c.properties[name] = property_from_py(value, "property '" + name + "'");
    }
  }
  return c;
}

}  // namespace checkpoint_py

using namespace checkpoint_py;

void bind_checkpoint(py::module_& m) {
  m.def(
      "_checkpoint_parse",
      [](py::bytes data, const std::string& origin) {
        CheckpointData c;
        {
          const std::string_view view(data);
          py::gil_scoped_release release;
          c = parse_checkpoint(view.data(), view.size(), origin);
        }
        return checkpoint_to_py(c);
      },
      py::arg("data"), py::arg("origin"),
      "Parses checkpoint bytes into a dict (see csrc/python/checkpoint_bindings.cpp).");
  m.def(
      "_checkpoint_serialize",
      [](const py::dict& state, bool include_optimizer_state) {
        const CheckpointData c = checkpoint_from_py(state);
        std::string bytes;
        {
          py::gil_scoped_release release;
          bytes = serialize_checkpoint(c, include_optimizer_state);
        }
        return py::bytes(bytes);
      },
      py::arg("state"), py::arg("include_optimizer_state"),
      "Checkpoint bytes of a state dict as _checkpoint_parse returns.");
}

}  // namespace ortmodule
