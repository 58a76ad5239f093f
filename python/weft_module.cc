// The `weft` Python module: flex attention over numpy arrays, with
// PyTorch FlexAttention's names (flex_attention, create_block_mask, and_masks,
// ...). This file defines the module, the error translation and the numpy
// conversions shared by the binding files (py_mods.cc, py_attention.cc).
#include <fmt/core.h>

#include <exception>

#include "py_common.h"
#include "weft/base/error.h"
#include "weft/kernels/attention.h"

namespace weft::python {

std::string TypeName(py::handle obj) {
  const PyTypeObject* type = Py_TYPE(obj.ptr());
  return type->tp_name;
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) s += ", ";
    s += std::to_string(shape[i]);
  }
  if (shape.size() == 1) s += ",";
  return s + ")";
}

std::vector<int64_t> ShapeOf(const py::array& array) {
  std::vector<int64_t> shape(static_cast<size_t>(array.ndim()));
  for (size_t i = 0; i < shape.size(); ++i) shape[i] = array.shape(static_cast<py::ssize_t>(i));
  return shape;
}

namespace {

// obj as a numpy array (lists are converted); ValueError when numpy cannot.
py::array AsArray(py::handle obj, const std::string& name, const char* expected) {
  if (obj.is_none()) throw py::value_error(fmt::format("{} is None; pass {}", name, expected));
  py::array array = py::array::ensure(obj);
  if (!array) {
    throw py::value_error(
        fmt::format("{} must be {}, got an object of type {}", name, expected, TypeName(obj)));
  }
  return array;
}

std::string DtypeName(const py::array& array) { return py::str(array.dtype()).cast<std::string>(); }

template <typename T>
kernels::ModTensor<T> CopyTensor(const py::array& array) {
  auto typed = py::array_t<T, py::array::c_style | py::array::forcecast>::ensure(array);
  if (!typed) throw py::error_already_set();
  kernels::ModTensor<T> tensor;
  tensor.shape = ShapeOf(typed);
  tensor.values.assign(typed.data(), typed.data() + typed.size());
  return tensor;
}

}  // namespace

kernels::IndexTensor ToIndexTensor(py::handle obj, const std::string& name) {
  py::array array = AsArray(obj, name, "an integer numpy array (int32 or int64)");
  const char kind = array.dtype().kind();
  if (kind != 'i' && kind != 'u' && kind != 'b') {
    throw py::value_error(
        fmt::format("{} has dtype {}; pass integers, e.g. np.asarray({}, dtype=np.int64)", name,
                    DtypeName(array), name));
  }
  return CopyTensor<int64_t>(array);
}

kernels::ValueTensor ToValueTensor(py::handle obj, const std::string& name) {
  py::array array = AsArray(obj, name, "a float numpy array (float32 or float64)");
  const char kind = array.dtype().kind();
  if (kind != 'f' && kind != 'i' && kind != 'u') {
    throw py::value_error(
        fmt::format("{} has dtype {}; pass real numbers, e.g. np.asarray({}, dtype=np.float32)",
                    name, DtypeName(array), name));
  }
  return CopyTensor<float>(array);
}

namespace {
template <typename T>
std::vector<T> Flatten1D(kernels::ModTensor<T> tensor, const std::string& name) {
  if (tensor.rank() > 1) {
    throw py::value_error(fmt::format("{} must be a 1-D list or array, got shape {}", name,
                                      ShapeString(tensor.shape)));
  }
  return std::move(tensor.values);
}
}  // namespace

std::vector<int64_t> ToIndexVector(py::handle obj, const std::string& name) {
  return Flatten1D(ToIndexTensor(obj, name), name);
}

std::vector<float> ToValueVector(py::handle obj, const std::string& name) {
  return Flatten1D(ToValueTensor(obj, name), name);
}

}  // namespace weft::python

PYBIND11_MODULE(weft, m) {
  namespace py = pybind11;
  m.doc() =
      "weft: flexible flash attention on the CPU over numpy float32 arrays.\n\n"
      "Mirrors PyTorch FlexAttention: flex_attention(q, k, v, score_mod, block_mask),\n"
      "create_block_mask(mask_mod, B, H, Q_LEN, KV_LEN), and_masks/or_masks, and\n"
      "built-in masks and score mods. Masks and score mods are values (built-ins or\n"
      "expressions written with mask_expr/score_expr), not Python callables.";

  m.attr("__version__") = WEFT_VERSION;

  // weft::Error is bad input (sizes, dtypes, expression syntax): ValueError.
  py::register_exception_translator([](std::exception_ptr error) {
    try {
      if (error) std::rethrow_exception(error);
    } catch (const weft::Error& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    }
  });

  m.attr("DEFAULT_BLOCK_SIZE") = weft::kernels::kDefaultBlockSize;
  m.attr("MAX_HEAD_DIM") = weft::kernels::kMaxHeadDim;
  weft::python::RegisterMods(m);
  weft::python::RegisterAttention(m);
}
