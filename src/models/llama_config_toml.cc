// Reading a run's TOML config (ParseRunConfig, LoadRunConfig): every key
// checked as it is read, errors with the file's line:col and the nearest
// known name. The config's own methods and text forms are llama_config.cc's.
#include <fmt/ranges.h>
#include <toml++/toml.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <fstream>
#include <iterator>
#include <limits>
#include <set>

#include "weft/base/algorithm.h"
#include "weft/base/data_files.h"
#include "weft/base/error.h"
#include "weft/kernels/attention.h"
#include "weft/models/llama_config.h"
#include "weft/models/name_pattern.h"

namespace weft {
namespace {

std::string Where(const std::string& source, const toml::source_region& region) {
  if (region.begin.line == 0) return source;
  return fmt::format("{}:{}:{}", source, region.begin.line, region.begin.column);
}

size_t EditDistance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] != b[j - 1])});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// Source-order (key, node) pairs of a table: toml++ keeps keys sorted, but
// mesh axes and sharding rules are ordered as written.
std::vector<std::pair<const toml::key*, const toml::node*>> InFileOrder(const toml::table& table) {
  std::vector<std::pair<const toml::key*, const toml::node*>> entries;
  for (const auto& [key, node] : table) entries.emplace_back(&key, &node);
  std::sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) {
    const auto& x = a.first->source().begin;
    const auto& y = b.first->source().begin;
    return x.line != y.line ? x.line < y.line : x.column < y.column;
  });
  return entries;
}

// Reads typed values from one [section], remembering which keys it asked
// for, so Finish() can reject the rest as unknown.
class SectionReader {
 public:
  SectionReader(const toml::table* table, std::string section, const std::string& source)
      : table_(table), section_(std::move(section)), source_(source) {}

  bool present() const { return table_ != nullptr; }
  const std::string& source() const { return source_; }
  std::string where() const { return table_ ? Where(source_, table_->source()) : source_; }
  std::string WhereKey(std::string_view key) const {
    const toml::node* node = Find(key);
    return node ? Where(source_, node->source()) : where();
  }

  const toml::node* Find(std::string_view key) const { return table_ ? table_->get(key) : nullptr; }

  const toml::node* Take(std::string_view key) {
    known_.emplace(key);
    return Find(key);
  }

  const toml::node& Require(std::string_view key) {
    const toml::node* node = Take(key);
    if (node == nullptr) {
      Fail("{}: [{}] is missing the required key '{}'", where(), section_, key);
    }
    return *node;
  }

  void Int(std::string_view key, int64_t& out, bool required, int64_t min_value) {
    const toml::node* node = required ? &Require(key) : Take(key);
    if (node == nullptr) return;
    if (!node->is_integer()) TypeError(key, *node, "an integer");
    out = **node->as_integer();
    if (out < min_value) {
      Fail("{}: {}.{} = {} must be at least {}", Where(source_, node->source()), section_, key, out,
           min_value);
    }
  }

  void Float(std::string_view key, double& out, bool required = false) {
    const toml::node* node = required ? &Require(key) : Take(key);
    if (node == nullptr) return;
    if (node->is_integer()) {
      out = static_cast<double>(**node->as_integer());
    } else if (node->is_floating_point()) {
      out = **node->as_floating_point();
    } else {
      TypeError(key, *node, "a number");
    }
    if (!std::isfinite(out)) {
      Fail("{}: {}.{} = {} must be a finite number", Where(source_, node->source()), section_, key,
           out);
    }
  }

  void Bool(std::string_view key, bool& out) {
    const toml::node* node = Take(key);
    if (node == nullptr) return;
    if (!node->is_boolean()) TypeError(key, *node, "true or false");
    out = **node->as_boolean();
  }

  void String(std::string_view key, std::string& out,
              std::initializer_list<std::string_view> allowed) {
    const toml::node* node = Take(key);
    if (node == nullptr) return;
    if (!node->is_string()) TypeError(key, *node, "a string");
    out = **node->as_string();
    if (allowed.size() > 0 && !Contains(allowed, out)) {
      Fail("{}: {}.{} = \"{}\" is not one of: \"{}\"", Where(source_, node->source()), section_,
           key, out, fmt::join(allowed, "\", \""));
    }
  }

  void StringList(std::string_view key, std::vector<std::string>& out) {
    const toml::node* node = Take(key);
    if (node == nullptr) return;
    const toml::array* array = node->as_array();
    if (array == nullptr) TypeError(key, *node, "a list of strings");
    out.clear();
    for (const toml::node& item : *array) {
      if (!item.is_string()) {
        Fail("{}: {}.{} must be a list of strings; this entry is not a string",
             Where(source_, item.source()), section_, key);
      }
      out.push_back(**item.as_string());
    }
  }

  // Declares the section's keys and rejects any other: unknown keys are typos
  // until proven otherwise, and are reported before missing or bad values.
  void Expect(std::initializer_list<std::string_view> keys) {
    for (std::string_view key : keys) known_.emplace(key);
    Finish();
  }

  void Finish() const {
    if (table_ == nullptr) return;
    for (const auto& [key, node] : InFileOrder(*table_)) {
      std::string_view name = key->str();
      if (known_.count(std::string(name))) continue;
      std::string hint;
      size_t best = 3;
      for (const auto& candidate : known_) {
        size_t distance = EditDistance(name, candidate);
        if (distance < best) best = distance, hint = fmt::format("; did you mean '{}'?", candidate);
      }
      Fail("{}: unknown key '{}' in [{}]{} (known keys: {})", Where(source_, key->source()), name,
           section_, hint, fmt::join(known_, ", "));
    }
  }

  [[noreturn]] void TypeError(std::string_view key, const toml::node& node,
                              std::string_view expected) const {
    Fail("{}: {}.{} must be {}, not a {}", Where(source_, node.source()), section_, key, expected,
         TypeName(node.type()));
  }

  static std::string_view TypeName(toml::node_type type) {
    switch (type) {
      case toml::node_type::table:
        return "table";
      case toml::node_type::array:
        return "list";
      case toml::node_type::string:
        return "string";
      case toml::node_type::integer:
        return "integer";
      case toml::node_type::floating_point:
        return "float";
      case toml::node_type::boolean:
        return "boolean";
      default:
        return "date/time";
    }
  }

 private:
  const toml::table* table_;
  std::string section_;
  const std::string& source_;
  std::set<std::string> known_;
};

// ValidateLlamaConfig with `where(key)` locating a [model] key in errors.
template <typename Where>
void CheckModel(const LlamaConfig& m, const Where& where) {
  for (auto [key, value] : {std::pair<const char*, int64_t>{"vocab_size", m.vocab_size},
                            {"dim", m.dim},
                            {"n_layers", m.n_layers},
                            {"n_heads", m.n_heads},
                            {"ffn_dim", m.ffn_dim},
                            {"seq_len", m.seq_len}}) {
    if (value < 1) Fail("{}: model.{} = {} must be at least 1", where(key), key, value);
  }
  if (m.n_kv_heads < 0) {
    Fail("{}: model.n_kv_heads = {} must be at least 1", where("n_kv_heads"), m.n_kv_heads);
  }
  const int64_t kv_heads = m.n_kv_heads > 0 ? m.n_kv_heads : m.n_heads;
  if (m.n_heads % kv_heads != 0) {
    Fail(
        "{}: model.n_heads = {} is not a multiple of model.n_kv_heads = {} (each KV head serves "
        "a whole group of query heads); use an n_kv_heads that divides n_heads",
        where("n_kv_heads"), m.n_heads, kv_heads);
  }
  if (m.dim % m.n_heads != 0) {
    Fail(
        "{}: model.dim = {} is not divisible by model.n_heads = {}; the head dimension is "
        "dim / n_heads",
        where("n_heads"), m.dim, m.n_heads);
  }
  const int64_t hd = m.dim / m.n_heads;
  if (hd % 2 != 0) {
    Fail(
        "{}: the head dimension model.dim / model.n_heads = {} / {} = {} must be even for "
        "rotary embeddings",
        where("dim"), m.dim, m.n_heads, hd);
  }
  if (hd > kernels::kMaxHeadDim) {
    Fail(
        "{}: the head dimension model.dim / model.n_heads = {} / {} = {} is larger than the "
        "attention kernel supports ({} at most; Llama uses 128); raise n_heads to at least {} "
        "(dividing dim) or lower dim",
        where("dim"), m.dim, m.n_heads, hd, kernels::kMaxHeadDim,
        (m.dim + kernels::kMaxHeadDim - 1) / kernels::kMaxHeadDim);
  }
  constexpr int64_t kMaxS32 = std::numeric_limits<int32_t>::max();
  if (m.vocab_size > kMaxS32) {
    Fail("{}: model.vocab_size = {} does not fit the s32 token ids (at most {})",
         where("vocab_size"), m.vocab_size, kMaxS32);
  }
  if (m.seq_len > kMaxS32) {
    Fail("{}: model.seq_len = {} does not fit the s32 positions (at most {})", where("seq_len"),
         m.seq_len, kMaxS32);
  }
  // NumParameters in 128 bits: every term is positive, so an int64 count at
  // most kMaxModelParameters has no overflowing partial product.
  using Wide = __int128;
  const Wide dim = m.dim, kv_dim = Wide{kv_heads} * hd;
  const Wide per_layer = dim * dim * 2 + dim * kv_dim * 2 + dim * m.ffn_dim * 3 + dim * 2;
  const Wide params =
      Wide{m.vocab_size} * dim * (m.tie_embeddings ? 1 : 2) + Wide{m.n_layers} * per_layer + dim;
  if (params > kMaxModelParameters) {
    Fail(
        "{}: the model is too large to size: vocab_size = {}, dim = {}, n_layers = {}, ffn_dim "
        "= {} give about {:.3g} parameters, more than {:.3g} (2^56); check these keys for a "
        "typo",
        where("dim"), m.vocab_size, m.dim, m.n_layers, m.ffn_dim, static_cast<double>(params),
        static_cast<double>(kMaxModelParameters));
  }
  // After the size check (which names every key of an overflowing model):
  // the layers run as one loop, whose trip count the planner and the
  // executor derive; 1e9 layers was refused as a loop `while.1` that names
  // neither the config nor the key.
  constexpr int64_t kMaxLayers = int64_t{1} << 20;
  if (m.n_layers > kMaxLayers) {
    Fail(
        "{}: model.n_layers = {} is more layers than weft builds (at most {}); check the key "
        "for a typo",
        where("n_layers"), m.n_layers, kMaxLayers);
  }
  if (!(std::isfinite(m.rope_theta) && m.rope_theta > 0)) {
    Fail("{}: model.rope_theta = {} must be a positive number", where("rope_theta"), m.rope_theta);
  }
  if (!(m.norm_eps > 0 && m.norm_eps < 1)) {
    Fail("{}: model.norm_eps = {} must be in (0, 1)", where("norm_eps"), m.norm_eps);
  }
}

void ReadModel(SectionReader& in, LlamaConfig& model) {
  if (!in.present()) Fail("{}: the [model] section is missing; it defines the network", in.where());
  in.Expect({"vocab_size", "dim", "n_layers", "n_heads", "n_kv_heads", "ffn_dim", "rope_theta",
             "norm_eps", "seq_len", "tie_embeddings"});
  in.Int("vocab_size", model.vocab_size, true, 1);
  in.Int("dim", model.dim, true, 1);
  in.Int("n_layers", model.n_layers, true, 1);
  in.Int("n_heads", model.n_heads, true, 1);
  model.n_kv_heads = model.n_heads;
  in.Int("n_kv_heads", model.n_kv_heads, false, 1);
  in.Int("ffn_dim", model.ffn_dim, true, 1);
  in.Float("rope_theta", model.rope_theta);
  in.Float("norm_eps", model.norm_eps);
  in.Int("seq_len", model.seq_len, true, 1);
  in.Bool("tie_embeddings", model.tie_embeddings);
  CheckModel(model, [&](std::string_view key) { return in.WhereKey(key); });
}

void ReadTrain(SectionReader& in, TrainConfig& train) {
  in.Expect({"steps", "batch_size", "grad_accum_steps", "precision", "lr", "min_lr", "warmup_steps",
             "weight_decay", "grad_clip", "seed", "remat", "checkpoint_every", "beta1", "beta2",
             "eps", "no_weight_decay", "validation_documents", "validation_every"});
  in.Int("steps", train.steps, false, 1);
  in.Int("batch_size", train.batch_size, false, 1);
  in.Int("grad_accum_steps", train.grad_accum_steps, false, 1);
  if (train.batch_size % train.grad_accum_steps != 0) {
    Fail(
        "{}: train.batch_size = {} is not divisible by train.grad_accum_steps = {}; each step's "
        "batch is split into grad_accum_steps micro-batches of equal size: use a batch_size "
        "that is a multiple of {}, or a grad_accum_steps that divides {}",
        in.WhereKey("grad_accum_steps"), train.batch_size, train.grad_accum_steps,
        train.grad_accum_steps, train.batch_size);
  }
  std::string precision;  // unset: the trainer picks the CPU's fastest
  in.String("precision", precision, {"bf16", "f32"});
  if (!precision.empty()) train.precision = ParsePrecision(precision, in.WhereKey("precision"));
  in.Float("lr", train.lr);
  in.Float("min_lr", train.min_lr);
  in.Int("warmup_steps", train.warmup_steps, false, 0);
  in.Float("weight_decay", train.weight_decay);
  in.Float("grad_clip", train.grad_clip);
  int64_t seed = 0;
  in.Int("seed", seed, false, 0);
  train.seed = static_cast<uint64_t>(seed);
  if (const toml::node* node = in.Take("remat")) {
    // A preset name, a list of the layer's activations to save, or a table
    // { q_proj = "save", layer_input = "offload" }.
    std::string text;
    if (node->is_string()) {
      text = **node->as_string();
    } else if (const toml::table* table = node->as_table()) {
      for (const auto& [key, value] : *table) {
        if (!value.is_string()) {
          Fail("{}: train.remat.{} must be \"save\", \"offload\" or \"recompute\"",
               Where(in.source(), value.source()), key.str());
        }
        text += fmt::format("{}{}={}", text.empty() ? "" : ",", key.str(), **value.as_string());
      }
      if (text.empty()) text = "full";
    } else if (const toml::array* names = node->as_array()) {
      for (const toml::node& item : *names) {
        if (!item.is_string()) {
          Fail("{}: train.remat's list names activations to save (strings: {})",
               Where(in.source(), item.source()),
               fmt::format("{}", fmt::join(kLayerActivations, ", ")));
        }
        text += (text.empty() ? "" : ",") + std::string(**item.as_string());
      }
      if (names->empty()) text = "full";
    } else {
      Fail(
          "{}: train.remat must be a preset name, a list of activation names or a table of "
          "name = \"save\" | \"offload\" | \"recompute\"",
          Where(in.source(), node->source()));
    }
    train.remat =
        ParseRematPolicy(text, fmt::format("{}: train.remat", Where(in.source(), node->source())));
  }
  in.Int("checkpoint_every", train.checkpoint_every, false, 0);
  in.Float("beta1", train.beta1);
  in.Float("beta2", train.beta2);
  in.Float("eps", train.eps);
  in.StringList("no_weight_decay", train.no_weight_decay);
  // Held-out documents (their count against the [data] documents is checked
  // when those are read, LoadDataset).
  in.Int("validation_documents", train.validation_documents, false, 0);
  in.Int("validation_every", train.validation_every, false, 0);
  if (!(train.lr > 0)) Fail("{}: lr must be positive, got {}", in.WhereKey("lr"), train.lr);
  if (!(train.min_lr >= 0 && train.min_lr <= train.lr)) {
    Fail("{}: min_lr = {} must be in [0, lr = {}]", in.WhereKey("min_lr"), train.min_lr, train.lr);
  }
  if (train.warmup_steps > train.steps) {
    Fail("{}: warmup_steps = {} exceeds steps = {}", in.WhereKey("warmup_steps"),
         train.warmup_steps, train.steps);
  }
  if (!(train.weight_decay >= 0)) {
    Fail("{}: weight_decay must not be negative", in.WhereKey("weight_decay"));
  }
  if (!(train.grad_clip >= 0)) {
    Fail("{}: grad_clip must not be negative (0 disables clipping)", in.WhereKey("grad_clip"));
  }
  for (auto [key, beta] : {std::pair{"beta1", train.beta1}, std::pair{"beta2", train.beta2}}) {
    if (!(beta >= 0 && beta < 1)) {
      Fail("{}: {} must be in [0, 1), got {}", in.WhereKey(key), key, beta);
    }
  }
  if (!(train.eps > 0)) Fail("{}: eps must be positive, got {}", in.WhereKey("eps"), train.eps);
}

void ReadData(SectionReader& in, DataConfig& data, const std::filesystem::path& base_dir) {
  in.Expect({"source", "kjv_unit", "files", "split_on_blank_lines", "documents", "max_documents",
             "tokenizer_corpus"});
  in.String("source", data.source, {"kjv", "files", "inline"});
  in.String("kjv_unit", data.kjv_unit, {"book", "chapter", "verse"});
  std::vector<std::string> files;
  in.StringList("files", files);
  for (const auto& file : files) {
    std::filesystem::path path(file);
    data.files.push_back(path.is_absolute() ? path : (base_dir / path).lexically_normal());
  }
  in.Bool("split_on_blank_lines", data.split_on_blank_lines);
  in.StringList("documents", data.documents);
  in.Int("max_documents", data.max_documents, false, 0);
  in.String("tokenizer_corpus", data.tokenizer_corpus, {"data", "kjv"});
  if (data.source == "files" && data.files.empty()) {
    Fail("{}: source = \"files\" needs files = [\"path\", …]", in.WhereKey("source"));
  }
  if (data.source == "inline" && data.documents.empty()) {
    Fail("{}: source = \"inline\" needs documents = [\"text\", …]", in.WhereKey("source"));
  }
  if (data.source != "files" && !data.files.empty()) {
    Fail("{}: files is only read with source = \"files\"", in.WhereKey("files"));
  }
  if (data.source != "inline" && !data.documents.empty()) {
    Fail("{}: documents is only read with source = \"inline\"", in.WhereKey("documents"));
  }
}

bool IsAxisName(std::string_view name) {
  if (name.empty() || !(std::isalpha(static_cast<unsigned char>(name[0])) || name[0] == '_')) {
    return false;
  }
  return std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
  });
}

bool MeansNotSplit(std::string_view text) { return text == "none" || text == "null"; }

void ReadMesh(const toml::table* table, const std::string& source, MeshConfig& mesh) {
  if (table == nullptr) return;
  for (const auto& [key, node] : InFileOrder(*table)) {
    std::string name(key->str());
    std::string where = Where(source, key->source());
    if (!IsAxisName(name) || MeansNotSplit(name)) {
      Fail(
          "{}: '{}' is not a valid mesh axis name; use letters, digits and '_' (not "
          "\"none\"/\"null\")",
          where, name);
    }
    CheckMeshAxisRole(name, fmt::format("{}: [mesh] {}", where, name));
    if (!node->is_integer() || **node->as_integer() < 1) {
      Fail("{}: mesh axis '{}' needs a positive integer size, e.g. {} = 2",
           Where(source, node->source()), name, name);
    }
    const int64_t size = **node->as_integer();
    if (size > kMaxMeshDevices / mesh.num_devices()) {
      Fail(
          "{}: mesh axis {} = {} makes the [mesh] larger than {} devices, the most weft plans "
          "or runs; check the axis sizes",
          Where(source, node->source()), name, size, kMaxMeshDevices);
    }
    mesh.axis_names.push_back(name);
    mesh.axis_sizes.push_back(size);
  }
}

// [dcn]: how many slices each [mesh] axis spans; the axis's [mesh] size is
// per slice, so its size over all slices is the product.
void ReadDcn(const toml::table* table, const std::string& source, MeshConfig& mesh) {
  if (table == nullptr) return;
  for (const auto& [key, node] : InFileOrder(*table)) {
    const std::string name(key->str());
    const auto found = std::find(mesh.axis_names.begin(), mesh.axis_names.end(), name);
    if (found == mesh.axis_names.end()) {
      Fail(
          "{}: [dcn] names axis '{}', which [mesh] does not define (axes: {}); [dcn] says how "
          "many slices a [mesh] axis spans",
          Where(source, key->source()), name,
          mesh.axis_names.empty() ? std::string("none")
                                  : fmt::format("{}", fmt::join(mesh.axis_names, ", ")));
    }
    if (!node->is_integer() || **node->as_integer() < 1) {
      Fail("{}: [dcn] {} needs a positive integer number of slices, e.g. {} = 2",
           Where(source, node->source()), name, name);
    }
    const int64_t slices = **node->as_integer();
    if (slices > kMaxMeshDevices / mesh.num_devices()) {
      Fail(
          "{}: [dcn] {} = {} makes the mesh larger than {} devices, the most weft plans or runs; "
          "check the sizes",
          Where(source, node->source()), name, slices, kMaxMeshDevices);
    }
    if (mesh.dcn_sizes.empty()) mesh.dcn_sizes.assign(mesh.axis_names.size(), 1);
    const size_t i = static_cast<size_t>(found - mesh.axis_names.begin());
    mesh.dcn_sizes[i] = slices;
    mesh.axis_sizes[i] *= slices;
  }
}

// [sharding] rules, or [activations] (`what` = "activation sharding"): a
// PartitionSpec per key.
void ReadSharding(const toml::table* table, const std::string& source, const MeshConfig& mesh,
                  std::vector<ShardingRule>& rules, std::string_view what = "sharding rule") {
  if (table == nullptr) return;
  for (const auto& [key, node] : InFileOrder(*table)) {
    ShardingRule rule;
    rule.pattern = std::string(key->str());
    rule.location = Where(source, key->source());
    const toml::array* dims = node->as_array();
    if (dims == nullptr) {
      Fail(
          "{}: {} '{}' must be a list with one entry per array dim, e.g. "
          "[\"fsdp\", \"tensor\"]",
          Where(source, node->source()), what, rule.pattern);
    }
    std::set<std::string> used;
    std::vector<AxisSpec> spec;
    auto axis = [&](const toml::node& item) -> std::string {
      std::string name = **item.as_string();
      std::string where = Where(source, item.source());
      if (!Contains(mesh.axis_names, name)) {
        Fail(
            "{}: {} '{}' names mesh axis '{}', which [mesh] does not define (axes: "
            "{})",
            where, what, rule.pattern, name,
            mesh.axis_names.empty() ? "none" : fmt::format("{}", fmt::join(mesh.axis_names, ", ")));
      }
      if (!used.insert(name).second) {
        Fail("{}: {} '{}' uses mesh axis '{}' twice", where, what, rule.pattern, name);
      }
      return name;
    };
    for (const toml::node& item : *dims) {
      const std::string bad_entry = fmt::format(
          "{}: {} '{}': each entry is an axis name, a list of axis names, or [] / "
          "\"none\" for a dim that is not split",
          Where(source, item.source()), what, rule.pattern);
      if (item.is_string()) {
        if (MeansNotSplit(**item.as_string())) {
          spec.emplace_back();
        } else {
          spec.emplace_back(axis(item));
        }
      } else if (const toml::array* axes = item.as_array()) {
        std::vector<std::string> names;
        for (const toml::node& sub : *axes) {
          if (!sub.is_string() || MeansNotSplit(**sub.as_string())) throw Error(bad_entry);
          names.push_back(axis(sub));
        }
        spec.emplace_back(std::move(names));
      } else {
        throw Error(bad_entry);
      }
    }
    rule.spec = PartitionSpec(std::move(spec));
    rules.push_back(std::move(rule));
  }
}

const toml::table* Section(const toml::table& root, std::string_view name,
                           const std::string& source) {
  const toml::node* node = root.get(name);
  if (node == nullptr) return nullptr;
  if (!node->is_table()) {
    Fail("{}: '{}' must be a table ([{}])", Where(source, node->source()), name, name);
  }
  return node->as_table();
}

}  // namespace

void ValidateLlamaConfig(const LlamaConfig& model, std::string_view source) {
  CheckModel(model, [&](std::string_view) { return std::string(source); });
}

namespace {

// A program where a config was expected: HLO text ("HloModule ...") or
// StableHLO MLIR ("module ..."), after any blank or comment lines.
bool LooksLikeAProgram(std::string_view text) {
  size_t at = 0;
  while (at < text.size()) {
    const size_t end = std::min(text.find('\n', at), text.size());
    std::string_view line = text.substr(at, end - at);
    const size_t first = line.find_first_not_of(" \t\r");
    if (first != std::string_view::npos) {
      line.remove_prefix(first);
      if (line.starts_with("//") || line.starts_with("#")) {
        at = end + 1;
        continue;
      }
      return line.starts_with("HloModule ") || line.starts_with("module ") ||
             line.starts_with("module{") || line == "module";
    }
    at = end + 1;
  }
  return false;
}

}  // namespace

RunConfig ParseRunConfig(std::string_view toml_text, std::string_view source_name,
                         const std::filesystem::path& base_dir) {
  RunConfig config;
  config.source = std::string(source_name);
  if (LooksLikeAProgram(toml_text)) {
    Fail(
        "{} is a program (HLO or MLIR text), not a run config; this command reads a TOML run "
        "config such as configs/tiny.toml (weft compile, weft run and weft propagate take HLO "
        "modules)",
        config.source);
  }
  toml::table root;
  try {
    root = toml::parse(toml_text, source_name);
  } catch (const toml::parse_error& error) {
    Fail("{}: {}", Where(config.source, error.source()), error.description());
  }
  for (const auto& [key, node] : InFileOrder(root)) {
    static const std::set<std::string_view> kSections = {"model", "train",    "data",       "mesh",
                                                         "dcn",   "sharding", "activations"};
    if (!kSections.count(key->str())) {
      Fail(
          "{}: unknown section '{}' (sections: model, train, data, mesh, dcn, sharding, "
          "activations)",
          Where(config.source, node->source()), key->str());
    }
  }
  SectionReader model(Section(root, "model", config.source), "model", config.source);
  ReadModel(model, config.model);
  SectionReader train(Section(root, "train", config.source), "train", config.source);
  ReadTrain(train, config.train);
  SectionReader data(Section(root, "data", config.source), "data", config.source);
  ReadData(data, config.data, base_dir);
  ReadMesh(Section(root, "mesh", config.source), config.source, config.mesh);
  ReadDcn(Section(root, "dcn", config.source), config.source, config.mesh);
  ReadSharding(Section(root, "sharding", config.source), config.source, config.mesh,
               config.sharding);
  ReadSharding(Section(root, "activations", config.source), config.source, config.mesh,
               config.activations, "activation sharding");
  for (const ShardingRule& rule : config.activations) {
    if (rule.pattern != "residual") {
      Fail(
          "{}: unknown activation '{}' in [activations] (known: residual, the [batch, seq, "
          "dim] stream between blocks)",
          rule.location, rule.pattern);
    }
    if (rule.spec.dims().size() > 3) {
      Fail(
          "{}: activation sharding 'residual' = {} has {} entries; the residual stream is "
          "[batch, seq, dim]: give at most 3",
          rule.location, rule.spec.ToString(), rule.spec.dims().size());
    }
  }
  return config;
}

std::vector<std::pair<std::string, std::string>> ModelConfigFields(const LlamaConfig& m) {
  // fmt's shortest round-trip form: the TOML reader gives back the same numbers.
  return {{"model.vocab_size", fmt::format("{}", m.vocab_size)},
          {"model.dim", fmt::format("{}", m.dim)},
          {"model.n_layers", fmt::format("{}", m.n_layers)},
          {"model.n_heads", fmt::format("{}", m.n_heads)},
          {"model.n_kv_heads", fmt::format("{}", m.n_kv_heads)},
          {"model.ffn_dim", fmt::format("{}", m.ffn_dim)},
          {"model.rope_theta", fmt::format("{}", m.rope_theta)},
          {"model.norm_eps", fmt::format("{}", m.norm_eps)},
          {"model.seq_len", fmt::format("{}", m.seq_len)},
          {"model.tie_embeddings", m.tie_embeddings ? "true" : "false"}};
}

LlamaConfig ParseModelConfigFields(const std::map<std::string, std::string>& fields,
                                   std::string_view what) {
  std::string text = "[model]\n";
  for (const auto& [key, unused] : ModelConfigFields(LlamaConfig{})) {
    const auto it = fields.find(key);
    WEFT_CHECK(it != fields.end(), "{}: \"{}\" is missing; use a checkpoint written by weft train",
               what, key);
    text += fmt::format("{} = {}\n", key.substr(std::string_view("model.").size()), it->second);
  }
  const std::string source(what);
  toml::table root;
  try {
    root = toml::parse(text, source);
  } catch (const toml::parse_error& error) {
    Fail("{}: the model settings are not valid: {}", what, error.description());
  }
  SectionReader in(Section(root, "model", source), "model", source);
  LlamaConfig model;
  ReadModel(in, model);
  return model;
}

RunConfig LoadRunConfig(const std::filesystem::path& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    Fail("config {} is a directory; give the TOML file, e.g. configs/tiny.toml", path.string());
  }
  // A TOML config is small: a device (/dev/zero) or a file over 16 MiB is
  // refused before anything is read.
  const std::string text = ReadInputFile(path, "config", int64_t{16} << 20);
  std::filesystem::path base = path.parent_path();
  return ParseRunConfig(text, path.string(), base.empty() ? std::filesystem::path(".") : base);
}

}  // namespace weft
