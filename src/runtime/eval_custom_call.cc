// custom-call: weft's attention targets (the convention is documented in
// hlo/custom_call_targets.h). The backend_config JSON is parsed once per
// instruction. Block masks are shared by all the attention calls of an
// executor: a call whose mask, mask tensors' bytes, query offset, blocks and
// dimensions equal those of one of the last few masks built reuses it, so a
// layer loop's forward and backward calls classify their document mask once
// a step, not once per instruction. When q, k and v are all bf16 the bf16
// kernels run on them as they are (out, dout, dq, dk, dv bf16; lse, dlse
// f32); otherwise the f32 kernels run on f32 copies of whatever is not f32.
// A result of another type than the kernel writes goes through scratch of
// the kernel's type and is converted; compiler::InstructionScratch reserves
// the same scratch.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "executor_eval.h"
#include "weft/base/error.h"
#include "weft/kernels/attention.h"
#include "weft/kernels/mod_expr.h"

namespace weft::runtime::exec {
namespace {

using kernels::AttentionDims;
using kernels::AttentionOptions;
using kernels::BlockMask;

struct AttentionCallConfig {
  std::string mask, score_mod;
  std::vector<std::string> mask_tensors, score_tensors;
  std::optional<float> scale;
  std::optional<bool> enable_gqa;
  bool has_dlse = false;
  int64_t q_block = kernels::kDefaultBlockSize, kv_block = kernels::kDefaultBlockSize;
  bool backward = false;
  // Operand positions.
  int64_t first_tensor = 3;
  // Query-sequence sharding (spmd_partitioner.h): the operand holding this
  // device's first global query position, or -1; and the global query
  // length, past which the rows are padding (-1: no padding).
  int64_t q_offset_operand = -1;
  int64_t global_q_len = -1;
};

AttentionCallConfig ParseConfig(const HloInstruction& instr) {
  AttentionCallConfig c;
  c.backward = instr.attrs().custom_call_target == kFlexAttentionBackwardTarget;
  const std::string& text = instr.attrs().backend_config;
  nlohmann::json j = nlohmann::json::object();
  if (!text.empty()) {
    // Our own words, never the JSON library's message.
    j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    WEFT_CHECK(!j.is_discarded(),
               "backend_config is not valid JSON (numbers must fit a double, strings be "
               "quoted): {}",
               text);
  }
  WEFT_CHECK(j.is_object(), "backend_config must be a JSON object, got {}", text);
  static const std::set<std::string> known = {
      "mask",     "score_mod", "mask_tensors", "score_tensors",    "scale",       "enable_gqa",
      "has_dlse", "q_block",   "kv_block",     "q_offset_operand", "global_q_len"};
  for (const auto& [key, value] : j.items()) {
    WEFT_CHECK(known.count(key),
               "backend_config has unknown key '{}'; known keys: mask, "
               "score_mod, mask_tensors, score_tensors, scale, enable_gqa, has_dlse, q_block, "
               "kv_block, q_offset_operand, global_q_len",
               key);
  }
  // Each key's type is checked here, so no JSON library exception (and no
  // library text) reaches the user.
  auto expect = [&](const char* key, bool ok, std::string_view want) {
    if (ok) return;
    std::string got = j[key].dump();
    if (got.size() > 60) got = got.substr(0, 57) + "...";
    Fail("backend_config key \"{}\" must be {}, got {}", key, want, got);
  };
  auto string_of = [&](const char* key) -> std::string {
    if (!j.contains(key)) return "";
    expect(key, j[key].is_string(), "a string");
    return j[key].get<std::string>();
  };
  auto names_of = [&](const char* key) -> std::vector<std::string> {
    if (!j.contains(key)) return {};
    const nlohmann::json& v = j[key];
    expect(key,
           v.is_array() && std::all_of(v.begin(), v.end(),
                                       [](const nlohmann::json& e) { return e.is_string(); }),
           "a list of names (strings)");
    return v.get<std::vector<std::string>>();
  };
  auto bool_of = [&](const char* key, bool fallback) {
    if (!j.contains(key)) return fallback;
    expect(key, j[key].is_boolean(), "true or false");
    return j[key].get<bool>();
  };
  auto int_of = [&](const char* key, int64_t fallback) {
    if (!j.contains(key)) return fallback;
    const nlohmann::json& v = j[key];
    expect(key,
           v.is_number_integer() &&
               (!v.is_number_unsigned() || v.get<uint64_t>() <= uint64_t{INT64_MAX}),
           "an integer that fits in 64 bits");
    return v.get<int64_t>();
  };
  c.mask = string_of("mask");
  c.score_mod = string_of("score_mod");
  c.mask_tensors = names_of("mask_tensors");
  c.score_tensors = names_of("score_tensors");
  if (j.contains("scale")) {
    expect("scale", j["scale"].is_number(), "a number");
    c.scale = j["scale"].get<float>();
  }
  if (j.contains("enable_gqa")) c.enable_gqa = bool_of("enable_gqa", false);
  c.has_dlse = bool_of("has_dlse", false);
  c.q_block = int_of("q_block", kernels::kDefaultBlockSize);
  c.kv_block = int_of("kv_block", kernels::kDefaultBlockSize);
  c.q_offset_operand = int_of("q_offset_operand", -1);
  c.global_q_len = int_of("global_q_len", -1);
  WEFT_CHECK(c.mask_tensors.empty() || !c.mask.empty(), "mask_tensors given without a mask");
  WEFT_CHECK(c.score_tensors.empty() || !c.score_mod.empty(),
             "score_tensors given without a score_mod");
  c.first_tensor = c.backward ? (c.has_dlse ? 7 : 6) : 3;
  const int64_t tensors_end = c.first_tensor + static_cast<int64_t>(c.mask_tensors.size()) +
                              static_cast<int64_t>(c.score_tensors.size());
  // The query offset, when present, is the last operand.
  WEFT_CHECK(c.q_offset_operand == -1 || c.q_offset_operand == tensors_end,
             "\"q_offset_operand\" must be {} (the operand after the named tensors), got {}",
             tensors_end, c.q_offset_operand);
  WEFT_CHECK(c.global_q_len == -1 || c.q_offset_operand >= 0,
             "\"global_q_len\" is given without a \"q_offset_operand\"");
  const int64_t expected = tensors_end + (c.q_offset_operand >= 0 ? 1 : 0);
  WEFT_CHECK(instr.operand_count() == expected,
             "{} takes {} operands ({}{} mask tensors, {} score tensors{}), got {}",
             instr.attrs().custom_call_target, expected,
             c.backward
                 ? (c.has_dlse ? "q, k, v, out, lse, dout, dlse, " : "q, k, v, out, lse, dout, ")
                 : "q, k, v, ",
             c.mask_tensors.size(), c.score_tensors.size(),
             c.q_offset_operand >= 0 ? ", the query offset" : "", instr.operand_count());
  return c;
}

// The dims of the attention from the operand shapes, checked.
AttentionDims DimsOf(const HloInstruction& instr) {
  const Shape& q = instr.operand(0)->shape();
  const Shape& k = instr.operand(1)->shape();
  const Shape& v = instr.operand(2)->shape();
  WEFT_CHECK(
      q.IsArray() && k.IsArray() && v.IsArray() && q.rank() == 4 && k.rank() == 4 && v.rank() == 4,
      "q, k, v must be [B, H, S, D] arrays, got {}, {}, {}", q.ToString(), k.ToString(),
      v.ToString());
  AttentionDims d;
  d.batch = q.dimensions(0);
  d.q_heads = q.dimensions(1);
  d.q_len = q.dimensions(2);
  d.head_dim = q.dimensions(3);
  d.kv_heads = k.dimensions(1);
  d.kv_len = k.dimensions(2);
  d.value_dim = v.dimensions(3);
  WEFT_CHECK(k.dimensions(0) == d.batch && v.dimensions(0) == d.batch &&
                 k.dimensions(3) == d.head_dim && v.dimensions(1) == d.kv_heads &&
                 v.dimensions(2) == d.kv_len,
             "q {}, k {}, v {} do not fit [B,Hq,Sq,D], [B,Hkv,Skv,D], [B,Hkv,Skv,Dv]", q.ToString(),
             k.ToString(), v.ToString());
  return d;
}

bool UsesIdentifier(const std::string& text, const std::string& name) {
  return kernels::RenameIdentifiers(text, {{name, name + "_"}}) != text;
}

kernels::IndexTensor ToIndexTensor(const HostTensor& t) {
  kernels::IndexTensor out;
  out.shape = t.dimensions();
  out.values.resize(static_cast<size_t>(t.element_count()));
  for (int64_t i = 0; i < t.element_count(); ++i) {
    out.values[i] = LoadAsInt(t.element_type(), t.raw_data(), i);
  }
  return out;
}

kernels::ValueTensor ToValueTensor(const HostTensor& t) {
  kernels::ValueTensor out;
  out.shape = t.dimensions();
  out.values.resize(static_cast<size_t>(t.element_count()));
  for (int64_t i = 0; i < t.element_count(); ++i) {
    out.values[i] = static_cast<float>(LoadAsDouble(t.element_type(), t.raw_data(), i));
  }
  return out;
}

// Tensors of zeros shaped like the operands, to check expressions statically.
template <typename Tensor>
std::map<std::string, Tensor> Placeholders(const HloInstruction& instr,
                                           const std::vector<std::string>& names, int64_t first) {
  std::map<std::string, Tensor> out;
  for (size_t i = 0; i < names.size(); ++i) {
    Tensor t;
    t.shape = instr.operand(first + static_cast<int64_t>(i))->shape().dimensions();
    t.values.resize(static_cast<size_t>(t.numel()));
    out[names[i]] = std::move(t);
  }
  return out;
}

kernels::MaskModPtr MakeMask(const AttentionCallConfig& c, const EvalArgs* args,
                             const HloInstruction& instr) {
  if (c.mask.empty()) return nullptr;
  std::map<std::string, kernels::IndexTensor> tensors;
  if (args == nullptr) {
    tensors = Placeholders<kernels::IndexTensor>(instr, c.mask_tensors, c.first_tensor);
  } else {
    for (size_t i = 0; i < c.mask_tensors.size(); ++i) {
      tensors[c.mask_tensors[i]] = ToIndexTensor(args->array(c.first_tensor + i));
    }
  }
  return kernels::MaskExpr(c.mask, std::move(tensors));
}

kernels::ScoreModPtr MakeScoreMod(const AttentionCallConfig& c, const EvalArgs* args,
                                  const HloInstruction& instr) {
  if (c.score_mod.empty()) return nullptr;
  const int64_t first = c.first_tensor + static_cast<int64_t>(c.mask_tensors.size());
  std::map<std::string, kernels::ValueTensor> tensors;
  if (args == nullptr) {
    tensors = Placeholders<kernels::ValueTensor>(instr, c.score_tensors, first);
  } else {
    for (size_t i = 0; i < c.score_tensors.size(); ++i) {
      tensors[c.score_tensors[i]] = ToValueTensor(args->array(first + i));
    }
  }
  return kernels::ScoreExpr(c.score_mod, std::move(tensors));
}

// Query-sequence sharding: this device's query rows at their global
// positions. Local row i is global row offset + i; rows at or past the
// global length are the padding of an uneven last tile and attend to nothing
// (so they never read a mask tensor out of range, and their gradients are 0).
class GlobalRowsMask final : public kernels::MaskMod {
 public:
  GlobalRowsMask(kernels::MaskModPtr inner, int64_t offset, int64_t global_len)
      : inner_(std::move(inner)), offset_(offset), global_len_(global_len) {}

  void Evaluate(int64_t b, int64_t h, int64_t q0, int64_t nq, int64_t k0, int64_t nk, uint8_t* keep,
                int64_t ld) const override {
    const int64_t valid = ValidRows(q0, nq);
    if (inner_ != nullptr) {
      if (valid > 0) inner_->Evaluate(b, h, q0 + offset_, valid, k0, nk, keep, ld);
    } else {
      for (int64_t i = 0; i < valid; ++i) std::fill_n(keep + i * ld, nk, uint8_t{1});
    }
    for (int64_t i = valid; i < nq; ++i) std::fill_n(keep + i * ld, nk, uint8_t{0});
  }
  std::optional<kernels::BlockKind> Classify(int64_t b, int64_t h, int64_t q0, int64_t q1,
                                             int64_t k0, int64_t k1) const override {
    const int64_t valid = ValidRows(q0, q1 - q0);
    if (valid == 0) return kernels::BlockKind::kEmpty;
    std::optional<kernels::BlockKind> kind = kernels::BlockKind::kFull;
    if (inner_ != nullptr) {
      kind = inner_->Classify(b, h, q0 + offset_, q0 + offset_ + valid, k0, k1);
    }
    // Some rows are padding: the block is at most partial.
    if (valid < q1 - q0 && kind == kernels::BlockKind::kFull) return kernels::BlockKind::kPartial;
    return kind;
  }
  void Validate(int64_t batch, int64_t heads, int64_t q_len, int64_t kv_len) const override {
    if (inner_ != nullptr) inner_->Validate(batch, heads, global_len_, kv_len);
  }
  std::string ToString() const override {
    return fmt::format("{} (query rows from {}, of {})", inner_ ? inner_->ToString() : "true",
                       offset_, global_len_);
  }
  std::map<std::string, kernels::IndexTensor> Tensors() const override {
    return inner_ ? inner_->Tensors() : std::map<std::string, kernels::IndexTensor>{};
  }

 private:
  int64_t ValidRows(int64_t q0, int64_t nq) const {
    return std::clamp<int64_t>(global_len_ - (q0 + offset_), 0, nq);
  }
  kernels::MaskModPtr inner_;
  int64_t offset_, global_len_;
};

// The score mod at global query positions; padding rows keep their raw score
// (they are masked).
class GlobalRowsScoreMod final : public kernels::ScoreMod {
 public:
  GlobalRowsScoreMod(kernels::ScoreModPtr inner, int64_t offset, int64_t global_len)
      : inner_(std::move(inner)), offset_(offset), global_len_(global_len) {}

  void Apply(int64_t b, int64_t h, int64_t q0, int64_t nq, int64_t k0, int64_t nk, float* scores,
             int64_t ld, float* grad) const override {
    const int64_t valid = std::clamp<int64_t>(global_len_ - (q0 + offset_), 0, nq);
    if (valid > 0) inner_->Apply(b, h, q0 + offset_, valid, k0, nk, scores, ld, grad);
    if (grad == nullptr) return;
    for (int64_t i = valid; i < nq; ++i) std::fill_n(grad + i * ld, nk, 1.0f);
  }
  void Validate(int64_t batch, int64_t heads, int64_t q_len, int64_t kv_len) const override {
    inner_->Validate(batch, heads, global_len_, kv_len);
  }
  std::string ToString() const override { return inner_->ToString(); }
  std::map<std::string, kernels::ValueTensor> Tensors() const override { return inner_->Tensors(); }

 private:
  kernels::ScoreModPtr inner_;
  int64_t offset_, global_len_;
};

// The global query length: given by the partitioner, else the rows end here.
int64_t GlobalQueryLength(const AttentionCallConfig& c, const AttentionDims& d, int64_t offset) {
  return c.global_q_len >= 0 ? c.global_q_len : offset + d.q_len;
}

// `mask` (may be null) seen from this device's query rows; `mask` itself when
// the rows are the global ones.
kernels::MaskModPtr AtGlobalRows(kernels::MaskModPtr mask, const AttentionCallConfig& c,
                                 const AttentionDims& d, int64_t offset) {
  const int64_t global_len = GlobalQueryLength(c, d, offset);
  if (c.q_offset_operand < 0 || (offset == 0 && global_len >= d.q_len)) return mask;
  return std::make_shared<GlobalRowsMask>(std::move(mask), offset, global_len);
}

kernels::ScoreModPtr AtGlobalRows(kernels::ScoreModPtr score, const AttentionCallConfig& c,
                                  const AttentionDims& d, int64_t offset) {
  if (score == nullptr || c.q_offset_operand < 0 || offset == 0) return score;
  return std::make_shared<GlobalRowsScoreMod>(std::move(score), offset,
                                              GlobalQueryLength(c, d, offset));
}

BlockMask MakeBlockMask(const AttentionCallConfig& c, const AttentionDims& d,
                        kernels::MaskModPtr mask) {
  if (mask == nullptr) return BlockMask::Dense(d.q_len, d.kv_len, c.q_block, c.kv_block);
  // A mask that ignores b or h is classified once for all batch rows / heads.
  const int64_t batch = UsesIdentifier(c.mask, "b") ? d.batch : 1;
  const int64_t heads = UsesIdentifier(c.mask, "h") ? d.q_heads : 1;
  return BlockMask::Create(std::move(mask), batch, heads, d.q_len, d.kv_len, c.q_block, c.kv_block);
}

// The block masks an executor's attention calls built last, each with what
// it was built from. Looked up by comparing in place (a hit allocates
// nothing); the oldest of kCapacity is replaced.
class BlockMaskCache {
 public:
  const BlockMask& Get(const AttentionCallConfig& c, const AttentionDims& d, int64_t q_offset,
                       const EvalArgs& args, const HloInstruction& instr) {
    const int64_t global_len = GlobalQueryLength(c, d, q_offset);
    for (Entry& e : entries_) {
      if (e.Matches(c, d, q_offset, global_len, args)) return *e.mask;
    }
    Entry e;
    e.mask_text = c.mask;
    e.tensor_names = c.mask_tensors;
    e.sharded_rows = c.q_offset_operand >= 0;
    e.q_offset = q_offset;
    e.global_len = global_len;
    e.q_block = c.q_block;
    e.kv_block = c.kv_block;
    e.dims = d;
    for (size_t i = 0; i < c.mask_tensors.size(); ++i) {
      const HostTensor& t = args.array(c.first_tensor + static_cast<int64_t>(i));
      e.tensor_shapes.push_back(t.shape());
      const auto* data = static_cast<const std::byte*>(t.raw_data());
      e.tensor_bytes.insert(e.tensor_bytes.end(), data, data + t.byte_size());
    }
    e.mask = std::make_unique<BlockMask>(
        MakeBlockMask(c, d, AtGlobalRows(MakeMask(c, &args, instr), c, d, q_offset)));
    if (entries_.size() >= kCapacity) entries_.erase(entries_.begin());
    entries_.push_back(std::move(e));
    return *entries_.back().mask;
  }

 private:
  static constexpr size_t kCapacity = 4;
  struct Entry {
    std::string mask_text;
    std::vector<std::string> tensor_names;
    std::vector<Shape> tensor_shapes;
    std::vector<std::byte> tensor_bytes;
    bool sharded_rows = false;
    int64_t q_offset = 0, global_len = 0, q_block = 0, kv_block = 0;
    AttentionDims dims;
    std::unique_ptr<BlockMask> mask;

    bool Matches(const AttentionCallConfig& c, const AttentionDims& d, int64_t offset,
                 int64_t global, const EvalArgs& args) const {
      if (mask_text != c.mask || tensor_names != c.mask_tensors ||
          sharded_rows != (c.q_offset_operand >= 0) || q_offset != offset || global_len != global ||
          q_block != c.q_block || kv_block != c.kv_block || dims.batch != d.batch ||
          dims.q_heads != d.q_heads || dims.kv_heads != d.kv_heads || dims.q_len != d.q_len ||
          dims.kv_len != d.kv_len) {
        return false;
      }
      size_t at = 0;
      for (size_t i = 0; i < tensor_shapes.size(); ++i) {
        const HostTensor& t = args.array(c.first_tensor + static_cast<int64_t>(i));
        const size_t bytes = static_cast<size_t>(t.byte_size());
        if (t.shape() != tensor_shapes[i] || at + bytes > tensor_bytes.size() ||
            std::memcmp(tensor_bytes.data() + at, t.raw_data(), bytes) != 0) {
          return false;
        }
        at += bytes;
      }
      return true;
    }
  };
  std::vector<Entry> entries_;
};

// The attention kernels' element type for q, k, v, out, dout and dq, dk, dv:
// bf16 when q, k and v all are (FlexAttention*Bf16), else f32. lse and dlse
// are f32 either way.
PrimitiveType KernelType(const EvalArgs& args) {
  for (int64_t i = 0; i < 3; ++i) {
    if (args.array(i).element_type() != PrimitiveType::kBF16) return PrimitiveType::kF32;
  }
  return PrimitiveType::kBF16;
}

// `t` in element type `type`: itself, or a converted copy.
HostTensor As(const HostTensor& t, PrimitiveType type, EvalArgs& args) {
  if (t.element_type() == type) return t;
  HostTensor out = args.ctx().Allocate(t.shape().WithElementType(type));
  ConvertElements(t.element_type(), t.raw_data(), type, out.mutable_raw_data(), t.element_count());
  return out;
}

const bf16* Bf16(const HostTensor& t) { return reinterpret_cast<const bf16*>(t.data<uint16_t>()); }
bf16* MutableBf16(const HostTensor& t) {
  return reinterpret_cast<bf16*>(t.mutable_data<uint16_t>());
}

// A copy of t ([B, H, S, ...], query rows on dim 2) whose rows from `valid`
// on hold `value` (in t's element type).
HostTensor WithPaddingRows(const HostTensor& t, int64_t valid, float value, EvalArgs& args) {
  HostTensor copy = args.ctx().Allocate(t.shape());
  std::byte* dst = static_cast<std::byte*>(copy.mutable_raw_data());
  std::memcpy(dst, t.raw_data(), static_cast<size_t>(t.byte_size()));
  const std::vector<int64_t>& dims = t.dimensions();
  const int64_t rows = dims[2];
  int64_t inner = 1;
  for (size_t i = 3; i < dims.size(); ++i) inner *= dims[i];
  const int64_t row_bytes = inner * ByteWidth(t.element_type());
  // One padding row.
  std::vector<std::byte> pad(static_cast<size_t>(row_bytes));
  const std::vector<float> values(static_cast<size_t>(inner), value);
  ConvertElements(PrimitiveType::kF32, values.data(), t.element_type(), pad.data(), inner);
  for (int64_t outer = 0; outer < dims[0] * dims[1]; ++outer) {
    for (int64_t r = valid; r < rows; ++r) {
      std::memcpy(dst + (outer * rows + r) * row_bytes, pad.data(), pad.size());
    }
  }
  return copy;
}

// One result leaf and the buffer the kernel writes it to: the leaf itself
// when the kernel writes its type, else scratch of the kernel's type that
// Finish converts into the leaf.
struct KernelResult {
  HostTensor out, kernel;
  HostTensor Finish() {
    if (kernel.raw_data() != out.raw_data()) {
      ConvertElements(kernel.element_type(), kernel.raw_data(), out.element_type(),
                      out.mutable_raw_data(), out.element_count());
    }
    return out;
  }
};

// The instruction's result leaves (`leaves`) and the kernel's buffers for
// them (of `kernel_types`). Every leaf is allocated before any scratch, so
// no scratch request takes a later leaf's place (EvalContext::Allocate gives
// a request of the next leaf's size that leaf's buffer).
std::vector<KernelResult> AllocateResults(const std::vector<Shape>& leaves,
                                          const std::vector<PrimitiveType>& kernel_types,
                                          EvalArgs& args) {
  std::vector<KernelResult> r(leaves.size());
  for (size_t i = 0; i < leaves.size(); ++i) r[i].out = args.ctx().Allocate(leaves[i]);
  for (size_t i = 0; i < leaves.size(); ++i) {
    r[i].kernel = leaves[i].element_type() == kernel_types[i]
                      ? r[i].out
                      : args.ctx().Allocate(leaves[i].WithElementType(kernel_types[i]));
  }
  return r;
}

void CheckFloat(const Shape& s, std::string_view what) {
  WEFT_CHECK(s.IsArray() && IsFloatingPoint(s.element_type()), "{} must be a float array, got {}",
             what, s.ToString());
}

}  // namespace

void CheckCustomCall(const HloInstruction& instr) {
  const std::string& target = instr.attrs().custom_call_target;
  WEFT_CHECK(target == kFlexAttentionTarget || target == kFlexAttentionBackwardTarget,
             "custom_call_target \"{}\" is not supported; the executor runs \"{}\" and \"{}\"",
             target, kFlexAttentionTarget, kFlexAttentionBackwardTarget);
  AttentionCallConfig c = ParseConfig(instr);
  const AttentionDims d = DimsOf(instr);
  for (int64_t i = 0; i < 3; ++i) CheckFloat(instr.operand(i)->shape(), "q, k and v");
  const Shape& shape = instr.shape();
  const Shape out_shape(PrimitiveType::kF32, {d.batch, d.q_heads, d.q_len, d.value_dim});
  const Shape lse_shape(PrimitiveType::kF32, {d.batch, d.q_heads, d.q_len});
  auto same_dims = [](const Shape& s, const Shape& want) {
    return s.IsArray() && IsFloatingPoint(s.element_type()) && s.dimensions() == want.dimensions();
  };
  if (!c.backward) {
    const bool ok =
        same_dims(shape, out_shape) || (shape.IsTuple() && shape.tuple_shapes().size() == 2 &&
                                        same_dims(shape.tuple_shapes(0), out_shape) &&
                                        same_dims(shape.tuple_shapes(1), lse_shape));
    WEFT_CHECK(ok, "{} must return (out {}, lse {}) or out alone (any float type), not {}", target,
               out_shape.ToString(), lse_shape.ToString(), shape.ToString());
  } else {
    WEFT_CHECK(same_dims(instr.operand(3)->shape(), out_shape) &&
                   same_dims(instr.operand(4)->shape(), lse_shape) &&
                   same_dims(instr.operand(5)->shape(), out_shape) &&
                   (!c.has_dlse || same_dims(instr.operand(6)->shape(), lse_shape)),
               "{} takes out {}, lse {}, dout {}{}; got {}, {}, {}", target, out_shape.ToString(),
               lse_shape.ToString(), out_shape.ToString(),
               c.has_dlse ? fmt::format(", dlse {}", lse_shape.ToString()) : "",
               instr.operand(3)->shape().ToString(), instr.operand(4)->shape().ToString(),
               instr.operand(5)->shape().ToString());
    const bool ok = shape.IsTuple() && shape.tuple_shapes().size() == 3 &&
                    same_dims(shape.tuple_shapes(0), instr.operand(0)->shape()) &&
                    same_dims(shape.tuple_shapes(1), instr.operand(1)->shape()) &&
                    same_dims(shape.tuple_shapes(2), instr.operand(2)->shape());
    WEFT_CHECK(ok, "{} must return (dq, dk, dv) shaped like q, k, v, not {}", target,
               shape.ToString());
  }
  for (size_t i = 0; i < c.mask_tensors.size(); ++i) {
    const Shape& s = instr.operand(c.first_tensor + static_cast<int64_t>(i))->shape();
    WEFT_CHECK(s.IsArray() && !IsFloatingPoint(s.element_type()),
               "mask tensor '{}' must be an integer array, got {}", c.mask_tensors[i],
               s.ToString());
  }
  // Parse the expressions against placeholder tensors: bad text fails here.
  kernels::MaskModPtr mask = MakeMask(c, nullptr, instr);
  kernels::ScoreModPtr score = MakeScoreMod(c, nullptr, instr);
  int64_t q_len = d.q_len;
  if (c.q_offset_operand >= 0) {
    const Shape& s = instr.operand(c.q_offset_operand)->shape();
    WEFT_CHECK(s.IsScalar() && IsInteger(s.element_type()),
               "the query offset (operand {}) must be an integer scalar, got {}",
               c.q_offset_operand, s.ToString());
    if (c.global_q_len >= 0) q_len = c.global_q_len;
  }
  if (mask != nullptr) mask->Validate(d.batch, d.q_heads, q_len, d.kv_len);
  if (score != nullptr) score->Validate(d.batch, d.q_heads, q_len, d.kv_len);
  AttentionOptions options;
  options.enable_gqa = c.enable_gqa.value_or(d.q_heads != d.kv_heads);
  kernels::ValidateAttention(d, options);
}

namespace {

// The forward: out in the kernel's type (KernelType), lse in f32 (scratch
// when the call returns out alone).
Value RunForward(const HloInstruction& instr, const AttentionDims& d,
                 const AttentionOptions& options, EvalArgs& args) {
  const PrimitiveType f32 = PrimitiveType::kF32, type = KernelType(args);
  const Shape& shape = instr.shape();
  std::vector<KernelResult> r =
      shape.IsTuple()
          ? AllocateResults({shape.tuple_shapes(0), shape.tuple_shapes(1)}, {type, f32}, args)
          : AllocateResults({shape}, {type}, args);
  const HostTensor lse = shape.IsTuple()
                             ? r[1].kernel
                             : args.ctx().Allocate(Shape(f32, {d.batch, d.q_heads, d.q_len}));
  const HostTensor q = As(args.array(0), type, args), k = As(args.array(1), type, args),
                   v = As(args.array(2), type, args);
  if (type == PrimitiveType::kBF16) {
    kernels::FlexAttentionForwardBf16(d, Bf16(q), Bf16(k), Bf16(v), options,
                                      MutableBf16(r[0].kernel), lse.mutable_data<float>());
  } else {
    kernels::FlexAttentionForward(d, q.data<float>(), k.data<float>(), v.data<float>(), options,
                                  r[0].kernel.mutable_data<float>(), lse.mutable_data<float>());
  }
  Value out(r[0].Finish());
  if (shape.IsTuple()) out.push_back(r[1].Finish());
  return out;
}

// The backward: q, k, v, out, dout and dq, dk, dv in the kernel's type, lse
// and dlse in f32. Query rows from `valid_rows` on are padding.
Value RunBackward(const HloInstruction& instr, const AttentionCallConfig& c, const AttentionDims& d,
                  const AttentionOptions& options, int64_t valid_rows, EvalArgs& args) {
  const PrimitiveType f32 = PrimitiveType::kF32, type = KernelType(args);
  const Shape& shape = instr.shape();
  std::vector<KernelResult> r =
      AllocateResults({shape.tuple_shapes(0), shape.tuple_shapes(1), shape.tuple_shapes(2)},
                      {type, type, type}, args);
  HostTensor q = As(args.array(0), type, args);
  const HostTensor k = As(args.array(1), type, args), v = As(args.array(2), type, args);
  HostTensor out = As(args.array(3), type, args), lse = As(args.array(4), f32, args),
             dout = As(args.array(5), type, args), dlse;
  if (c.has_dlse) dlse = As(args.array(6), f32, args);
  // Padding rows are masked, but the backward's GEMMs still multiply their
  // zero probabilities with whatever the rows hold: make them clean zeros
  // (lse -inf, as for any fully masked row), so garbage never reaches dk, dv.
  if (valid_rows < d.q_len) {
    q = WithPaddingRows(q, valid_rows, 0.0f, args);
    out = WithPaddingRows(out, valid_rows, 0.0f, args);
    lse = WithPaddingRows(lse, valid_rows, -std::numeric_limits<float>::infinity(), args);
    dout = WithPaddingRows(dout, valid_rows, 0.0f, args);
    if (c.has_dlse) dlse = WithPaddingRows(dlse, valid_rows, 0.0f, args);
  }
  const float* dlse_data = c.has_dlse ? dlse.data<float>() : nullptr;
  if (type == PrimitiveType::kBF16) {
    kernels::FlexAttentionBackwardBf16(d, Bf16(q), Bf16(k), Bf16(v), Bf16(out), lse.data<float>(),
                                       Bf16(dout), dlse_data, options, MutableBf16(r[0].kernel),
                                       MutableBf16(r[1].kernel), MutableBf16(r[2].kernel));
  } else {
    kernels::FlexAttentionBackward(
        d, q.data<float>(), k.data<float>(), v.data<float>(), out.data<float>(), lse.data<float>(),
        dout.data<float>(), dlse_data, options, r[0].kernel.mutable_data<float>(),
        r[1].kernel.mutable_data<float>(), r[2].kernel.mutable_data<float>());
  }
  Value result;
  result.reserve(3);
  for (int i = 0; i < 3; ++i) result.push_back(r[i].Finish());
  return result;
}

}  // namespace

Value EvalCustomCall(const HloInstruction& instr, EvalArgs& args) {
  AttentionCallConfig* config = args.cache().Find<AttentionCallConfig>(instr);
  if (config == nullptr) {
    config = &args.cache().Put(instr, std::make_shared<AttentionCallConfig>(ParseConfig(instr)));
  }
  const AttentionCallConfig& c = *config;
  const AttentionDims d = DimsOf(instr);

  int64_t q_offset = 0;
  if (c.q_offset_operand >= 0) {
    const HostTensor& t = args.array(c.q_offset_operand);
    q_offset = LoadAsInt(t.element_type(), t.raw_data(), 0);
  }

  const BlockMask* block_mask =
      &args.cache().Shared<BlockMaskCache>().Get(c, d, q_offset, args, instr);
  kernels::ScoreModPtr score = AtGlobalRows(MakeScoreMod(c, &args, instr), c, d, q_offset);
  AttentionOptions options;
  options.scale = c.scale;
  options.score_mod = score.get();
  options.block_mask = block_mask;
  options.enable_gqa = c.enable_gqa.value_or(d.q_heads != d.kv_heads);

  if (!c.backward) return RunForward(instr, d, options, args);
  // The query rows past the global length (padding), if any.
  const int64_t valid_rows =
      c.q_offset_operand < 0
          ? d.q_len
          : std::clamp<int64_t>(GlobalQueryLength(c, d, q_offset) - q_offset, 0, d.q_len);
  return RunBackward(instr, c, d, options, valid_rows, args);
}

}  // namespace weft::runtime::exec
