// Shared pieces of the `weft` Python module: the handle types Python sees,
// numpy conversions with error messages that say what to pass instead, and
// the registration functions of each binding file.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "weft/kernels/block_mask.h"
#include "weft/kernels/mask_mod.h"
#include "weft/kernels/mod_tensor.h"
#include "weft/kernels/score_mod.h"

namespace weft::python {

namespace py = pybind11;

// Python objects hold the C++ values by shared pointer: they are immutable,
// so one mask may be shared by several block masks and combinators.
struct PyMaskMod {
  kernels::MaskModPtr mod;
};
struct PyScoreMod {
  kernels::ScoreModPtr mod;
};
struct PyBlockMask {
  std::shared_ptr<const kernels::BlockMask> mask;
};

// The Python type name of obj ("list", "numpy.ndarray", ...).
std::string TypeName(py::handle obj);
// "(2, 4, 37, 16)".
std::string ShapeString(const std::vector<int64_t>& shape);
std::vector<int64_t> ShapeOf(const py::array& array);

// Any integer (or bool) array or nested list -> IndexTensor; raises
// ValueError naming `name` otherwise.
kernels::IndexTensor ToIndexTensor(py::handle obj, const std::string& name);
// Any float or integer array or nested list -> ValueTensor.
kernels::ValueTensor ToValueTensor(py::handle obj, const std::string& name);
// A 1-D list or array (a scalar counts as one element).
std::vector<int64_t> ToIndexVector(py::handle obj, const std::string& name);
std::vector<float> ToValueVector(py::handle obj, const std::string& name);

// The mask behind a Python argument; raises ValueError (naming `name`) for
// anything that is not a weft mask.
kernels::MaskModPtr MaskModArg(py::handle obj, const std::string& name);

void RegisterMods(py::module_& m);
void RegisterAttention(py::module_& m);

}  // namespace weft::python
