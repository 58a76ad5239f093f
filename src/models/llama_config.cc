// The run config's methods, names and text forms (remat policies,
// precisions, the canonical text and its hash); reading it from TOML is
// llama_config_toml.cc's.
#include "weft/models/llama_config.h"

#include <fmt/ranges.h>

#include <algorithm>

#include "weft/base/algorithm.h"
#include "weft/base/error.h"
#include "weft/models/name_pattern.h"

namespace weft {

int64_t LlamaConfig::NumParameters() const {
  const int64_t kv_dim = (n_kv_heads > 0 ? n_kv_heads : n_heads) * head_dim();
  const int64_t per_layer = dim * dim * 2 + dim * kv_dim * 2 + dim * ffn_dim * 3 + dim * 2;
  return vocab_size * dim * (tie_embeddings ? 1 : 2) + n_layers * per_layer + dim;
}

bool IsBatchAxis(std::string_view axis) { return Contains(kBatchAxes, axis); }

void CheckMeshAxisRole(std::string_view axis, std::string_view where) {
  if (IsBatchAxis(axis) || axis == kTensorAxis) return;
  Fail(
      "{}: weft gives a mesh axis named '{}' no role: its devices would only run copies of "
      "the same work. The axes weft has are dcn (data parallelism across slices), data (data "
      "parallelism), fsdp (data parallelism with weights and optimizer state split by the "
      "[sharding] rules, ZeRO-3) and tensor (tensor and sequence parallelism: heads, the MLP's "
      "hidden units, the sequence between them); weft has no pipeline or context parallelism. "
      "Rename the axis to one of these or drop it",
      where, axis);
}

int64_t MeshConfig::num_devices() const { return Product(axis_sizes); }

std::vector<std::string> MeshConfig::batch_axes() const {
  std::vector<std::string> axes;
  for (const std::string& a : axis_names) {
    if (IsBatchAxis(a)) axes.push_back(a);
  }
  return axes;
}

int64_t MeshConfig::batch_ways() const {
  int64_t ways = 1;
  for (size_t i = 0; i < axis_names.size(); ++i) {
    if (IsBatchAxis(axis_names[i])) ways *= axis_sizes[i];
  }
  return ways;
}

namespace {

struct RematPreset {
  std::string_view name;
  std::vector<std::string_view> save;
};

const std::vector<RematPreset>& RematPresets() {
  static const std::vector<RematPreset> presets = {
      {"full", {}},
      {"save_qkv_proj", {"q_proj", "k_proj", "v_proj"}},
      {"save_out_proj", {"out_proj"}},
      {"save_dot_except_mlp", {"q_proj", "k_proj", "v_proj", "attention", "out_proj"}},
      {"save_dot_except_mlpwi",
       {"q_proj", "k_proj", "v_proj", "attention", "out_proj", "mlp_down"}},
      {"save_dots", {std::begin(kLayerActivations), std::end(kLayerActivations)}},
  };
  return presets;
}

}  // namespace

std::string_view PrecisionName(Precision precision) {
  return precision == Precision::kBf16 ? "bf16" : "f32";
}

Precision ParsePrecision(std::string_view text, std::string_view what) {
  if (text == "bf16") return Precision::kBf16;
  if (text == "f32") return Precision::kF32;
  Fail("{} '{}': expected bf16 or f32", what, text);
}

RematPolicy ParseRematPolicy(std::string_view text, std::string_view where) {
  RematPolicy policy;
  if (text == "none") return policy;
  policy.kind = Remat::kFull;
  if (text == "full" || text == "minimal") return policy;
  if (text == "offload") {
    policy.offload = {"layer_input"};
    return policy;
  }
  for (const RematPreset& preset : RematPresets()) {
    if (text == preset.name) {
      policy.save.assign(preset.save.begin(), preset.save.end());
      return policy;
    }
  }
  std::vector<std::string> presets = {"none", "full", "minimal", "offload"};
  for (const RematPreset& preset : RematPresets()) {
    if (preset.name != "full") presets.emplace_back(preset.name);
  }
  // name[=save|offload|recompute] entries; kept in the layer's order.
  const size_t n = std::size(kLayerActivations);
  std::vector<std::string_view> choice(n + 1, "recompute");  // [n]: layer_input
  std::string_view rest = text;
  while (true) {
    const size_t comma = rest.find(',');
    const std::string_view entry = rest.substr(0, comma);
    const size_t eq = entry.find('=');
    const std::string_view name = entry.substr(0, eq);
    const std::string_view what = eq == std::string_view::npos ? "save" : entry.substr(eq + 1);
    const auto* found = std::find(std::begin(kLayerActivations), std::end(kLayerActivations), name);
    const bool layer_input = name == "layer_input";
    if (found == std::end(kLayerActivations) && !layer_input) {
      Fail(
          "{} '{}': '{}' is neither a remat preset ({}) nor a layer activation ({}, or "
          "layer_input=offload), written name or name=save|offload|recompute, comma-separated",
          where, text, name, fmt::format("{}", fmt::join(presets, ", ")),
          fmt::format("{}", fmt::join(kLayerActivations, ", ")));
    }
    if (what != "save" && what != "offload" && what != "recompute") {
      Fail("{} '{}': '{}={}': say save, offload or recompute", where, text, name, what);
    }
    choice[layer_input ? n : static_cast<size_t>(found - std::begin(kLayerActivations))] = what;
    if (comma == std::string_view::npos) break;
    rest = rest.substr(comma + 1);
  }
  if (choice[n] == "offload") policy.offload.emplace_back("layer_input");
  for (size_t i = 0; i < n; ++i) {
    if (choice[i] == "save") policy.save.emplace_back(kLayerActivations[i]);
    if (choice[i] == "offload") policy.offload.emplace_back(kLayerActivations[i]);
  }
  return policy;
}

std::string RematText(const RematPolicy& policy) {
  const auto& [kind, save, offload] = policy;
  if (kind == Remat::kNone) return "none";
  if (offload.empty()) {
    for (const RematPreset& preset : RematPresets()) {
      if (std::equal(save.begin(), save.end(), preset.save.begin(), preset.save.end())) {
        return std::string(preset.name);
      }
    }
  }
  if (save.empty() && offload == std::vector<std::string>{"layer_input"}) return "offload";
  std::vector<std::string> entries = save;
  for (const std::string& name : offload) entries.push_back(name + "=offload");
  return fmt::format("{}", fmt::join(entries, ","));
}

int64_t MeshConfig::num_slices() const { return Product(dcn_sizes); }

Mesh MeshConfig::ToMesh() const {
  if (!is_hybrid()) return Mesh(axis_names, axis_sizes);
  std::vector<int64_t> ici(axis_sizes.size());
  for (size_t i = 0; i < ici.size(); ++i) ici[i] = axis_sizes[i] / dcn_sizes[i];
  return Mesh::Hybrid(axis_names, std::move(ici), dcn_sizes);
}

const ShardingRule* RunConfig::ActivationRule(std::string_view name) const {
  for (const auto& rule : activations) {
    if (rule.pattern == name) return &rule;
  }
  return nullptr;
}

const ShardingRule* RunConfig::RuleFor(std::string_view parameter) const {
  for (const auto& rule : sharding) {
    if (MatchesNamePattern(rule.pattern, parameter)) return &rule;
  }
  return nullptr;
}

std::string RunConfig::CanonicalText() const {
  std::string out;
  auto line = [&](std::string_view key, const auto& value) {
    out += fmt::format("{} = {}\n", key, value);
  };
  for (const auto& [key, value] : ModelConfigFields(model)) line(key, value);
  line("train.steps", train.steps);
  line("train.batch_size", train.batch_size);
  // Only when set, so the hashes of configs without it stay what they were.
  if (train.grad_accum_steps != 1) line("train.grad_accum_steps", train.grad_accum_steps);
  // Only bf16: runs from before the policy existed trained in f32. A config
  // that does not say is "auto" (the trainer resolves it before it hashes
  // the config for a checkpoint).
  if (!train.precision) {
    line("train.precision", "auto");
  } else if (*train.precision != Precision::kF32) {
    line("train.precision", PrecisionName(*train.precision));
  }
  line("train.lr", train.lr);
  line("train.min_lr", train.min_lr);
  line("train.warmup_steps", train.warmup_steps);
  line("train.weight_decay", train.weight_decay);
  line("train.grad_clip", train.grad_clip);
  line("train.seed", train.seed);
  // The lines of the three fields train.remat once was (hashes stay put).
  line("train.remat", train.remat.kind == Remat::kFull ? "full" : "none");
  if (!train.remat.save.empty()) {
    line("train.remat_save", fmt::format("{}", fmt::join(train.remat.save, ",")));
  }
  if (!train.remat.offload.empty()) {
    line("train.remat_offload", fmt::format("{}", fmt::join(train.remat.offload, ",")));
  }
  line("train.checkpoint_every", train.checkpoint_every);
  line("train.beta1", train.beta1);
  line("train.beta2", train.beta2);
  line("train.eps", train.eps);
  line("train.no_weight_decay", fmt::format("[{}]", fmt::join(train.no_weight_decay, ", ")));
  // Only when set, so the hashes of configs without validation stay put.
  if (train.validation_documents != 0) {
    line("train.validation_documents", train.validation_documents);
    line("train.validation_every", train.validation_every);
  }
  line("data.source", data.source);
  line("data.kjv_unit", data.kjv_unit);
  for (const auto& file : data.files) line("data.files[]", file.string());
  line("data.split_on_blank_lines", data.split_on_blank_lines);
  for (const auto& document : data.documents) line("data.documents[].size", document.size());
  line("data.max_documents", data.max_documents);
  line("data.tokenizer_corpus", data.tokenizer_corpus);
  for (size_t i = 0; i < mesh.axis_names.size(); ++i) {
    line("mesh." + mesh.axis_names[i], mesh.axis_sizes[i]);
  }
  for (size_t i = 0; i < mesh.dcn_sizes.size(); ++i) {
    line("dcn." + mesh.axis_names[i], mesh.dcn_sizes[i]);
  }
  for (const auto& rule : sharding) line("sharding." + rule.pattern, rule.spec.ToString());
  for (const auto& rule : activations) line("activations." + rule.pattern, rule.spec.ToString());
  return out;
}

std::string RunConfig::Hash() const {
  uint64_t hash = 0xcbf29ce484222325ULL;
  auto add = [&](std::string_view bytes) {
    for (unsigned char c : bytes) hash = (hash ^ c) * 0x100000001b3ULL;
  };
  add(CanonicalText());
  for (const auto& document : data.documents) add(document);  // texts, not just sizes
  return fmt::format("{:016x}", hash);
}

}  // namespace weft
