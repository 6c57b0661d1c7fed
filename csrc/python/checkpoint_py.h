// numpy <-> engine conversions of checkpoint contents (checkpoint_bindings.cpp), shared with
// the training bindings.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <string>

#include "training/checkpoint.h"

namespace ortmodule {
namespace checkpoint_py {

// A numpy array (or, when nominal, a ("nominal", dtype, shape) tuple).
pybind11::object tensor_to_py(const Tensor& t, bool nominal);
Tensor tensor_from_py(const pybind11::handle& obj, bool nominal, const std::string& what);
PropertyValue property_from_py(const pybind11::handle& v, const std::string& what);
pybind11::dict checkpoint_to_py(const CheckpointData& c);
CheckpointData checkpoint_from_py(const pybind11::dict& d);

}  // namespace checkpoint_py
}  // namespace ortmodule
