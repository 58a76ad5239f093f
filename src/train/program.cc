#include "weft/train/program.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <string>
#include <vector>

#include "weft/base/error.h"
#include "weft/sharding/hlo_sharding.h"
#include "weft/spmd/sharding_propagation.h"

namespace weft {
namespace {

// Every split dim of every weight must divide evenly: optimizer state lives
// on the shards, and a padded shard would give padding a gradient. Read from
// the rules and the mesh's axis sizes, before any sharding is built.
void CheckEvenSplits(const RunConfig& config) {
  if (config.mesh.axis_names.empty()) return;
  for (const LlamaWeight& w : LlamaWeights(config.model)) {
    const ShardingRule* rule = config.RuleFor(ShardingRuleName(w.name));
    if (rule == nullptr) continue;
    const bool stacked = w.name.rfind("layers.", 0) == 0;
    const std::vector<AxisSpec>& spec = rule->spec.dims();
    const int64_t rank = w.shape.rank() - (stacked ? 1 : 0);  // as the rule sees it
    if (static_cast<int64_t>(spec.size()) > rank) {
      Fail(
          "{}: sharding rule \"{}\" = {} has {} entries but weight {} {} has {} dims{}; give "
          "at most {} entries",
          rule->location, rule->pattern, rule->spec.ToString(), spec.size(), w.name,
          w.shape.ToString(), rank, stacked ? " per layer" : "", rank);
    }
    for (size_t i = 0; i < spec.size(); ++i) {
      const int64_t d = static_cast<int64_t>(i) + (stacked ? 1 : 0);
      int64_t parts = 1;
      for (const std::string& axis : spec[i].axes()) {
        const auto& names = config.mesh.axis_names;
        const auto found = std::find(names.begin(), names.end(), axis);
        if (found == names.end()) {
          Fail(
              "{}: sharding rule \"{}\" names mesh axis '{}', which the mesh {} does not have "
              "(a --mesh replaces the config's [mesh]: keep the axis names its rules use)",
              rule->location, rule->pattern, axis, MeshText(config.mesh));
        }
        parts *= config.mesh.axis_sizes[found - names.begin()];
      }
      const int64_t size = w.shape.dimensions(d);
      if (parts > 1 && size % parts != 0) {
        Fail(
            "{}: weight {} {} dim {} (size {}) is split {} ways by rule \"{}\" on the mesh {}; "
            "{} is not divisible by {}. Change the sharding rule, the mesh or the model size so "
            "it divides",
            rule->location, w.name, w.shape.ToString(), d, size, parts, rule->pattern,
            MeshText(config.mesh), size, parts);
      }
    }
  }
}

// The mesh's device count without overflow, for the bound check.
__int128 MeshDevicesWide(const MeshConfig& mesh) {
  __int128 n = 1;
  for (int64_t size : mesh.axis_sizes) {
    n *= size;
    if (n > kMaxMeshDevices) return n;  // stop before 128 bits overflow too
  }
  return n;
}

// The step's largest buffers must be sizeable in int64 bytes: the logits
// [B, S, V] and the layer activations the forward saves for the backward
// ([L, B, S, x] for x up to max(dim, ffn_dim, the q/k/v width)), a few
// bytes each. The model's own sizes were checked by ValidateLlamaConfig.
void CheckActivationSizes(const RunConfig& config, int64_t batch, int64_t seq) {
  const LlamaConfig& m = config.model;
  using Wide = __int128;
  const Wide width = std::max({m.dim, m.ffn_dim, m.n_heads * m.head_dim()});
  const Wide tokens = Wide{batch} * seq;
  const Wide elements = tokens * m.vocab_size + tokens * m.n_layers * width * 8;
  // 16 bytes per element leaves room for gradients and f32 sizes.
  constexpr Wide kMaxElements = Wide{1} << 58;
  if (elements > kMaxElements) {
    Fail(
        "{}: the step is too large to size: batch size {} x sequence length {} with "
        "vocab_size = {}, n_layers = {}, dim = {}, ffn_dim = {} needs about {:.3g} activation "
        "elements, more than {:.3g} (2^58); use a smaller batch or sequence (--batch, --seq, "
        "train.batch_size, model.seq_len)",
        config.source, batch, seq, m.vocab_size, m.n_layers, m.dim, m.ffn_dim,
        static_cast<double>(elements), static_cast<double>(kMaxElements));
  }
}

}  // namespace

namespace {

// "a=2,b=4" pairs of a mesh flag (`flag`: "--mesh" or "--dcn"): names
// distinct, sizes positive, at most kMaxMeshDevices devices in all.
MeshConfig ParseAxisPairs(std::string_view flag, std::string_view text) {
  MeshConfig mesh;
  std::string_view rest = text;
  while (!rest.empty()) {
    const size_t comma = rest.find(',');
    const std::string_view item = rest.substr(0, comma);
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    const size_t eq = item.find('=');
    WEFT_CHECK(eq != std::string_view::npos && eq > 0 && eq + 1 < item.size(),
               "{} '{}': expected axis=size pairs separated by commas, e.g. "
               "{} fsdp=2,tensor=2",
               flag, text, flag);
    const std::string name(item.substr(0, eq));
    const std::string size_text(item.substr(eq + 1));
    int64_t size = 0;
    size_t used = 0;
    try {
      size = std::stoll(size_text, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    WEFT_CHECK(used == size_text.size() && size >= 1,
               "{} '{}': size of axis '{}' must be a positive integer, got '{}'", flag, text, name,
               size_text);
    for (const std::string& existing : mesh.axis_names) {
      WEFT_CHECK(existing != name, "{} '{}': axis '{}' appears twice", flag, text, name);
    }
    WEFT_CHECK(size <= kMaxMeshDevices / mesh.num_devices(),
               "{} '{}': the mesh has more than {} devices, the most weft plans or runs; "
               "check the axis sizes",
               flag, text, kMaxMeshDevices);
    mesh.axis_names.push_back(name);
    mesh.axis_sizes.push_back(size);
  }
  WEFT_CHECK(!mesh.axis_names.empty(), "{} is empty; give e.g. {} fsdp=2", flag, flag);
  return mesh;
}

}  // namespace

MeshConfig ParseMeshFlag(std::string_view text) {
  MeshConfig mesh = ParseAxisPairs("--mesh", text);
  for (const std::string& axis : mesh.axis_names) {
    CheckMeshAxisRole(axis, fmt::format("--mesh '{}'", text));
  }
  return mesh;
}

std::string MeshText(const MeshConfig& mesh) {
  std::string out;
  for (size_t i = 0; i < mesh.axis_names.size(); ++i) {
    out += fmt::format("{}{}={}", i ? "," : "", mesh.axis_names[i], mesh.axis_sizes[i]);
  }
  if (out.empty()) return "(one device)";
  if (!mesh.is_hybrid()) return out;
  std::string dcn;
  for (size_t i = 0; i < mesh.dcn_sizes.size(); ++i) {
    if (mesh.dcn_sizes[i] > 1) {
      dcn += fmt::format("{}{}={}", dcn.empty() ? "" : ",", mesh.axis_names[i], mesh.dcn_sizes[i]);
    }
  }
  return dcn.empty() ? out : fmt::format("{} (dcn {})", out, dcn);
}

MeshConfig ApplyDcnFlag(MeshConfig mesh, std::string_view text) {
  const MeshConfig dcn = ParseAxisPairs("--dcn", text);
  std::vector<int64_t> slices(mesh.axis_names.size(), 1);
  for (size_t i = 0; i < dcn.axis_names.size(); ++i) {
    const auto found = std::find(mesh.axis_names.begin(), mesh.axis_names.end(), dcn.axis_names[i]);
    WEFT_CHECK(found != mesh.axis_names.end(),
               "--dcn '{}': axis '{}' is not an axis of the mesh {}; --dcn says how many slices "
               "a mesh axis spans (e.g. --mesh fsdp=64,tensor=4 --dcn fsdp=2)",
               text, dcn.axis_names[i], MeshText(mesh));
    slices[found - mesh.axis_names.begin()] = dcn.axis_sizes[i];
  }
  for (size_t i = 0; i < mesh.axis_names.size(); ++i) {
    const int64_t per_slice = mesh.axis_sizes[i] / (mesh.is_hybrid() ? mesh.dcn_sizes[i] : 1);
    WEFT_CHECK(slices[i] <= kMaxMeshDevices / per_slice,
               "--dcn '{}': the mesh has more than {} devices, the most weft plans or runs; "
               "check the sizes",
               text, kMaxMeshDevices);
    mesh.axis_sizes[i] = per_slice * slices[i];
  }
  mesh.dcn_sizes = std::move(slices);
  WEFT_CHECK(MeshDevicesWide(mesh) <= kMaxMeshDevices,
             "--dcn '{}': the mesh has more than {} devices, the most weft plans or runs; check "
             "the sizes",
             text, kMaxMeshDevices);
  return mesh;
}

void CheckStepProgram(const RunConfig& config, const StepProgramOptions& options) {
  // Everything here takes milliseconds, whatever the mesh's size.
  ValidateLlamaConfig(config.model, config.source);
  struct {
    int64_t batch_size, seq_len, num_devices;
  } p;
  p.batch_size = options.batch_size.value_or(config.train.batch_size);
  p.seq_len = options.seq_len.value_or(config.model.seq_len);
  WEFT_CHECK(p.batch_size >= 1, "{}: the batch size {} must be at least 1", config.source,
             p.batch_size);
  // Named as the user gave it: a flag (`weft plan --batch`) or the config's key.
  const std::string batch = options.batch_size ? fmt::format("--batch {}", p.batch_size)
                                               : fmt::format("train.batch_size {}", p.batch_size);
  const int64_t accum = options.grad_accum_steps;
  WEFT_CHECK(accum >= 1,
             "{}: gradient accumulation steps {} (train.grad_accum_steps, weft train "
             "--grad-accum) must be at least 1; 1 runs the whole batch at once",
             config.source, accum);
  WEFT_CHECK(p.batch_size % accum == 0,
             "{}: {} is not divisible by the gradient accumulation steps {} "
             "(train.grad_accum_steps, weft train --grad-accum): each step's batch is split into "
             "that many micro-batches of equal size; use a batch size that is a multiple of {}, "
             "or accumulation steps that divide {}",
             config.source, batch, accum, accum, p.batch_size);
  p.batch_size /= accum;  // the program's rows
  WEFT_CHECK(p.seq_len >= 1 && p.seq_len <= std::numeric_limits<int32_t>::max(),
             "{}: the sequence length {} must be in [1, {}] (s32 positions)", config.source,
             p.seq_len, std::numeric_limits<int32_t>::max());
  CheckActivationSizes(config, p.batch_size, p.seq_len);
  for (size_t i = 0; i < config.mesh.axis_sizes.size(); ++i) {
    WEFT_CHECK(config.mesh.axis_sizes[i] >= 1, "{}: mesh axis {} = {} must be at least 1",
               config.source, config.mesh.axis_names[i], config.mesh.axis_sizes[i]);
    WEFT_CHECK(config.mesh.axis_sizes[i] <= kMaxMeshDevices,
               "{}: mesh axis {} = {} is larger than {} devices, the most weft plans or runs",
               config.source, config.mesh.axis_names[i], config.mesh.axis_sizes[i],
               kMaxMeshDevices);
  }
  WEFT_CHECK(MeshDevicesWide(config.mesh) <= kMaxMeshDevices,
             "{}: the mesh {} has more than {} devices, the most weft plans or runs", config.source,
             MeshText(config.mesh), kMaxMeshDevices);
  p.num_devices = config.mesh.num_devices();
  if (options.expected_devices > 0 && p.num_devices != options.expected_devices) {
    Fail(
        "{}: the mesh {} has {} devices but {} are available; give --mesh with sizes whose "
        "product is {} (e.g. --mesh fsdp={})",
        config.source, MeshText(config.mesh), p.num_devices, options.expected_devices,
        options.expected_devices, options.expected_devices);
  }
  const int64_t batch_ways = config.mesh.batch_ways();
  if (p.batch_size % batch_ways != 0) {
    if (accum == 1) {
      Fail(
          "{}: {} is not divisible by the {} devices of the batch axes (dcn x data x fsdp) of "
          "the mesh {}; use a batch size that is a multiple of {}",
          config.source, batch, batch_ways, MeshText(config.mesh), batch_ways);
    }
    Fail(
        "{}: the micro-batch, {} / {} gradient accumulation steps (train.grad_accum_steps, "
        "weft train --grad-accum) = {}, is not divisible by the {} devices of the batch axes "
        "(dcn x data x fsdp) of the mesh {}: every device takes an equal share of each "
        "micro-batch. Use fewer accumulation steps, a batch size that is a multiple of {} x {} = "
        "{}, or a mesh with fewer batch devices",
        config.source, batch, accum, p.batch_size, batch_ways, MeshText(config.mesh), accum,
        batch_ways, accum * batch_ways);
  }
  // No [mesh]: one device, no sharding annotations.
  if (config.mesh.axis_names.empty()) {
    WEFT_CHECK(config.sharding.empty(),
               "{}: [sharding] rules need a [mesh] to name axes of; add a [mesh] section or "
               "give --mesh",
               config.source);
  } else {
    CheckShardingRules(config);
    CheckEvenSplits(config);
  }
}

StepProgram BuildStepProgram(const RunConfig& config, const StepProgramOptions& options) {
  CheckStepProgram(config, options);
  StepProgram p;
  p.batch_size = options.batch_size.value_or(config.train.batch_size) / options.grad_accum_steps;
  p.seq_len = options.seq_len.value_or(config.model.seq_len);
  p.num_devices = config.mesh.num_devices();

  LlamaBuildOptions build;
  build.batch_size = p.batch_size;
  build.seq_len = p.seq_len;
  build.precision = options.precision.value_or(config.train.precision.value_or(Precision::kBf16));
  if (!config.mesh.axis_names.empty()) build.run = &config;
  p.forward = BuildLlamaForward(config.model, build);

  const HloComputation* fwd_entry = p.forward.module->entry_computation();
  std::vector<HloSharding> root_shardings = {HloSharding::Replicate()};
  for (const LlamaWeight& w : p.forward.weights) {
    const HloInstruction* param = fwd_entry->parameter_instruction(w.parameter_number);
    HloSharding s = param->has_sharding() ? param->sharding()->WithShardGroup(std::nullopt)
                                          : HloSharding::Replicate();
    root_shardings.push_back(std::move(s));
  }

  GradOptions grad;
  grad.wrt = p.forward.WeightParameters();
  grad.remat = options.remat.value_or(config.train.remat);
  grad.shard_as = options.shard_as;
  p.step = BuildTrainingStep(*p.forward.module, grad);
  // The trainer keeps optimizer state on the weights' shards: every gradient
  // leaves the step sharded like its weight (the partitioner reshards it if
  // propagation chose otherwise inside). Without shard_as the outputs are
  // fixed only after propagation: pinned before, they would flow back into
  // the scan and do shard_as's job, hiding what --no-shard-as costs.
  HloInstruction* root = p.step->entry_computation()->root_instruction();
  if (!options.shard_as) {
    PropagationOptions propagation;
    propagation.allow_spmd_sharding_propagation_to_output = {true};
    propagation.allow_spmd_sharding_propagation_to_parameters.clear();
    for (const HloInstruction* param : p.step->entry_computation()->parameter_instructions()) {
      propagation.allow_spmd_sharding_propagation_to_parameters.push_back(!param->has_sharding());
    }
    propagation.replicate_unsharded = true;
    propagation.record_decisions = false;
    PropagateShardings(*p.step, propagation);
  }
  root->set_sharding(HloSharding::Tuple(std::move(root_shardings)));
  p.compiled = compiler::CompileForDevices(
      *p.step, {.num_devices = p.num_devices,
                .fuse = options.fuse,
                .slices = options.slices.value_or(config.mesh.num_slices())});
  return p;
}

}  // namespace weft
