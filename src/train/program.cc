#include "weft/train/program.h"

#include <fmt/format.h>

#include <string>
#include <vector>

#include "weft/base/error.h"
#include "weft/sharding/hlo_sharding.h"
#include "weft/spmd/sharding_propagation.h"

namespace weft {
namespace {

int64_t BatchAxesProduct(const MeshConfig& mesh) {
  int64_t n = 1;
  for (size_t i = 0; i < mesh.axis_names.size(); ++i) {
    const std::string& a = mesh.axis_names[i];
    if (a == "dcn" || a == "data" || a == "fsdp") n *= mesh.axis_sizes[i];
  }
  return n;
}

// Every tiled dim of `weight` must divide evenly: optimizer state lives on
// the shards, and a padded shard would give padding a gradient.
void CheckEvenSplit(const RunConfig& config, const LlamaWeight& weight, const HloSharding& s) {
  if (!s.IsTiled()) return;
  const TileAssignment& tiles = s.tile_assignment();
  for (int64_t d = 0; d < weight.shape.rank(); ++d) {
    const int64_t parts = tiles.dim(d);
    const int64_t size = weight.shape.dimensions(d);
    if (parts > 1 && size % parts != 0) {
      const std::string rule_name = weight.name.rfind("layers.", 0) == 0
                                        ? "layers.0." + weight.name.substr(7)
                                        : weight.name;
      const ShardingRule* rule = config.RuleFor(rule_name);
      Fail("{}: weight {} {} dim {} (size {}) is split {} ways by {}; {} is not divisible by {}. "
           "Change the sharding rule or the model size so it divides",
           rule ? rule->location : config.source, weight.name, weight.shape.ToString(), d, size,
           parts, rule ? fmt::format("rule \"{}\"", rule->pattern) : std::string("the mesh"),
           size, parts);
    }
  }
}

}  // namespace

MeshConfig ParseMeshFlag(std::string_view text) {
  MeshConfig mesh;
  std::string_view rest = text;
  while (!rest.empty()) {
    const size_t comma = rest.find(',');
    const std::string_view item = rest.substr(0, comma);
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    const size_t eq = item.find('=');
    WEFT_CHECK(eq != std::string_view::npos && eq > 0 && eq + 1 < item.size(),
               "--mesh '{}': expected axis=size pairs separated by commas, e.g. "
               "--mesh fsdp=2,tensor=2",
               text);
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
               "--mesh '{}': size of axis '{}' must be a positive integer, got '{}'", text, name,
               size_text);
    for (const std::string& existing : mesh.axis_names) {
      WEFT_CHECK(existing != name, "--mesh '{}': axis '{}' appears twice", text, name);
    }
    mesh.axis_names.push_back(name);
    mesh.axis_sizes.push_back(size);
  }
  WEFT_CHECK(!mesh.axis_names.empty(), "--mesh is empty; give e.g. --mesh fsdp=2,tensor=2");
  return mesh;
}

StepProgram BuildStepProgram(const RunConfig& config, const StepProgramOptions& options) {
  StepProgram p;
  p.batch_size = options.batch_size > 0 ? options.batch_size : config.train.batch_size;
  p.seq_len = options.seq_len > 0 ? options.seq_len : config.model.seq_len;
  p.num_devices = config.mesh.num_devices();
  if (options.expected_devices > 0 && p.num_devices != options.expected_devices) {
    Fail("{}: the mesh {} has {} devices but {} are available; give --mesh with sizes whose "
         "product is {} (e.g. --mesh fsdp={})",
         config.source,
         config.mesh.axis_names.empty() ? std::string("(none)") : config.mesh.ToMesh().ToString(),
         p.num_devices,
         options.expected_devices, options.expected_devices, options.expected_devices);
  }
  const int64_t batch_ways = BatchAxesProduct(config.mesh);
  if (p.batch_size % batch_ways != 0) {
    Fail("{}: batch_size {} is not divisible by the {} devices of the batch axes "
         "(dcn x data x fsdp); use a batch size that is a multiple of {}",
         config.source, p.batch_size, batch_ways, batch_ways);
  }

  LlamaBuildOptions build;
  build.batch_size = p.batch_size;
  build.seq_len = p.seq_len;
  // No [mesh]: one device, no sharding annotations.
  if (config.mesh.axis_names.empty()) {
    WEFT_CHECK(config.sharding.empty(),
               "{}: [sharding] rules need a [mesh] to name axes of; add a [mesh] section or "
               "give --mesh",
               config.source);
  } else {
    build.run = &config;
  }
  p.forward = BuildLlamaForward(config.model, build);

  const HloComputation* fwd_entry = p.forward.module->entry_computation();
  std::vector<HloSharding> root_shardings = {HloSharding::Replicate()};
  for (const LlamaWeight& w : p.forward.weights) {
    const HloInstruction* param = fwd_entry->parameter_instruction(w.parameter_number);
    HloSharding s = param->has_sharding() ? param->sharding()->WithShardGroup(std::nullopt)
                                          : HloSharding::Replicate();
    CheckEvenSplit(config, w, s);
    root_shardings.push_back(std::move(s));
  }

  GradOptions grad;
  grad.wrt = p.forward.WeightParameters();
  grad.remat = options.remat.value_or(config.train.remat == Remat::kFull ? ScanRemat::kFull
                                                                         : ScanRemat::kNone);
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
  p.compiled = runtime::CompileForDevices(*p.step, p.num_devices);
  return p;
}

}  // namespace weft
