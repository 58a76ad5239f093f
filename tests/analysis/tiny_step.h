// Shared by the planner's tests: the tiny config's training step compiled for
// a mesh of 4 devices, and one execution of it on the executor, to compare
// predictions with measurements.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "weft/analysis/memory_plan.h"
#include "weft/runtime/run_command.h"
#include "weft/train/program.h"

namespace weft::analysis::testing {

inline const std::filesystem::path kSource = WEFT_SOURCE_DIR;

// configs/tiny.toml on fsdp=2 x tensor=2, batch 4 x seq 64 (runs in well under
// a second), with the given remat and shard_as, fused as weft train runs it
// unless fuse is false, in the config's precision (bf16) unless told.
inline StepProgram TinyStep(Remat remat, bool shard_as = true,
                            const std::string& mesh = "fsdp=2,tensor=2", bool fuse = true,
                            std::optional<Precision> precision = std::nullopt) {
  RunConfig config = LoadRunConfig(kSource / "configs/tiny.toml");
  config.mesh = ParseMeshFlag(mesh);
  StepProgramOptions o;
  o.batch_size = 4;
  o.seq_len = 64;
  o.remat = RematPolicy{remat, {}, {}};
  o.shard_as = shard_as;
  o.fuse = fuse;
  o.precision = precision;
  return BuildStepProgram(config, o);
}

// What the executor measures running the program once per device with
// seeded random inputs the caller keeps (as the trainer does).
inline std::vector<runtime::ExecutorStats> Execute(const StepProgram& p, uint64_t seed = 7) {
  runtime::LocalCluster cluster(p.num_devices);
  const std::vector<runtime::HostTensor> inputs =
      runtime::RandomInputs(p.compiled.input_shapes, seed);
  std::vector<runtime::ExecutorStats> stats;
  runtime::RunSharded(p.compiled, inputs, cluster, &stats);
  return stats;
}

inline MemoryPlanOptions ExecutorLikeOptions(const StepProgram& p) {
  MemoryPlanOptions o;
  o.executor_accounting = true;
  o.num_data_inputs = StepProgram::kNumDataInputs;
  for (const LlamaWeight& w : p.forward.weights) o.weight_names.push_back(w.name);
  return o;
}

}  // namespace weft::analysis::testing
