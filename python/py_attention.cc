// flex_attention, flex_attention_backward, create_block_mask and the
// BlockMask object. Every input is checked here, before any kernel runs, with
// a message that says what to pass instead; the kernels run without the GIL.
#include <fmt/core.h>

#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "py_common.h"
#include "weft/base/bfloat16.h"
#include "weft/base/memory.h"
#include "weft/kernels/attention.h"

namespace weft::python {

namespace {

using kernels::AttentionDims;
using kernels::AttentionOptions;
using kernels::BlockMask;

// A checked float32 C-contiguous input array.
struct FloatArray {
  py::array_t<float> array;
  std::vector<int64_t> shape;
  const float* data() const { return array.data(); }
};

FloatArray CheckFloatArray(py::handle obj, const char* name, size_t rank, const char* layout) {
  if (!py::isinstance<py::array>(obj)) {
    throw py::value_error(
        fmt::format("{} must be a numpy float32 array {}, got an object of type {}; pass "
                    "np.asarray({}, dtype=np.float32)",
                    name, layout, TypeName(obj), name));
  }
  auto array = py::reinterpret_borrow<py::array>(obj);
  if (!py::isinstance<py::array_t<float>>(array)) {
    throw py::value_error(
        fmt::format("{} has dtype {}; pass float32 arrays, e.g. {}.astype(np.float32)", name,
                    py::str(array.dtype()).cast<std::string>(), name));
  }
  std::vector<int64_t> shape = ShapeOf(array);
  if (shape.size() != rank) {
    throw py::value_error(fmt::format("{} must have {} dimensions {}, got shape {}", name, rank,
                                      layout, ShapeString(shape)));
  }
  const int flags = array.flags();
  if (!(flags & py::array::c_style)) {
    throw py::value_error(
        fmt::format("{} is not C-contiguous (a transposed or sliced view?); pass "
                    "np.ascontiguousarray({})",
                    name, name));
  }
  if (!(flags & py::detail::npy_api::NPY_ARRAY_ALIGNED_)) {
    throw py::value_error(fmt::format(
        "{} is not aligned for float32; pass np.require({}, np.float32, 'CA')", name, name));
  }
  return FloatArray{py::reinterpret_borrow<py::array_t<float>>(array), std::move(shape)};
}

void ExpectShape(const FloatArray& a, const char* name, const std::vector<int64_t>& expected,
                 const char* layout) {
  if (a.shape != expected) {
    throw py::value_error(fmt::format("{} has shape {} but must be {} = {}", name,
                                      ShapeString(a.shape), layout, ShapeString(expected)));
  }
}

const kernels::ScoreMod* ScoreModArg(py::handle obj) {
  if (obj.is_none()) return nullptr;
  if (py::isinstance<PyScoreMod>(obj)) return obj.cast<const PyScoreMod&>().mod.get();
  if (py::isinstance<PyMaskMod>(obj)) {
    throw py::value_error(fmt::format(
        "score_mod is a mask ({}); masks go in block_mask=weft.create_block_mask(mask, B, H, "
        "Q_LEN, KV_LEN)",
        obj.cast<const PyMaskMod&>().mod->ToString()));
  }
  if (PyCallable_Check(obj.ptr())) {
    throw py::value_error(
        "score_mod is a Python callable; weft score mods are values: use a built-in "
        "(weft.softcap(cap), weft.alibi(slopes), weft.relative_bias(table)) or write it as an "
        "expression, e.g. weft.score_expr('score + 0.5 * (kv_idx - q_idx)')");
  }
  throw py::value_error(fmt::format(
      "score_mod must be a weft score mod (weft.softcap, weft.alibi, weft.relative_bias, "
      "weft.score_expr) or None, got {}",
      TypeName(obj)));
}

const BlockMask* BlockMaskArg(py::handle obj, const AttentionDims& dims) {
  if (obj.is_none()) return nullptr;
  if (py::isinstance<PyMaskMod>(obj)) {
    throw py::value_error(fmt::format(
        "block_mask is a mask ({}), not a BlockMask; build one with "
        "weft.create_block_mask(mask, B, H, {}, {}) (B or H may be 1 to broadcast) and reuse "
        "it across calls",
        obj.cast<const PyMaskMod&>().mod->ToString(), dims.q_len, dims.kv_len));
  }
  if (!py::isinstance<PyBlockMask>(obj)) {
    throw py::value_error(fmt::format(
        "block_mask must be a weft.BlockMask from weft.create_block_mask(...) or None, got {}",
        TypeName(obj)));
  }
  const BlockMask* mask = obj.cast<const PyBlockMask&>().mask.get();
  if (mask->q_len() != dims.q_len || mask->kv_len() != dims.kv_len) {
    throw py::value_error(fmt::format(
        "block_mask was built for Q_LEN={}, KV_LEN={} but q has Sq={} and k/v have Skv={}; "
        "build it with weft.create_block_mask(mask, B, H, {}, {})",
        mask->q_len(), mask->kv_len(), dims.q_len, dims.kv_len, dims.q_len, dims.kv_len));
  }
  if (mask->batch() != 1 && mask->batch() != dims.batch) {
    throw py::value_error(
        fmt::format("block_mask has B={} but q has batch {}; build it with B=1 (broadcast) or B={}",
                    mask->batch(), dims.batch, dims.batch));
  }
  if (mask->heads() != 1 && mask->heads() != dims.q_heads) {
    throw py::value_error(fmt::format(
        "block_mask has H={} but q has {} heads; build it with H=1 (broadcast) or H={} (the "
        "number of query heads)",
        mask->heads(), dims.q_heads, dims.q_heads));
  }
  return mask;
}

// q, k, v -> dims, with every mismatch named.
AttentionDims CheckQkv(const FloatArray& q, const FloatArray& k, const FloatArray& v,
                       bool enable_gqa) {
  AttentionDims dims;
  dims.batch = q.shape[0];
  dims.q_heads = q.shape[1];
  dims.q_len = q.shape[2];
  dims.head_dim = q.shape[3];
  dims.kv_heads = k.shape[1];
  dims.kv_len = k.shape[2];
  dims.value_dim = v.shape[3];
  if (k.shape[0] != dims.batch || v.shape[0] != dims.batch) {
    throw py::value_error(
        fmt::format("q, k and v must have the same batch size B (dim 0), got q {}, k {}, v {}",
                    ShapeString(q.shape), ShapeString(k.shape), ShapeString(v.shape)));
  }
  if (k.shape[3] != dims.head_dim) {
    throw py::value_error(
        fmt::format("q and k must have the same head dim D (dim 3), got q {} and k {}",
                    ShapeString(q.shape), ShapeString(k.shape)));
  }
  if (v.shape[1] != dims.kv_heads || v.shape[2] != dims.kv_len) {
    throw py::value_error(fmt::format(
        "k and v must have the same heads and length [B, Hkv, Skv, :], got k {} and v {}",
        ShapeString(k.shape), ShapeString(v.shape)));
  }
  if (dims.q_heads != dims.kv_heads) {
    if (!enable_gqa) {
      throw py::value_error(fmt::format(
          "q has {} heads but k/v have {}; pass enable_gqa=True for grouped-query attention "
          "(or repeat k/v to {} heads)",
          dims.q_heads, dims.kv_heads, dims.q_heads));
    }
    if (dims.kv_heads == 0 || dims.q_heads % dims.kv_heads != 0) {
      throw py::value_error(fmt::format(
          "grouped-query attention needs the {} query heads to be a multiple of the {} kv "
          "heads",
          dims.q_heads, dims.kv_heads));
    }
  }
  if (dims.head_dim > kernels::kMaxHeadDim || dims.value_dim > kernels::kMaxHeadDim) {
    throw py::value_error(fmt::format("head dims D={} and Dv={} must be at most {}", dims.head_dim,
                                      dims.value_dim, kernels::kMaxHeadDim));
  }
  return dims;
}

AttentionOptions MakeOptions(const AttentionDims& dims, py::handle score_mod, py::handle block_mask,
                             std::optional<double> scale, bool enable_gqa) {
  AttentionOptions options;
  if (scale) {
    if (!std::isfinite(*scale)) {
      throw py::value_error(fmt::format("scale must be a finite number, got {}", *scale));
    }
    options.scale = static_cast<float>(*scale);
  }
  options.score_mod = ScoreModArg(score_mod);
  options.block_mask = BlockMaskArg(block_mask, dims);
  options.enable_gqa = enable_gqa;
  if (options.score_mod) {
    options.score_mod->Validate(dims.batch, dims.q_heads, dims.q_len, dims.kv_len);
  }
  kernels::ValidateAttention(dims, options);
  return options;
}

bool IsInteger(py::handle obj);
int64_t Int64Arg(py::handle obj, std::string_view what);

// precision="f32" or "bf16": true for bf16.
bool Bf16Precision(const std::string& precision) {
  if (precision == "bf16" || precision == "bfloat16") return true;
  if (precision == "f32" || precision == "float32") return false;
  throw py::value_error(
      fmt::format("precision must be \"f32\" or \"bf16\", got \"{}\"", precision));
}

// kernel_options (FlexAttention's name) -> a forced AttentionConfig.
std::optional<kernels::AttentionConfig> KernelOptionsArg(py::handle obj) {
  if (obj.is_none()) return std::nullopt;
  if (!py::isinstance<py::dict>(obj)) {
    throw py::value_error(fmt::format(
        "kernel_options must be a dict such as {{\"BLOCK_M\": 64, \"BLOCK_N\": 64}}, got {}",
        TypeName(obj)));
  }
  kernels::AttentionConfig config;
  for (auto item : py::reinterpret_borrow<py::dict>(obj)) {
    const std::string key = py::str(item.first).cast<std::string>();
    py::handle value = item.second;
    int64_t* tile = key == "BLOCK_M"       ? &config.forward.block_m
                    : key == "BLOCK_N"     ? &config.forward.block_n
                    : key == "BLOCK_M_BWD" ? &config.backward.block_m
                    : key == "BLOCK_N_BWD" ? &config.backward.block_n
                                           : nullptr;
    if (tile != nullptr) {
      const std::string what = fmt::format("kernel_options[\"{}\"]", key);
      if (!IsInteger(value) || Int64Arg(value, what) <= 0) {
        throw py::value_error(fmt::format("{} must be a positive int, got {}", what,
                                          py::repr(value).cast<std::string>()));
      }
      *tile = Int64Arg(value, what);
    } else if (key == "BACKWARD_SPLIT") {
      const std::string v = py::str(value).cast<std::string>();
      if (v == "fused") {
        config.split = kernels::BackwardSplit::kFused;
      } else if (v == "split") {
        config.split = kernels::BackwardSplit::kSplit;
      } else if (v != "auto") {
        throw py::value_error(fmt::format(
            "kernel_options[\"BACKWARD_SPLIT\"] must be \"fused\", \"split\" or \"auto\", got "
            "\"{}\"",
            v));
      }
    } else if (key == "ISA") {
      config.isa = py::str(value).cast<std::string>();
    } else {
      throw py::value_error(
          fmt::format("kernel_options has an unknown key \"{}\"; known keys: BLOCK_M, BLOCK_N, "
                      "BLOCK_M_BWD, BLOCK_N_BWD, BACKWARD_SPLIT, ISA",
                      key));
    }
  }
  return config;
}

// x rounded to bfloat16 (the bf16 path's storage), as a vector.
std::vector<bf16> ToBf16(const FloatArray& x) {
  const float* data = x.data();
  std::vector<bf16> y(static_cast<size_t>(x.array.size()));
  for (size_t i = 0; i < y.size(); ++i) y[i] = bf16(data[i]);
  return y;
}

void FromBf16(const std::vector<bf16>& x, float* out) {
  for (size_t i = 0; i < x.size(); ++i) out[i] = static_cast<float>(x[i]);
}

py::array_t<float> NewArray(std::vector<int64_t> shape) {
  return py::array_t<float>(std::vector<py::ssize_t>(shape.begin(), shape.end()));
}

py::object Forward(py::object q_obj, py::object k_obj, py::object v_obj, py::object score_mod,
                   py::object block_mask, std::optional<double> scale, bool enable_gqa,
                   bool return_lse, const std::string& precision, py::object kernel_options) {
  const bool use_bf16 = Bf16Precision(precision);
  const FloatArray q = CheckFloatArray(q_obj, "q", 4, "[B, Hq, Sq, D]");
  const FloatArray k = CheckFloatArray(k_obj, "k", 4, "[B, Hkv, Skv, D]");
  const FloatArray v = CheckFloatArray(v_obj, "v", 4, "[B, Hkv, Skv, Dv]");
  const AttentionDims dims = CheckQkv(q, k, v, enable_gqa);
  AttentionOptions options = MakeOptions(dims, score_mod, block_mask, scale, enable_gqa);
  options.config = KernelOptionsArg(kernel_options);

  py::array_t<float> out = NewArray({dims.batch, dims.q_heads, dims.q_len, dims.value_dim});
  py::array_t<float> lse = NewArray({dims.batch, dims.q_heads, dims.q_len});
  float* out_data = out.mutable_data();
  float* lse_data = lse.mutable_data();
  if (use_bf16) {
    std::vector<bf16> qh = ToBf16(q), kh = ToBf16(k), vh = ToBf16(v);
    std::vector<bf16> outh(static_cast<size_t>(out.size()));
    {
      py::gil_scoped_release release;
      kernels::FlexAttentionForwardBf16(dims, qh.data(), kh.data(), vh.data(), options, outh.data(),
                                        lse_data);
    }
    FromBf16(outh, out_data);
  } else {
    py::gil_scoped_release release;
    kernels::FlexAttentionForward(dims, q.data(), k.data(), v.data(), options, out_data, lse_data);
  }
  if (return_lse) return py::make_tuple(out, lse);
  return out;
}

py::tuple Backward(py::object q_obj, py::object k_obj, py::object v_obj, py::object out_obj,
                   py::object lse_obj, py::object dout_obj, py::object score_mod,
                   py::object block_mask, std::optional<double> scale, bool enable_gqa,
                   py::object dlse_obj, const std::string& precision, py::object kernel_options) {
  const bool use_bf16 = Bf16Precision(precision);
  const FloatArray q = CheckFloatArray(q_obj, "q", 4, "[B, Hq, Sq, D]");
  const FloatArray k = CheckFloatArray(k_obj, "k", 4, "[B, Hkv, Skv, D]");
  const FloatArray v = CheckFloatArray(v_obj, "v", 4, "[B, Hkv, Skv, Dv]");
  const AttentionDims dims = CheckQkv(q, k, v, enable_gqa);
  const std::vector<int64_t> out_shape = {dims.batch, dims.q_heads, dims.q_len, dims.value_dim};
  const std::vector<int64_t> lse_shape = {dims.batch, dims.q_heads, dims.q_len};
  const FloatArray out = CheckFloatArray(out_obj, "out", 4, "[B, Hq, Sq, Dv]");
  ExpectShape(out, "out", out_shape, "[B, Hq, Sq, Dv]");
  const FloatArray lse = CheckFloatArray(lse_obj, "lse", 3, "[B, Hq, Sq]");
  ExpectShape(lse, "lse", lse_shape, "[B, Hq, Sq]");
  const FloatArray dout = CheckFloatArray(dout_obj, "dout", 4, "[B, Hq, Sq, Dv]");
  ExpectShape(dout, "dout", out_shape, "[B, Hq, Sq, Dv]");
  std::optional<FloatArray> dlse;
  if (!dlse_obj.is_none()) {
    dlse = CheckFloatArray(dlse_obj, "dlse", 3, "[B, Hq, Sq]");
    ExpectShape(*dlse, "dlse", lse_shape, "[B, Hq, Sq]");
  }
  AttentionOptions options = MakeOptions(dims, score_mod, block_mask, scale, enable_gqa);
  options.config = KernelOptionsArg(kernel_options);

  py::array_t<float> dq = NewArray(q.shape);
  py::array_t<float> dk = NewArray(k.shape);
  py::array_t<float> dv = NewArray(v.shape);
  float* dq_data = dq.mutable_data();
  float* dk_data = dk.mutable_data();
  float* dv_data = dv.mutable_data();
  const float* dlse_data = dlse ? dlse->data() : nullptr;
  if (use_bf16) {
    std::vector<bf16> qh = ToBf16(q), kh = ToBf16(k), vh = ToBf16(v), outh = ToBf16(out),
                      douth = ToBf16(dout);
    std::vector<bf16> dqh(qh.size()), dkh(kh.size()), dvh(vh.size());
    {
      py::gil_scoped_release release;
      kernels::FlexAttentionBackwardBf16(dims, qh.data(), kh.data(), vh.data(), outh.data(),
                                         lse.data(), douth.data(), dlse_data, options, dqh.data(),
                                         dkh.data(), dvh.data());
    }
    FromBf16(dqh, dq_data);
    FromBf16(dkh, dk_data);
    FromBf16(dvh, dv_data);
  } else {
    py::gil_scoped_release release;
    kernels::FlexAttentionBackward(dims, q.data(), k.data(), v.data(), out.data(), lse.data(),
                                   dout.data(), dlse_data, options, dq_data, dk_data, dv_data);
  }
  return py::make_tuple(dq, dk, dv);
}

// An integer argument: Python or numpy ints (anything with __index__), not bools.
bool IsInteger(py::handle obj) {
  return PyIndex_Check(obj.ptr()) && !py::isinstance<py::bool_>(obj) &&
         !(py::isinstance<py::array>(obj) && py::reinterpret_borrow<py::array>(obj).ndim() > 0);
}

// The value of an integer argument (IsInteger), `what` naming it:
// ValueError when it does not fit in 64 bits (pybind11's cast said "Unable
// to cast Python instance to C++ type" without the argument's name).
int64_t Int64Arg(py::handle obj, std::string_view what) {
  py::object index = py::reinterpret_steal<py::object>(PyNumber_Index(obj.ptr()));
  if (!index) throw py::error_already_set();
  int overflow = 0;
  const long long value = PyLong_AsLongLongAndOverflow(index.ptr(), &overflow);
  if (value == -1 && PyErr_Occurred()) throw py::error_already_set();
  if (overflow != 0) {
    throw py::value_error(fmt::format("{} = {} does not fit in 64 bits; give a smaller int", what,
                                      py::repr(obj).cast<std::string>()));
  }
  return value;
}

// A size argument of create_block_mask / create_mask: a positive int.
int64_t SizeArg(py::handle obj, std::string_view function, std::string_view name) {
  if (!IsInteger(obj)) {
    throw py::value_error(fmt::format("{}: {} must be an int, got {}", function, name,
                                      py::repr(obj).cast<std::string>()));
  }
  const int64_t value = Int64Arg(obj, fmt::format("{}: {}", function, name));
  if (value <= 0) {
    throw py::value_error(fmt::format("{} needs positive sizes, got {}={}", function, name, value));
  }
  return value;
}

// BLOCK_SIZE: None, an int, or a (q_block, kv_block) pair.
std::pair<int64_t, int64_t> BlockSizeArg(py::handle obj) {
  if (obj.is_none()) return {kernels::kDefaultBlockSize, kernels::kDefaultBlockSize};
  int64_t q_block = 0, kv_block = 0;
  if (IsInteger(obj)) {
    q_block = kv_block = Int64Arg(obj, "BLOCK_SIZE");
  } else if ((py::isinstance<py::tuple>(obj) || py::isinstance<py::list>(obj)) &&
             py::len(obj) == 2 && IsInteger(obj[py::int_(0)]) && IsInteger(obj[py::int_(1)])) {
    q_block = Int64Arg(obj[py::int_(0)], "BLOCK_SIZE[0]");
    kv_block = Int64Arg(obj[py::int_(1)], "BLOCK_SIZE[1]");
  } else {
    throw py::value_error(fmt::format(
        "BLOCK_SIZE must be an int or a (Q_BLOCK_SIZE, KV_BLOCK_SIZE) pair of ints, got {}",
        py::repr(obj).cast<std::string>()));
  }
  if (q_block <= 0 || kv_block <= 0) {
    throw py::value_error(
        fmt::format("BLOCK_SIZE must be positive, got ({}, {})", q_block, kv_block));
  }
  return {q_block, kv_block};
}

PyBlockMask CreateBlockMask(py::object mask_obj, py::handle b_obj, py::handle h_obj,
                            py::handle q_obj, py::handle kv_obj, py::object block_size) {
  const auto [q_block, kv_block] = BlockSizeArg(block_size);
  const int64_t batch = SizeArg(b_obj, "create_block_mask", "B");
  const int64_t heads = SizeArg(h_obj, "create_block_mask", "H");
  const int64_t q_len = SizeArg(q_obj, "create_block_mask", "Q_LEN");
  const int64_t kv_len = SizeArg(kv_obj, "create_block_mask", "KV_LEN");
  if (mask_obj.is_none()) {
    return PyBlockMask{
        std::make_shared<const BlockMask>(BlockMask::Dense(q_len, kv_len, q_block, kv_block))};
  }
  kernels::MaskModPtr mod = MaskModArg(mask_obj, "mask_mod");
  mod->Validate(batch, heads, q_len, kv_len);
  py::gil_scoped_release release;
  return PyBlockMask{std::make_shared<const BlockMask>(
      BlockMask::Create(std::move(mod), batch, heads, q_len, kv_len, q_block, kv_block))};
}

// [B, H, num_q_blocks, num_kv_blocks] of kinds: 0 empty, 1 partial, 2 full.
py::array_t<int32_t> BlockKinds(const BlockMask& mask) {
  const int64_t nq = mask.num_q_blocks(), nkv = mask.num_kv_blocks();
  py::array_t<int32_t> kinds(std::vector<py::ssize_t>{mask.batch(), mask.heads(), nq, nkv});
  int32_t* data = kinds.mutable_data();
  py::gil_scoped_release release;
  for (int64_t b = 0; b < mask.batch(); ++b) {
    for (int64_t h = 0; h < mask.heads(); ++h) {
      for (int64_t qb = 0; qb < nq; ++qb) {
        for (int64_t kb = 0; kb < nkv; ++kb) {
          *data++ = static_cast<int32_t>(mask.Kind(b, h, qb, kb));
        }
      }
    }
  }
  return kinds;
}

// The dense boolean mask [B, H, Q_LEN, KV_LEN], as torch's create_mask.
py::array CreateMask(py::object mask_obj, py::handle b_obj, py::handle h_obj, py::handle q_obj,
                     py::handle kv_obj) {
  const int64_t batch = SizeArg(b_obj, "create_mask", "B");
  const int64_t heads = SizeArg(h_obj, "create_mask", "H");
  const int64_t q_len = SizeArg(q_obj, "create_mask", "Q_LEN");
  const int64_t kv_len = SizeArg(kv_obj, "create_mask", "KV_LEN");
  // One byte per element: refused before allocating when the product
  // overflows or exceeds the machine's memory.
  const __int128 bytes = static_cast<__int128>(batch) * heads * q_len * kv_len;
  const int64_t memory = PhysicalMemoryBytes();
  if (bytes > std::numeric_limits<int64_t>::max() || (memory > 0 && bytes > memory)) {
    throw py::value_error(fmt::format(
        "create_mask: B={} x H={} x Q_LEN={} x KV_LEN={} is {:.3g} bytes of mask, more than this "
        "machine's {} of memory; use create_block_mask, which keeps blocks, not elements",
        batch, heads, q_len, kv_len, static_cast<double>(bytes), FormatBytes(memory)));
  }
  kernels::MaskModPtr mod = MaskModArg(mask_obj, "mask_mod");
  mod->Validate(batch, heads, q_len, kv_len);
  py::array_t<bool> dense(std::vector<py::ssize_t>{batch, heads, q_len, kv_len});
  static_assert(sizeof(bool) == sizeof(uint8_t));
  auto* data = reinterpret_cast<uint8_t*>(dense.mutable_data());
  {
    py::gil_scoped_release release;
    for (int64_t b = 0; b < batch; ++b) {
      for (int64_t h = 0; h < heads; ++h) {
        mod->Evaluate(b, h, 0, q_len, 0, kv_len, data + (b * heads + h) * q_len * kv_len, kv_len);
      }
    }
  }
  return dense;
}

}  // namespace

void RegisterAttention(py::module_& m) {
  py::class_<PyBlockMask>(m, "BlockMask",
                          "Which (query block, kv block) tiles need work: full (mask not "
                          "evaluated), partial (mask evaluated per element) or empty "
                          "(skipped). Build one with create_block_mask and reuse it.")
      .def("__repr__", [](const PyBlockMask& self) { return self.mask->ToString(); })
      .def_property_readonly(
          "shape",
          [](const PyBlockMask& self) {
            const BlockMask& mask = *self.mask;
            return py::make_tuple(mask.batch(), mask.heads(), mask.q_len(), mask.kv_len());
          },
          "(B, H, Q_LEN, KV_LEN); B or H is 1 when broadcast.")
      .def_property_readonly(
          "BLOCK_SIZE",
          [](const PyBlockMask& self) {
            return py::make_tuple(self.mask->q_block(), self.mask->kv_block());
          },
          "(Q_BLOCK_SIZE, KV_BLOCK_SIZE).")
      .def_property_readonly(
          "mask_mod",
          [](const PyBlockMask& self) -> py::object {
            if (!self.mask->mask_mod_ptr()) return py::none();
            return py::cast(PyMaskMod{self.mask->mask_mod_ptr()});
          },
          "The mask evaluated on partial blocks (None for a dense mask).")
      .def(
          "sparsity", [](const PyBlockMask& self) { return self.mask->Sparsity(); },
          "Percentage of blocks skipped (empty).")
      .def(
          "density", [](const PyBlockMask& self) { return self.mask->Density(); },
          "Fraction of blocks that need work (full or partial).")
      .def_property_readonly("num_full",
                             [](const PyBlockMask& self) { return self.mask->num_full(); })
      .def_property_readonly("num_partial",
                             [](const PyBlockMask& self) { return self.mask->num_partial(); })
      .def_property_readonly("num_empty",
                             [](const PyBlockMask& self) { return self.mask->num_empty(); })
      .def(
          "to_dense", [](const PyBlockMask& self) { return BlockKinds(*self.mask); },
          "int32 array [B, H, num_q_blocks, num_kv_blocks] of block kinds: 0 empty, 1 partial, "
          "2 full.");

  m.def("create_block_mask", &CreateBlockMask, py::arg("mask_mod"), py::arg("B"), py::arg("H"),
        py::arg("Q_LEN"), py::arg("KV_LEN"), py::arg("BLOCK_SIZE") = py::none(),
        "Classifies every (query block, kv block) of mask_mod for attention of these sizes. "
        "B or H may be 1 to broadcast over batch rows or heads. BLOCK_SIZE: an int or a "
        "(Q_BLOCK_SIZE, KV_BLOCK_SIZE) pair; default DEFAULT_BLOCK_SIZE.");
  m.def("create_mask", &CreateMask, py::arg("mask_mod"), py::arg("B"), py::arg("H"),
        py::arg("Q_LEN"), py::arg("KV_LEN"),
        "The mask as a dense bool array [B, H, Q_LEN, KV_LEN] (for inspection and tests).");
  m.def("flex_attention", &Forward, py::arg("q"), py::arg("k"), py::arg("v"),
        py::arg("score_mod") = py::none(), py::arg("block_mask") = py::none(),
        py::arg("scale") = py::none(), py::arg("enable_gqa") = false, py::arg("return_lse") = false,
        py::arg("precision") = "f32", py::arg("kernel_options") = py::none(),
        "softmax(score_mod(q @ k^T * scale) masked by block_mask) @ v.\n\n"
        "q [B, Hq, Sq, D], k [B, Hkv, Skv, D], v [B, Hkv, Skv, Dv]: float32, C-contiguous.\n"
        "scale defaults to 1/sqrt(D). enable_gqa allows Hq a multiple of Hkv. Returns out\n"
        "[B, Hq, Sq, Dv], or (out, lse) with lse [B, Hq, Sq] (natural log) when return_lse.\n"
        "A query row with every key masked gives out 0 and lse -inf.\n"
        "precision=\"bf16\" rounds q, k, v to bfloat16 and runs the bf16 kernels (float32\n"
        "accumulation); out holds bf16 values (as float32), lse stays float32.\n"
        "kernel_options forces a configuration: BLOCK_M, BLOCK_N (forward tiles), BLOCK_M_BWD,\n"
        "BLOCK_N_BWD (backward tiles), BACKWARD_SPLIT (fused/split/auto), ISA. Tiles must\n"
        "divide the block mask's blocks and fit the cache limit; else ValueError names the\n"
        "working set, the limit and the largest configuration that fits.");
  m.def("flex_attention_backward", &Backward, py::arg("q"), py::arg("k"), py::arg("v"),
        py::arg("out"), py::arg("lse"), py::arg("dout"), py::arg("score_mod") = py::none(),
        py::arg("block_mask") = py::none(), py::arg("scale") = py::none(),
        py::arg("enable_gqa") = false, py::arg("dlse") = py::none(), py::arg("precision") = "f32",
        py::arg("kernel_options") = py::none(),
        "Gradients (dq, dk, dv) of flex_attention given out and lse from the forward and the\n"
        "gradients dout [B, Hq, Sq, Dv] and optionally dlse [B, Hq, Sq] (gradient through\n"
        "the LSE). dk and dv are summed over each GQA group. Same options as the forward\n"
        "(precision=\"bf16\" also rounds out and dout to bfloat16).");
}

}  // namespace weft::python
