// The compiled training step: one function that `weft train` and `weft plan`
// share, so the planner analyses exactly the program the trainer runs.
//
//   config -> BuildLlamaForward (sharding rules from the config, activations
//   constrained) -> BuildTrainingStep (loss and every weight's gradient,
//   scan backward tied with shard_as) -> the root's shardings fixed
//   (loss replicated, each gradient sharded like its weight) ->
//   sharding propagation -> SPMD partitioning for the mesh's device count.
//
// Everything a shape or a mesh can get wrong is checked here, before any
// compute: the mesh against the device count, the batch against the batch
// axes, every sharded weight dim against its axes.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>

#include "weft/autodiff/grad.h"
#include "weft/models/llama.h"
#include "weft/models/llama_config.h"
#include "weft/runtime/run_command.h"

namespace weft {

struct StepProgramOptions {
  std::optional<int64_t> batch_size;  // global rows per step; unset: train.batch_size
  // Gradient accumulation (train.grad_accum_steps, `weft train --grad-accum`):
  // the program is built for the micro-batch, batch_size / grad_accum_steps
  // rows, which the trainer runs grad_accum_steps times per optimizer step.
  // 1: the whole batch in one program run (the planner's default).
  int64_t grad_accum_steps = 1;
  std::optional<int64_t> seq_len;  // unset: model.seq_len
  // The mixed-precision policy (llama_config.h Precision); unset:
  // train.precision, bf16 when the config does not say (the trainer has
  // chosen one by then, FastestPrecision).
  std::optional<Precision> precision;
  std::optional<RematPolicy> remat;  // unset: the config's train.remat
  bool shard_as = true;              // false: --no-shard-as
  // Output, input and loop fusion (compiler/fusion.h) on the per-device
  // program, as a chip's compiler fuses and as weft train's executor runs
  // it; false: the unfused program (`weft bench train --unfused`).
  bool fuse = true;
  // When > 0, the mesh must have exactly this many devices.
  int64_t expected_devices = 0;
  // The devices' slices (CompileOptions::slices: collectives across slices
  // run hierarchically); unset: the mesh's (MeshConfig::num_slices).
  std::optional<int64_t> slices;
};

struct StepProgram {
  // The program's rows: the micro-batch when StepProgramOptions::grad_accum_steps > 1.
  int64_t batch_size = 0, seq_len = 0, num_devices = 1;
  LlamaForward forward;                // the forward module and its weights
  std::unique_ptr<HloModule> step;     // global step module, every instruction sharded
  compiler::CompiledProgram compiled;  // the per-device program and its leaves
  // Leaves: inputs are the 5 data inputs then the weights (forward.weights
  // order); outputs are the loss then one gradient per weight.
  static constexpr int64_t kNumDataInputs = LlamaForward::kNumDataInputs;
};

// Throws weft::Error naming the config file and what to change: the model
// config (ValidateLlamaConfig), the mesh's size (at most kMaxMeshDevices),
// batch and sequence (at least 1; the step's largest activations must be
// sizeable in int64 bytes), the batch against grad_accum_steps and the
// (micro-)batch against the batch axes, the sharding
// rules (CheckShardingRules), every weight split against its axes — all
// before propagation and partitioning.
StepProgram BuildStepProgram(const RunConfig& config, const StepProgramOptions& options = {});

// BuildStepProgram's checks alone, in milliseconds whatever the mesh's size
// (nothing is built): what `weft plan` runs before deriving anything from
// the mesh.
void CheckStepProgram(const RunConfig& config, const StepProgramOptions& options = {});

// "fsdp=2,tensor=2" (major to minor) -> MeshConfig; throws naming the flag
// (axes weft gives a role, CheckMeshAxisRole; sizes positive, at most
// kMaxMeshDevices devices in all).
MeshConfig ParseMeshFlag(std::string_view text);

// `--dcn fsdp=2`: the mesh's axes span that many slices each (JAX's
// dcn_mesh_shape); the mesh's sizes (from --mesh or [mesh]) stay per slice,
// so axis fsdp of a --mesh fsdp=64 has 128 devices. Replaces any [dcn] of
// the config. Throws naming the flag (an axis the mesh lacks, sizes below
// 1, more than kMaxMeshDevices devices).
MeshConfig ApplyDcnFlag(MeshConfig mesh, std::string_view text);

// "fsdp=64,tensor=4" (over all slices), with " (dcn fsdp=2)" for a hybrid mesh.
std::string MeshText(const MeshConfig& mesh);

}  // namespace weft
