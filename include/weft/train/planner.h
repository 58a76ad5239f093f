// `weft plan`: the training step `weft train` would run (train/program.h:
// build, autodiff, propagate, partition), stopped before execution and
// analysed for one chip type on a mesh of any size: per-device memory with a
// breakdown and the largest buffers at the peak, collectives over ICI and
// DCN, FLOPs, step time, MFU and a verdict.
//
// Memory per chip = the program's buffers at their peak (memory_plan.h, with
// the weights resident for the whole step, as the trainer holds them) + the
// optimizer state the trainer keeps beside them (AdamW's m and v, f32).
// The precision policy (models/llama_config.h Precision) is the program's:
// the planner builds the step `weft train` would run under it and sizes its
// own element types. Static memory
// = weights + gradients + optimizer state (what scales with the parameter
// count, whatever the batch).
//
// Remat: "none" (the forward scan saves every residual), "full" (it saves
// each layer's input and the backward recomputes the layer), "offload" (full,
// with the saved per-layer inputs kept in host memory: counted apart, not
// against HBM, their transfers timed at the host link's bandwidth).
//
// Slices: a hybrid mesh whose major axis spans `slices` slices of equal size
// (device d is in slice d / (N / slices)); a collective whose group crosses
// slices goes over DCN. Unset: the size of a major axis named "dcn", else 1,
// or N / max_slice_chips when the mesh is larger than the chip's largest
// slice.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "weft/analysis/chips.h"
#include "weft/analysis/collective_plan.h"
#include "weft/analysis/cost_model.h"
#include "weft/analysis/memory_plan.h"
#include "weft/analysis/step_sim.h"
#include "weft/models/llama_config.h"
#include "weft/train/program.h"

namespace weft {

struct PlanOptions {
  std::string chip = "v6e";
  std::filesystem::path chips_file;   // empty: analysis::FindChipTable(config file)
  std::optional<MeshConfig> mesh;     // replaces the config's [mesh]
  std::optional<int64_t> slices;      // unset: see the file comment; set: at least 1
  std::optional<int64_t> batch_size;  // unset: train.batch_size; set: at least 1
  std::optional<int64_t> seq_len;     // unset: model.seq_len; set: at least 1
  // Micro-batches per optimizer step (--grad-accum; unset: the config's
  // train.grad_accum_steps): the program is planned for batch / grad_accum
  // sequences and run grad_accum times.
  std::optional<int64_t> grad_accum;
  // A remat preset or activation list (models/llama_config.h RematPolicy:
  // "none", "full", "offload", "save_qkv_proj", "q_proj,out_proj", ...);
  // "": the config's train.remat.
  std::string remat;
  bool shard_as = true;
  // Unset: the config's train.precision; bf16 when it does not say.
  std::optional<Precision> precision;
  int64_t top_buffers = 10;
  int64_t timeline_points = 400;
  bool keep_program = false;  // fill StepPlan::program_text
  // Replaces the chip's matrix_efficiency, in (0, 1] (weft plan-validate
  // --fit searches it).
  std::optional<double> matrix_efficiency;
};

// A buffer live at the peak, with what the global program says about it.
struct PeakBuffer {
  analysis::LiveBuffer buffer;
  bool global_known = false;            // the instruction exists in the global step
  Shape global_shape;                   // when known
  std::string sharding;                 // when known: HloSharding text
  std::vector<std::string> split_axes;  // mesh axes that split it (when known)
};

// A global buffer carrying the stacked layer dim that a mesh axis does not split.
struct UnsplitStackedBuffer {
  std::string instruction, computation;
  Shape global_shape;
  std::string sharding;
  int64_t local_bytes = 0;
};

struct StepPlan {
  // What was planned.
  std::string config_source;
  LlamaConfig model;
  analysis::Chip chip;
  std::string chips_file;
  MeshConfig mesh;
  int64_t num_devices = 1, slices = 1;
  Precision precision = Precision::kBf16;
  std::string remat;  // RematPolicy::Text(): "none", "full", "offload", a preset, names
  RematPolicy remat_policy;
  bool shard_as = true;
  int64_t batch_size = 0, seq_len = 0;           // the global batch per optimizer step
  int64_t grad_accum = 1, micro_batch_size = 0;  // micro_batch_size x grad_accum = batch_size
  int64_t num_parameters = 0;

  // Memory per device.
  analysis::MemoryPlan memory;  // program buffers, weights resident
  int64_t parameter_bytes = 0;  // the local weight shards (f32 master weights)
  int64_t gradient_bytes = 0;   // the local gradients
  int64_t optimizer_bytes = 0;  // outside the program
  // With grad_accum > 1: the float32 sums of the local gradients, outside the program.
  int64_t accumulator_bytes = 0;
  int64_t static_bytes() const {
    return parameter_bytes + gradient_bytes + optimizer_bytes + accumulator_bytes;
  }
  int64_t peak_bytes() const { return memory.peak_bytes + optimizer_bytes + accumulator_bytes; }
  double hbm_bytes() const { return chip.hbm_bytes; }
  bool fits() const { return static_cast<double>(peak_bytes()) <= chip.hbm_bytes; }
  double margin_bytes() const { return chip.hbm_bytes - static_cast<double>(peak_bytes()); }
  std::vector<PeakBuffer> top_buffers;
  // The "fsdp" axis (when the mesh has one) against every global instruction
  // of rank >= 3 whose leading dim is n_layers.
  std::string stacked_axis;
  std::vector<UnsplitStackedBuffer> unsplit_stacked;

  analysis::CollectivePlan collectives;
  int64_t collective_device = 0;    // the device simulated: the one sending the most bytes
  analysis::FlopCount flops;        // per device
  double model_flops = 0;           // per device
  int64_t host_transfer_bytes = 0;  // per device per step (offload)
  analysis::StepTime time;          // the optimizer step: grad_accum micro-steps
  // Predicted tokens/s per chip: the global batch's tokens over the devices
  // and the step (0 when the step takes no time).
  double tokens_per_s_per_chip() const {
    return time.step_s > 0 ? static_cast<double>(batch_size * seq_len) /
                                 static_cast<double>(num_devices) / time.step_s
                           : 0;
  }

  std::vector<std::string> warnings;
  std::string program_text;  // the per-device program, with PlanOptions::keep_program
  double compile_seconds = 0, analysis_seconds = 0;
};

// Throws weft::Error for bad input, naming the flag or key and what to
// change (a --batch, --seq or --slices below 1, unknown chip, mesh not
// matching the batch or the weights, slices not dividing the major axis,
// ...), all before the program is built. The flags are named as the CLI
// spells them (--batch, --seq, --slices, --remat, --mesh).
StepPlan PlanTrainingStep(const RunConfig& config, const PlanOptions& options);

// Model FLOPs of one training step over the whole batch (all devices): 6 x
// matmul parameters x tokens + 3 x the causal attention forward
// (analysis/cost_model.h explains the counting).
double ModelFlopsPerStep(const LlamaConfig& model, int64_t batch, int64_t seq);

}  // namespace weft
