// Masks (mask_mod) and score mods as Python values: the built-ins,
// and_masks/or_masks, and the expression language (mask_expr, score_expr).
#include <fmt/core.h>

#include <algorithm>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "py_common.h"

namespace weft::python {

namespace {

using kernels::IndexTensor;
using kernels::ValueTensor;

template <typename T>
py::array_t<T> TensorToNumpy(const kernels::ModTensor<T>& tensor) {
  std::vector<py::ssize_t> shape(tensor.shape.begin(), tensor.shape.end());
  py::array_t<T> array(shape);
  std::copy(tensor.values.begin(), tensor.values.end(), array.mutable_data());
  return array;
}

template <typename T>
py::dict TensorsToDict(const std::map<std::string, kernels::ModTensor<T>>& tensors) {
  py::dict dict;
  for (const auto& [name, tensor] : tensors) dict[py::str(name)] = TensorToNumpy(tensor);
  return dict;
}

std::vector<kernels::MaskModPtr> MaskList(const py::args& masks, const char* function) {
  if (masks.empty()) {
    throw py::value_error(
        fmt::format("{}() needs at least one mask, e.g. weft.{}(weft.causal_mask(), "
                    "weft.sliding_window_mask(128, 0))",
                    function, function));
  }
  std::vector<kernels::MaskModPtr> list;
  for (size_t i = 0; i < masks.size(); ++i) {
    list.push_back(MaskModArg(masks[i], fmt::format("{}() argument {}", function, i + 1)));
  }
  return list;
}

std::map<std::string, IndexTensor> IndexTensors(const py::kwargs& kwargs) {
  std::map<std::string, IndexTensor> tensors;
  for (const auto& [key, value] : kwargs) {
    const auto name = key.cast<std::string>();
    tensors.emplace(name, ToIndexTensor(value, "mask_expr tensor '" + name + "'"));
  }
  return tensors;
}

std::map<std::string, ValueTensor> ValueTensors(const py::kwargs& kwargs) {
  std::map<std::string, ValueTensor> tensors;
  for (const auto& [key, value] : kwargs) {
    const auto name = key.cast<std::string>();
    tensors.emplace(name, ToValueTensor(value, "score_expr tensor '" + name + "'"));
  }
  return tensors;
}

// The one positional argument of mask_expr / score_expr. Taken from *args so
// that a tensor may be passed by any keyword name, "text" included.
std::string ExprText(const py::args& args, const char* function) {
  if (args.size() != 1 || !py::isinstance<py::str>(args[0])) {
    throw py::value_error(fmt::format(
        "{}() takes the expression text as its one positional argument and the tensors as "
        "keywords, e.g. weft.{}('seg[b, q_idx] == seg[b, kv_idx]', seg=ids)",
        function, function));
  }
  return args[0].cast<std::string>();
}

PyMaskMod Wrap(kernels::MaskModPtr mod) { return PyMaskMod{std::move(mod)}; }
PyScoreMod Wrap(kernels::ScoreModPtr mod) { return PyScoreMod{std::move(mod)}; }

// One element of a mask, evaluated the way the kernels do (a 1x1 tile).
bool EvaluateOne(const kernels::MaskMod& mod, int64_t b, int64_t h, int64_t q_idx, int64_t kv_idx) {
  if (b < 0 || h < 0 || q_idx < 0 || kv_idx < 0) {
    throw py::value_error(
        fmt::format("mask indices must be non-negative, got b={}, h={}, q_idx={}, kv_idx={}", b, h,
                    q_idx, kv_idx));
  }
  uint8_t keep = 0;
  mod.Evaluate(b, h, q_idx, 1, kv_idx, 1, &keep, 1);
  return keep != 0;
}

}  // namespace

kernels::MaskModPtr MaskModArg(py::handle obj, const std::string& name) {
  if (py::isinstance<PyMaskMod>(obj)) return obj.cast<const PyMaskMod&>().mod;
  if (py::isinstance<PyScoreMod>(obj)) {
    throw py::value_error(
        fmt::format("{} is a score mod ({}), not a mask; pass it as score_mod= to flex_attention",
                    name, obj.cast<const PyScoreMod&>().mod->ToString()));
  }
  if (PyCallable_Check(obj.ptr())) {
    throw py::value_error(fmt::format(
        "{} is a Python callable; weft masks are values: use a built-in "
        "(weft.causal_mask(), weft.sliding_window_mask(l, r), ...) or write the mask as an "
        "expression, e.g. weft.mask_expr('q_idx >= kv_idx')",
        name));
  }
  throw py::value_error(
      fmt::format("{} must be a weft mask (weft.causal_mask(), weft.mask_expr(...), ...), got {}",
                  name, TypeName(obj)));
}

void RegisterMods(py::module_& m) {
  py::class_<PyMaskMod>(m, "MaskMod",
                        "A mask_mod: which (b, h, q_idx, kv_idx) may attend. Build one with a "
                        "built-in, and_masks/or_masks (or & and |), or mask_expr.")
      .def("__repr__", [](const PyMaskMod& self) { return self.mod->ToString(); })
      .def_property_readonly(
          "tensors", [](const PyMaskMod& self) { return TensorsToDict(self.mod->Tensors()); },
          "The named integer tensors the expression refers to (copies), so that "
          "weft.mask_expr(str(mask), **mask.tensors) rebuilds the mask.")
      .def(
          "__call__",
          [](const PyMaskMod& self, int64_t b, int64_t h, int64_t q_idx, int64_t kv_idx) {
            return EvaluateOne(*self.mod, b, h, q_idx, kv_idx);
          },
          py::arg("b"), py::arg("h"), py::arg("q_idx"), py::arg("kv_idx"),
          "Evaluates the mask at one position: True if query q_idx may attend to key kv_idx. "
          "Indices must lie inside any tensors the mask captured.")
      .def(
          "__and__",
          [](const PyMaskMod& self, py::object other) {
            return Wrap(kernels::AndMasks({self.mod, MaskModArg(other, "right operand of &")}));
          },
          py::is_operator())
      .def(
          "__or__",
          [](const PyMaskMod& self, py::object other) {
            return Wrap(kernels::OrMasks({self.mod, MaskModArg(other, "right operand of |")}));
          },
          py::is_operator());

  py::class_<PyScoreMod>(m, "ScoreMod",
                         "A score_mod: a function of (score, b, h, q_idx, kv_idx) applied to "
                         "q.k * scale before the softmax. Build one with a built-in or "
                         "score_expr.")
      .def("__repr__", [](const PyScoreMod& self) { return self.mod->ToString(); })
      .def_property_readonly(
          "tensors", [](const PyScoreMod& self) { return TensorsToDict(self.mod->Tensors()); },
          "The named float tensors the expression refers to (copies), so that "
          "weft.score_expr(str(mod), **mod.tensors) rebuilds the score mod.");

  // Masks.
  m.def(
      "causal_mask", [](int64_t offset) { return Wrap(kernels::CausalMask(offset)); },
      py::arg("offset") = 0,
      "q_idx + offset >= kv_idx: causal attention, top-left aligned; offset shifts the "
      "diagonal (offset = KV_LEN - Q_LEN aligns it bottom-right).");
  m.def(
      "sliding_window_mask",
      [](int64_t left, int64_t right) { return Wrap(kernels::SlidingWindowMask(left, right)); },
      py::arg("left"), py::arg("right"),
      "q_idx - left <= kv_idx <= q_idx + right. sliding_window_mask(w, 0) is causal with a "
      "window of w past keys.");
  m.def(
      "prefix_lm_mask",
      [](py::object prefix_lengths) {
        return Wrap(kernels::PrefixLmMask(ToIndexVector(prefix_lengths, "prefix_lengths")));
      },
      py::arg("prefix_lengths"),
      "kv_idx < prefix_lengths[b] or q_idx >= kv_idx: bidirectional over each batch row's "
      "prefix, causal after it. prefix_lengths: one integer per batch row.");
  m.def(
      "document_mask",
      [](py::object q_segment_ids, py::object kv_segment_ids) {
        IndexTensor q_ids = ToIndexTensor(q_segment_ids, "q_segment_ids");
        IndexTensor kv_ids =
            kv_segment_ids.is_none() ? q_ids : ToIndexTensor(kv_segment_ids, "kv_segment_ids");
        if (q_ids.rank() != 2) {
          throw py::value_error(fmt::format(
              "q_segment_ids must have shape [B, Q_LEN], got shape {}", ShapeString(q_ids.shape)));
        }
        if (kv_ids.rank() != 2) {
          throw py::value_error(
              fmt::format("kv_segment_ids must have shape [B, KV_LEN], got "
                          "shape {}",
                          ShapeString(kv_ids.shape)));
        }
        if (q_ids.shape[0] != kv_ids.shape[0]) {
          throw py::value_error(fmt::format(
              "q_segment_ids has {} batch rows but kv_segment_ids has {}; both are [B, S] "
              "with the same B",
              q_ids.shape[0], kv_ids.shape[0]));
        }
        return Wrap(kernels::DocumentMask(std::move(q_ids), std::move(kv_ids)));
      },
      py::arg("q_segment_ids"), py::arg("kv_segment_ids") = py::none(),
      "q_segment_ids[b, q_idx] == kv_segment_ids[b, kv_idx]: attention within each packed "
      "document. Both are integer arrays [B, S]; kv_segment_ids defaults to q_segment_ids. "
      "Combine with causal_mask() via and_masks for causal packing.");
  m.def(
      "chunked_causal_mask", [](int64_t chunk) { return Wrap(kernels::ChunkedCausalMask(chunk)); },
      py::arg("chunk"), "q_idx // chunk == kv_idx // chunk and q_idx >= kv_idx.");
  m.def(
      "and_masks",
      [](py::args masks) { return Wrap(kernels::AndMasks(MaskList(masks, "and_masks"))); },
      "The conjunction of one or more masks: attend where every mask allows.");
  m.def(
      "or_masks",
      [](py::args masks) { return Wrap(kernels::OrMasks(MaskList(masks, "or_masks"))); },
      "The disjunction of one or more masks: attend where any mask allows.");
  m.def(
      "mask_expr",
      [](py::args args, py::kwargs tensors) {
        return Wrap(kernels::MaskExpr(ExprText(args, "mask_expr"), IndexTensors(tensors)));
      },
      "mask_expr(text, **tensors)\n\nA mask written as an expression over b, h, q_idx, kv_idx and "
      "named integer tensors "
      "passed as keywords, e.g. mask_expr('q_idx >= kv_idx && seg[b, q_idx] == seg[b, "
      "kv_idx]', seg=segment_ids).");

  // Score mods.
  m.def(
      "softcap", [](float cap) { return Wrap(kernels::Softcap(cap)); }, py::arg("cap"),
      "cap * tanh(score / cap), cap > 0 (Gemma-style logit soft-capping).");
  m.def(
      "alibi",
      [](py::object slopes) { return Wrap(kernels::Alibi(ToValueVector(slopes, "slopes"))); },
      py::arg("slopes"), "score + slopes[h] * (kv_idx - q_idx); one slope per query head.");
  m.def(
      "relative_bias",
      [](py::object table, std::optional<int64_t> kv_len) {
        std::vector<float> values = ToValueVector(table, "table");
        if (kv_len) return Wrap(kernels::RelativeBias(std::move(values), *kv_len));
        if (values.size() % 2 == 0) {
          throw py::value_error(fmt::format(
              "relative_bias: a table of {} entries cannot serve Q_LEN == KV_LEN (that needs "
              "2 * S - 1 entries); when Q_LEN != KV_LEN pass kv_len: "
              "weft.relative_bias(table, kv_len=KV_LEN)",
              values.size()));
        }
        return Wrap(kernels::RelativeBias(std::move(values)));
      },
      py::arg("table"), py::arg("kv_len") = py::none(),
      "score + table[q_idx - kv_idx + KV_LEN - 1]; the table has Q_LEN + KV_LEN - 1 entries. "
      "kv_len defaults to (len(table) + 1) / 2, i.e. Q_LEN == KV_LEN; pass it when they "
      "differ.");
  m.def(
      "score_expr",
      [](py::args args, py::kwargs tensors) {
        return Wrap(kernels::ScoreExpr(ExprText(args, "score_expr"), ValueTensors(tensors)));
      },
      "score_expr(text, **tensors)\n\nA score mod written as an expression over score, b, h, "
      "q_idx, kv_idx and named float "
      "tensors passed as keywords, e.g. score_expr('score + bias[h, q_idx - kv_idx + 127]', "
      "bias=table).");
}

}  // namespace weft::python
