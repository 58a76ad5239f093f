#include "weft/train/hf_checkpoint.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <system_error>
#include <vector>

#include "weft/base/atomic_file.h"
#include "weft/base/bfloat16.h"
#include "weft/base/crc32c.h"
#include "weft/base/data_files.h"
#include "weft/base/error.h"
#include "weft/data/tokenizer.h"
#include "weft/models/llama.h"
#include "weft/train/checkpoint.h"
#include "weft/train/sample.h"

namespace weft {
namespace {

namespace fs = std::filesystem;
using OrderedJson = nlohmann::ordered_json;
using runtime::HostTensor;

// Which RoPE permutation a projection's output rows take.
enum class Rope { kNone, kQueryHeads, kKeyValueHeads };

// A stacked weft layer weight and its per-layer Hugging Face name (after
// "model.layers.{i}."); `matrix`: [in, out] in weft, [out, in] in HF.
struct LayerMapping {
  std::string_view weft, hf;
  bool matrix;
  Rope rope;
};
constexpr LayerMapping kLayerMap[] = {
    {"layers.attention_norm", "input_layernorm.weight", false, Rope::kNone},
    {"layers.attention.wq", "self_attn.q_proj.weight", true, Rope::kQueryHeads},
    {"layers.attention.wk", "self_attn.k_proj.weight", true, Rope::kKeyValueHeads},
    {"layers.attention.wv", "self_attn.v_proj.weight", true, Rope::kNone},
    {"layers.attention.wo", "self_attn.o_proj.weight", true, Rope::kNone},
    {"layers.ffn_norm", "post_attention_layernorm.weight", false, Rope::kNone},
    {"layers.feed_forward.w1", "mlp.gate_proj.weight", true, Rope::kNone},
    {"layers.feed_forward.w3", "mlp.up_proj.weight", true, Rope::kNone},
    {"layers.feed_forward.w2", "mlp.down_proj.weight", true, Rope::kNone},
};

const LayerMapping& LayerMappingOf(std::string_view weft_name) {
  for (const LayerMapping& m : kLayerMap) {
    if (m.weft == weft_name) return m;
  }
  FailInternal("no Hugging Face name for weft weight {}", weft_name);
}

std::string LayerName(int64_t layer, std::string_view suffix) {
  return fmt::format("model.layers.{}.{}", layer, suffix);
}

// The unstacked weights' HF names and whether they are transposed.
struct GlobalMapping {
  std::string_view weft, hf;
  bool matrix;
};
constexpr GlobalMapping kGlobalMap[] = {
    {"tok_embeddings", "model.embed_tokens.weight", false},  // [V, D] in both
    {"norm", "model.norm.weight", false},
    {"output", "lm_head.weight", true},  // [D, V] -> [V, D]
};

// [cols, rows] from a row-major [rows, cols].
std::vector<float> Transposed(std::span<const float> in, int64_t rows, int64_t cols) {
  std::vector<float> out(in.size());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) out[c * rows + r] = in[r * cols + c];
  }
  return out;
}

// Row r of the result is row order[r] of `in` ([rows, cols]).
std::vector<float> PermutedRows(std::span<const float> in, const std::vector<int64_t>& order,
                                int64_t cols) {
  std::vector<float> out(in.size());
  for (size_t r = 0; r < order.size(); ++r) {
    std::copy_n(in.begin() + order[r] * cols, cols, out.begin() + static_cast<int64_t>(r) * cols);
  }
  return out;
}

// Hugging Face's q/k row r holds weft's output feature order[r]: per head of
// hd, HF row j is weft's 2j and HF row hd/2 + j is weft's 2j + 1.
std::vector<int64_t> RopeRowOrder(int64_t heads, int64_t hd) {
  std::vector<int64_t> order(heads * hd);
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t j = 0; j < hd / 2; ++j) {
      order[h * hd + j] = h * hd + 2 * j;
      order[h * hd + hd / 2 + j] = h * hd + 2 * j + 1;
    }
  }
  return order;
}

std::vector<int64_t> Inverse(const std::vector<int64_t>& order) {
  std::vector<int64_t> inverse(order.size());
  for (size_t i = 0; i < order.size(); ++i) inverse[order[i]] = static_cast<int64_t>(i);
  return inverse;
}

std::vector<int64_t> Identity(int64_t n) {
  std::vector<int64_t> order(n);
  for (int64_t i = 0; i < n; ++i) order[i] = i;
  return order;
}

int64_t KvHeads(const LlamaConfig& c) { return c.n_kv_heads > 0 ? c.n_kv_heads : c.n_heads; }

// The HF output-row order of a layer projection ([out] rows after transposing).
std::vector<int64_t> RowOrder(const LayerMapping& m, const LlamaConfig& c, int64_t out_rows) {
  switch (m.rope) {
    case Rope::kQueryHeads:
      return RopeRowOrder(c.n_heads, c.head_dim());
    case Rope::kKeyValueHeads:
      return RopeRowOrder(KvHeads(c), c.head_dim());
    case Rope::kNone:
      break;
  }
  return Identity(out_rows);
}

HostTensor Encode(std::vector<int64_t> shape, std::span<const float> values, PrimitiveType dtype) {
  if (dtype == PrimitiveType::kF32) return F32Tensor(std::move(shape), values);
  WEFT_INTERNAL_CHECK(dtype == PrimitiveType::kBF16, "Hugging Face export in {}",
                      PrimitiveTypeName(dtype));
  std::vector<uint16_t> bits(values.size());
  for (size_t i = 0; i < values.size(); ++i) bits[i] = bf16::FromFloatBits(values[i]);
  return BF16Tensor(std::move(shape), bits);
}

// The HF tensor `name` as F32 values of `shape`, checked.
std::vector<float> ReadHfTensor(const TensorMap& hf, const std::string& name,
                                const std::vector<int64_t>& shape, std::string_view what,
                                const std::map<std::string, std::string>& file_of) {
  const auto it = hf.find(name);
  WEFT_CHECK(it != hf.end(),
             "{} has no tensor '{}' [{}], which the model its config.json describes needs; give "
             "the complete checkpoint (every shard the index lists), or a config.json that "
             "matches the weights",
             what, name, fmt::join(shape, ", "));
  const auto file = file_of.find(name);
  const std::string where = file == file_of.end() ? std::string(what) : file->second;
  const HostTensor& t = it->second;
  WEFT_CHECK(t.element_type() == PrimitiveType::kF32 || t.element_type() == PrimitiveType::kBF16 ||
                 t.element_type() == PrimitiveType::kF16,
             "{}: tensor '{}' is {}, an unsupported dtype for weights; weft reads F32, BF16 and "
             "F16 (convert the checkpoint, e.g. save it with torch_dtype float32 or bfloat16)",
             where, name, SafetensorsDTypeName(t.element_type()));
  WEFT_CHECK(t.dimensions() == shape,
             "{}: tensor '{}' is [{}], but the model its config.json describes needs [{}]; the "
             "weights and config.json disagree",
             where, name, fmt::join(t.dimensions(), ", "), fmt::join(shape, ", "));
  std::vector<float> values = TensorToF32(t);
  for (size_t i = 0; i < values.size(); ++i) {
    WEFT_CHECK(std::isfinite(values[i]),
               "{}: tensor '{}' holds {} at element {}; weft starts only from finite weights",
               where, name, values[i], i);
  }
  return values;
}

const OrderedJson* Find(const OrderedJson& j, const char* key) {
  const auto it = j.find(key);
  return it == j.end() || it->is_null() ? nullptr : &*it;
}

int64_t HfInt(const OrderedJson& j, const char* key, std::string_view what,
              std::optional<int64_t> dflt) {
  const OrderedJson* v = Find(j, key);
  if (!v && dflt) return *dflt;
  WEFT_CHECK(v != nullptr, "{}: no \"{}\"; a Llama config.json gives it", what, key);
  WEFT_CHECK(v->is_number_integer(), "{}: \"{}\" is {}, not an integer", what, key, v->dump());
  return v->get<int64_t>();
}

double HfDouble(const OrderedJson& j, const char* key, std::string_view what, double dflt) {
  const OrderedJson* v = Find(j, key);
  if (!v) return dflt;
  WEFT_CHECK(v->is_number(), "{}: \"{}\" is {}, not a number", what, key, v->dump());
  return v->get<double>();
}

bool HfBool(const OrderedJson& j, const char* key, std::string_view what, bool dflt) {
  const OrderedJson* v = Find(j, key);
  if (!v) return dflt;
  WEFT_CHECK(v->is_boolean(), "{}: \"{}\" is {}, not true or false", what, key, v->dump());
  return v->get<bool>();
}

// Refuses config.json fields that describe a model weft's Llama does not compute.
void CheckHfArchitecture(const OrderedJson& j, std::string_view what) {
  const OrderedJson* type = Find(j, "model_type");
  WEFT_CHECK(type && type->is_string() && type->get<std::string>() == "llama",
             "{}: \"model_type\" is {}; weft reads Llama models (\"model_type\": \"llama\")", what,
             type ? type->dump() : std::string("missing"));
  if (const OrderedJson* arch = Find(j, "architectures")) {
    bool llama = false;
    if (arch->is_array()) {
      for (const OrderedJson& a : *arch) llama = llama || a == "LlamaForCausalLM";
    }
    WEFT_CHECK(llama, "{}: \"architectures\" is {}; weft reads LlamaForCausalLM", what,
               arch->dump());
  }
  if (const OrderedJson* act = Find(j, "hidden_act")) {
    WEFT_CHECK(*act == "silu", "{}: \"hidden_act\" is {}; weft's Llama MLP is SwiGLU (silu)", what,
               act->dump());
  }
  WEFT_CHECK(Find(j, "rope_scaling") == nullptr,
             "{}: \"rope_scaling\" is {}; weft's RoPE has no scaling (give a model without it)",
             what, j["rope_scaling"].dump());
  for (const char* bias : {"attention_bias", "mlp_bias"}) {
    WEFT_CHECK(!HfBool(j, bias, what, false),
               "{}: \"{}\" is true; weft's Llama projections have no biases", what, bias);
  }
}

std::string DTypeTorchName(PrimitiveType dtype) {
  switch (dtype) {
    case PrimitiveType::kF32:
      return "float32";
    case PrimitiveType::kBF16:
      return "bfloat16";
    case PrimitiveType::kF16:
      return "float16";
    default:
      break;
  }
  FailInternal("no torch dtype for {}", PrimitiveTypeName(dtype));
}

// HF's tensor names in the model's natural order (embeddings, layers in
// order, final norm, head): the order shards are filled in.
std::vector<std::string> HfNamesInOrder(const LlamaConfig& c) {
  std::vector<std::string> names = {"model.embed_tokens.weight"};
  for (int64_t i = 0; i < c.n_layers; ++i) {
    for (const LayerMapping& m : kLayerMap) names.push_back(LayerName(i, m.hf));
  }
  names.push_back("model.norm.weight");
  if (!c.tie_embeddings) names.push_back("lm_head.weight");
  return names;
}

// Refuses an export target that exists and is not an empty directory.
void CheckExportTarget(const fs::path& out) {
  std::error_code error;
  if (!fs::exists(out, error)) return;
  WEFT_CHECK(fs::is_directory(out, error) && fs::is_empty(out, error),
             "{} exists and is not an empty directory; weft export writes a new directory and "
             "never replaces files: give a new OUT_DIR (or remove that one)",
             out.string());
}

std::string TokenizerConfigJson(const Tokenizer& t, int64_t max_length) {
  OrderedJson j = {{"tokenizer_class", "LlamaTokenizer"},
                   // weft frames each document as BOS + text + EOS when it trains
                   // (data/packing.h): a tokenizer call adds BOS, not EOS.
                   {"add_bos_token", true},
                   {"add_eos_token", false},
                   {"bos_token", t.piece(t.bos_id())},
                   {"eos_token", t.piece(t.eos_id())},
                   {"unk_token", t.piece(Tokenizer::kUnkId)},
                   {"pad_token", t.piece(t.pad_id())},
                   {"model_max_length", max_length},
                   {"clean_up_tokenization_spaces", false},
                   {"legacy", true},
                   {"sp_model_kwargs", OrderedJson::object()}};
  return j.dump(2) + "\n";
}

std::string SpecialTokensJson(const Tokenizer& t) {
  OrderedJson j = {{"bos_token", t.piece(t.bos_id())},
                   {"eos_token", t.piece(t.eos_id())},
                   {"unk_token", t.piece(Tokenizer::kUnkId)},
                   {"pad_token", t.piece(t.pad_id())}};
  return j.dump(2) + "\n";
}

// The weights into `dir`: one model.safetensors, or shards and their index.
void WriteHfWeights(const fs::path& dir, const LlamaConfig& config, const TensorMap& hf,
                    int64_t max_shard_bytes) {
  const Metadata metadata = {{"format", "pt"}};
  int64_t total = 0;
  for (const auto& [name, t] : hf) total += t.byte_size();
  if (total <= max_shard_bytes) {
    WriteSafetensors(dir / "model.safetensors", hf, metadata);
    return;
  }
  std::vector<TensorMap> shards(1);
  int64_t bytes = 0;
  for (const std::string& name : HfNamesInOrder(config)) {
    const HostTensor& t = hf.at(name);
    const int64_t size = t.byte_size();
    if (!shards.back().empty() && bytes + size > max_shard_bytes) {
      shards.emplace_back();
      bytes = 0;
    }
    shards.back().emplace(name, t);
    bytes += size;
  }
  OrderedJson weight_map = OrderedJson::object();
  std::map<std::string, std::string> sorted;  // the index lists names sorted, as HF writes it
  for (size_t k = 0; k < shards.size(); ++k) {
    const std::string file = fmt::format("model-{:05}-of-{:05}.safetensors", k + 1, shards.size());
    WriteSafetensors(dir / file, shards[k], metadata);
    for (const auto& [name, t] : shards[k]) sorted[name] = file;
  }
  for (const auto& [name, file] : sorted) weight_map[name] = file;
  const OrderedJson index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
  WriteFileAtomically(dir / "model.safetensors.index.json", index.dump(2) + "\n");
}

// Removes a temporary directory unless released.
struct RemoveOnFailure {
  fs::path dir;
  ~RemoveOnFailure() {
    if (dir.empty()) return;
    std::error_code ignored;
    fs::remove_all(dir, ignored);
  }
};

// OUT_DIR as an absolute path. OUT_DIR is the user's own path, so a link
// there is followed (the export goes to the directory it names; the link
// stays) as `cp` would; a dangling link is refused.
fs::path ExportTarget(const fs::path& out) {
  fs::path target = fs::absolute(out).lexically_normal();
  if (!target.has_filename()) target = target.parent_path();  // "out/"
  std::error_code error;
  if (!fs::is_symlink(fs::symlink_status(target, error))) return target;
  const fs::path resolved = fs::canonical(target, error);
  WEFT_CHECK(!error,
             "{} is a symbolic link to {}, which does not exist; weft export does not create "
             "directories through links: give the directory itself",
             out.string(), fs::read_symlink(target, error).string());
  CheckExportTarget(resolved);
  return resolved;
}

// The export's hold on OUT_DIR: made if absent (and removed again if the
// export fails), flocked, so that a second export into it is refused by name
// while this one runs, and checked empty under the lock.
class ExportLock {
 public:
  ExportLock(const fs::path& target, const fs::path& out) : target_(target) {
    std::error_code error;
    const fs::path parent = target.parent_path();
    fs::create_directories(parent, error);
    if (error) {
      Fail("cannot create {} for OUT_DIR {}: {}; give an OUT_DIR in a writable place",
           parent.string(), out.string(), error.message());
    }
    if (::mkdir(target.c_str(), 0755) == 0) {
      created_ = true;
    } else if (errno != EEXIST) {
      Fail("cannot create OUT_DIR {}: {}; give an OUT_DIR in a writable place", out.string(),
           std::generic_category().message(errno));
    }
    try {
      Hold(out);
    } catch (...) {
      Release();
      throw;
    }
  }
  ~ExportLock() { Release(); }
  ExportLock(const ExportLock&) = delete;
  ExportLock& operator=(const ExportLock&) = delete;

  // The export is in place: nothing to remove.
  void Done() { created_ = false; }

 private:
  void Hold(const fs::path& out) {
    const fs::path& target = target_;
    std::error_code error;
    fd_ = ::open(target.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd_ < 0) {
      Fail("cannot open OUT_DIR {}: {}; give a new directory", out.string(),
           std::generic_category().message(errno));
    }
    if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      const int saved = errno;
      if (saved == EWOULDBLOCK) created_ = false;  // the holder's now, not ours to remove
      WEFT_CHECK(saved != EWOULDBLOCK,
                 "OUT_DIR {} is being written by another weft export; wait for it to end, or give "
                 "another OUT_DIR",
                 out.string());
      Fail("cannot lock OUT_DIR {}: {}", out.string(), std::generic_category().message(saved));
    }
    // Under the lock: still the directory that was opened, and still empty
    // (an export that finished meanwhile has filled it).
    struct stat held {};
    struct stat now {};
    WEFT_CHECK(::fstat(fd_, &held) == 0 && ::lstat(target.c_str(), &now) == 0 &&
                   held.st_dev == now.st_dev && held.st_ino == now.st_ino &&
                   fs::is_empty(target, error) && !error,
               "{} exists and is not an empty directory (another export wrote it meanwhile?); "
               "weft export writes a new directory and never replaces files: give a new OUT_DIR",
               out.string());
  }
  void Release() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
    if (created_) ::rmdir(target_.c_str());  // only while empty: the failed export's own
    created_ = false;
  }

  fs::path target_;
  int fd_ = -1;
  bool created_ = false;
};

}  // namespace

TensorMap ToHfTensors(const LlamaConfig& config, const TensorMap& weights, PrimitiveType dtype) {
  TensorMap out;
  for (const LlamaWeight& w : LlamaWeights(config)) {
    const auto it = weights.find(w.name);
    WEFT_CHECK(it != weights.end(), "the checkpoint has no weight '{}' {}, which its model needs",
               w.name, w.shape.ToString());
    WEFT_CHECK(it->second.dimensions() == w.shape.dimensions(),
               "the checkpoint's weight '{}' is [{}], its model needs {}", w.name,
               fmt::join(it->second.dimensions(), ", "), w.shape.ToString());
    const std::vector<float> values = TensorToF32(it->second);
    const std::vector<int64_t>& d = w.shape.dimensions();
    if (w.name.rfind("layers.", 0) != 0) {
      for (const GlobalMapping& g : kGlobalMap) {
        if (g.weft != w.name) continue;
        out[std::string(g.hf)] = g.matrix
                                     ? Encode({d[1], d[0]}, Transposed(values, d[0], d[1]), dtype)
                                     : Encode(d, values, dtype);
      }
      continue;
    }
    const LayerMapping& m = LayerMappingOf(w.name);
    const int64_t per_layer = w.shape.ElementsCount() / d[0];
    for (int64_t i = 0; i < d[0]; ++i) {
      const std::span<const float> layer(values.data() + i * per_layer, per_layer);
      if (!m.matrix) {
        out[LayerName(i, m.hf)] = Encode({d[1]}, layer, dtype);
        continue;
      }
      const std::vector<float> t = Transposed(layer, d[1], d[2]);  // [out, in]
      out[LayerName(i, m.hf)] =
          Encode({d[2], d[1]}, PermutedRows(t, RowOrder(m, config, d[2]), d[1]), dtype);
    }
  }
  return out;
}

TensorMap FromHfTensors(const LlamaConfig& config, const TensorMap& hf, std::string_view what,
                        const std::map<std::string, std::string>& file_of) {
  TensorMap out;
  std::set<std::string> used;
  for (const LlamaWeight& w : LlamaWeights(config)) {
    const std::vector<int64_t>& d = w.shape.dimensions();
    if (w.name.rfind("layers.", 0) != 0) {
      for (const GlobalMapping& g : kGlobalMap) {
        if (g.weft != w.name) continue;
        const std::string name(g.hf);
        used.insert(name);
        const std::vector<int64_t> shape = g.matrix ? std::vector<int64_t>{d[1], d[0]} : d;
        const std::vector<float> v = ReadHfTensor(hf, name, shape, what, file_of);
        out[w.name] = F32Tensor(d, g.matrix ? Transposed(v, d[1], d[0]) : v);
      }
      continue;
    }
    const LayerMapping& m = LayerMappingOf(w.name);
    const int64_t per_layer = w.shape.ElementsCount() / d[0];
    std::vector<float> stacked(static_cast<size_t>(w.shape.ElementsCount()));
    for (int64_t i = 0; i < d[0]; ++i) {
      const std::string name = LayerName(i, m.hf);
      used.insert(name);
      std::vector<float> layer;
      if (!m.matrix) {
        layer = ReadHfTensor(hf, name, {d[1]}, what, file_of);
      } else {
        const std::vector<float> v = ReadHfTensor(hf, name, {d[2], d[1]}, what, file_of);
        layer = Transposed(PermutedRows(v, Inverse(RowOrder(m, config, d[2])), d[1]), d[2], d[1]);
      }
      std::copy(layer.begin(), layer.end(), stacked.begin() + i * per_layer);
    }
    out[w.name] = F32Tensor(d, stacked);
  }
  for (const auto& [name, t] : hf) {
    // Tied: transformers ties lm_head to the embeddings whatever the file
    // holds; inv_freq buffers (older checkpoints) are recomputed, not weights.
    if (used.count(name) || (config.tie_embeddings && name == "lm_head.weight") ||
        name.ends_with("rotary_emb.inv_freq")) {
      continue;
    }
    const auto file = file_of.find(name);
    Fail(
        "{}: tensor '{}' has no place in weft's Llama (biases or another architecture?); give "
        "a LlamaForCausalLM checkpoint whose config.json matches its weights",
        file == file_of.end() ? std::string(what) : file->second, name);
  }
  return out;
}

std::string HfConfigJson(const LlamaConfig& c, PrimitiveType dtype) {
  OrderedJson j = {{"architectures", {"LlamaForCausalLM"}},
                   {"model_type", "llama"},
                   {"vocab_size", c.vocab_size},
                   {"hidden_size", c.dim},
                   {"intermediate_size", c.ffn_dim},
                   {"num_hidden_layers", c.n_layers},
                   {"num_attention_heads", c.n_heads},
                   {"num_key_value_heads", KvHeads(c)},
                   {"head_dim", c.head_dim()},
                   {"max_position_embeddings", c.seq_len},
                   {"rope_theta", c.rope_theta},
                   {"rope_scaling", nullptr},
                   {"rms_norm_eps", c.norm_eps},
                   {"hidden_act", "silu"},
                   {"attention_bias", false},
                   {"mlp_bias", false},
                   {"attention_dropout", 0.0},
                   {"initializer_range", 0.02},
                   {"tie_word_embeddings", c.tie_embeddings},
                   {"bos_token_id", Tokenizer::kBosId},
                   {"eos_token_id", Tokenizer::kEosId},
                   {"pad_token_id", Tokenizer::kPadId},
                   {"torch_dtype", DTypeTorchName(dtype)},
                   {"use_cache", true}};
  return j.dump(2) + "\n";
}

LlamaConfig LlamaConfigFromHfJson(std::string_view text, std::string_view what) {
  OrderedJson j;
  try {
    j = OrderedJson::parse(text);
  } catch (const OrderedJson::exception& e) {
    Fail("{} is not valid JSON ({}); give the model's config.json", what, e.what());
  }
  WEFT_CHECK(j.is_object(), "{} is not a JSON object; give the model's config.json", what);
  CheckHfArchitecture(j, what);
  LlamaConfig c;
  c.vocab_size = HfInt(j, "vocab_size", what, std::nullopt);
  c.dim = HfInt(j, "hidden_size", what, std::nullopt);
  c.ffn_dim = HfInt(j, "intermediate_size", what, std::nullopt);
  c.n_layers = HfInt(j, "num_hidden_layers", what, std::nullopt);
  c.n_heads = HfInt(j, "num_attention_heads", what, std::nullopt);
  c.n_kv_heads = HfInt(j, "num_key_value_heads", what, c.n_heads);
  c.seq_len = HfInt(j, "max_position_embeddings", what, 2048);  // transformers' default
  c.rope_theta = HfDouble(j, "rope_theta", what, 10000.0);
  c.norm_eps = HfDouble(j, "rms_norm_eps", what, 1e-6);  // transformers' default
  c.tie_embeddings = HfBool(j, "tie_word_embeddings", what, false);
  if (Find(j, "head_dim") && c.n_heads > 0) {
    const int64_t hd = HfInt(j, "head_dim", what, std::nullopt);
    WEFT_CHECK(hd * c.n_heads == c.dim,
               "{}: \"head_dim\" is {}, but weft's Llama has hidden_size / num_attention_heads = "
               "{} / {} per head",
               what, hd, c.dim, c.n_heads);
  }
  ValidateLlamaConfig(c, what);
  return c;
}

void CheckModelMatchesHf(const LlamaConfig& config, std::string_view source, const LlamaConfig& hf,
                         std::string_view hf_what) {
  struct Field {
    const char* weft;
    const char* hf;
    std::string mine, theirs;
  };
  const auto text = [](auto v) { return fmt::format("{}", v); };
  const Field fields[] = {
      {"vocab_size", "vocab_size", text(config.vocab_size), text(hf.vocab_size)},
      {"dim", "hidden_size", text(config.dim), text(hf.dim)},
      {"n_layers", "num_hidden_layers", text(config.n_layers), text(hf.n_layers)},
      {"n_heads", "num_attention_heads", text(config.n_heads), text(hf.n_heads)},
      {"n_kv_heads", "num_key_value_heads", text(KvHeads(config)), text(KvHeads(hf))},
      {"ffn_dim", "intermediate_size", text(config.ffn_dim), text(hf.ffn_dim)},
      {"rope_theta", "rope_theta", text(config.rope_theta), text(hf.rope_theta)},
      {"norm_eps", "rms_norm_eps", text(config.norm_eps), text(hf.norm_eps)},
      {"tie_embeddings", "tie_word_embeddings", text(config.tie_embeddings),
       text(hf.tie_embeddings)},
  };
  for (const Field& f : fields) {
    WEFT_CHECK(f.mine == f.theirs,
               "{}: model.{} = {}, but {} has \"{}\": {}; the weights are for that model. Set "
               "model.{} = {} in the config (or give a matching model)",
               source, f.weft, f.mine, hf_what, f.hf, f.theirs, f.weft, f.theirs);
  }
}

// config.json and model.safetensors.index.json are read whole: a file over
// this (a Llama 405B index is 100 KiB) is refused unread.
constexpr int64_t kMaxHfJsonBytes = int64_t{64} << 20;
// A run's tokenizer.model, as Tokenizer::Load reads it.
constexpr int64_t kMaxTokenizerModelBytes = int64_t{1} << 30;

bool IsHfDirectory(const fs::path& dir) {
  std::error_code error;
  // Anything there (a device or a FIFO too): LoadHf refuses it by name.
  return fs::exists(dir / "config.json", error);
}

HfModel LoadHf(const fs::path& dir) {
  std::error_code error;
  WEFT_CHECK(fs::is_directory(dir, error),
             "{} is not a directory; give a Hugging Face model directory (config.json, "
             "model.safetensors)",
             dir.string());
  const fs::path config_path = dir / "config.json";
  WEFT_CHECK(fs::exists(config_path, error),
             "{} has no config.json; give a Hugging Face Llama directory (config.json and "
             "model.safetensors or model.safetensors.index.json, as save_pretrained writes it)",
             dir.string());
  HfModel m;
  m.dir = dir;
  // A device (/dev/zero), a FIFO or a file over the limit is refused by
  // name, unread.
  m.config = LlamaConfigFromHfJson(
      ReadInputFile(config_path, "Hugging Face config", kMaxHfJsonBytes), config_path.string());
  TensorMap hf;
  std::map<std::string, std::string> file_of;
  const fs::path index_path = dir / "model.safetensors.index.json";
  const fs::path single = dir / "model.safetensors";
  // transformers' from_pretrained looks for model.safetensors first and
  // reads the index only when there is none: a directory holding both
  // loads the single file there, so it does here (docs/HUGGINGFACE.md).
  // Whatever is at a name counts as there (links followed): a device or a
  // FIFO is refused by name when read, never passed over.
  const bool sharded = !fs::exists(single, error) && fs::exists(index_path, error);
  if (sharded) {
    const std::string what = index_path.string();
    OrderedJson index;
    try {
      index = OrderedJson::parse(ReadInputFile(index_path, "safetensors index", kMaxHfJsonBytes));
    } catch (const OrderedJson::exception& e) {
      Fail("{} is not valid JSON ({})", what, e.what());
    }
    const OrderedJson* map = index.is_object() ? Find(index, "weight_map") : nullptr;
    WEFT_CHECK(map && map->is_object() && !map->empty(),
               "{} has no \"weight_map\" object naming each tensor's file", what);
    std::map<std::string, TensorMap> files;
    for (const auto& [name, file] : map->items()) {
      WEFT_CHECK(
          file.is_string() && !file.get<std::string>().empty() &&
              fs::path(file.get<std::string>()).filename().string() == file.get<std::string>(),
          "{}: \"weight_map\" gives {} for '{}', not a file name in {}", what, file.dump(), name,
          dir.string());
      const std::string f = file.get<std::string>();
      if (!files.count(f)) {
        WEFT_CHECK(fs::exists(dir / f, error),
                   "{} maps '{}' to {}, which does not exist; copy every shard into {}", what, name,
                   (dir / f).string(), dir.string());
        files[f] = ReadSafetensors(dir / f).tensors;
      }
      auto found = files[f].find(name);
      WEFT_CHECK(found != files[f].end(), "{} maps '{}' to {}, which has no such tensor", what,
                 name, (dir / f).string());
      file_of[name] = (dir / f).string();
      hf.emplace(name, std::move(found->second));
    }
  } else {
    WEFT_CHECK(fs::exists(single, error),
               "{} has neither model.safetensors nor model.safetensors.index.json; weft reads "
               "safetensors weights (pytorch_model.bin needs converting: load the model and "
               "save_pretrained it with safe_serialization=True)",
               dir.string());
    hf = ReadSafetensors(single).tensors;
    for (const auto& [name, t] : hf) file_of[name] = single.string();
  }
  if (const auto e = hf.find("model.embed_tokens.weight"); e != hf.end()) {
    m.stored_dtype = e->second.element_type();
  }
  m.weights = FromHfTensors(m.config, hf, dir.string(), file_of);
  if (fs::is_regular_file(dir / "tokenizer.model", error)) m.tokenizer = dir / "tokenizer.model";
  return m;
}

void WriteHfDirectory(const fs::path& out, const LlamaConfig& config, const TensorMap& weights,
                      const std::string& tokenizer_model, const HfExportOptions& options) {
  WEFT_CHECK(options.dtype == PrimitiveType::kF32 || options.dtype == PrimitiveType::kBF16,
             "--dtype {}: weft exports f32 or bf16", PrimitiveTypeName(options.dtype));
  WEFT_CHECK(options.max_shard_bytes >= 1, "--max-shard-size {}: give a positive size",
             options.max_shard_bytes);
  CheckExportTarget(out);
  const Tokenizer tokenizer = Tokenizer::FromSerializedModel(tokenizer_model, "tokenizer.model");
  WEFT_CHECK(tokenizer.vocab_size() <= config.vocab_size,
             "the tokenizer has {} pieces but the model only {} embeddings", tokenizer.vocab_size(),
             config.vocab_size);
  const TensorMap hf = ToHfTensors(config, weights, options.dtype);

  const fs::path target = ExportTarget(out);
  ExportLock lock(target, out);
  RemoveOnFailure temp{CreateUniqueSiblingDirectory(target, ".tmp-")};
  WriteHfWeights(temp.dir, config, hf, options.max_shard_bytes);
  WriteFileAtomically(temp.dir / "config.json", HfConfigJson(config, options.dtype));
  WriteFileAtomically(temp.dir / "tokenizer.model", tokenizer_model);
  WriteFileAtomically(temp.dir / "tokenizer_config.json",
                      TokenizerConfigJson(tokenizer, config.seq_len));
  WriteFileAtomically(temp.dir / "special_tokens_map.json", SpecialTokensJson(tokenizer));
  SyncDirectory(temp.dir);
  // rename(2) replaces the (empty, locked) target directory in one step and
  // refuses one that is not empty.
  if (::rename(temp.dir.c_str(), target.c_str()) != 0) {
    Fail("cannot move the export into {}: {}; give a new OUT_DIR", out.string(),
         std::generic_category().message(errno));
  }
  temp.dir.clear();
  lock.Done();
  SyncDirectory(target.parent_path());
}

void ExportRunToHf(const fs::path& run_dir, const fs::path& out, const HfExportOptions& options) {
  CheckExportTarget(out);
  const RunFiles files = LocateRunFiles(run_dir);
  const Checkpoint checkpoint = LoadCheckpoint(files.checkpoint);
  const std::string what = fmt::format("checkpoint {}", files.checkpoint.string());
  const LlamaConfig config = LlamaConfigFromExtras(checkpoint.state.extra, what);
  const std::string tokenizer =
      ReadInputFile(files.tokenizer, "tokenizer model", kMaxTokenizerModelBytes);
  const auto crc = checkpoint.state.extra.find("tokenizer.crc32c");
  WEFT_CHECK(crc == checkpoint.state.extra.end() || crc->second == Crc32cText(Crc32c(tokenizer)),
             "{} is not the tokenizer {} was trained with ({} in its state.json, {} in the "
             "file); put the run's own tokenizer.model there",
             files.tokenizer.string(), what, crc->second, Crc32cText(Crc32c(tokenizer)));
  WriteHfDirectory(out, config, checkpoint.model, tokenizer, options);
}

}  // namespace weft
