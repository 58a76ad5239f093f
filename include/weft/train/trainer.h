// `weft train`: the training loop over the compiled step (train/program.h).
//
// The loop is written once, per device (SPMD): every device (a thread of a
// LocalCluster, or an MPI rank) holds its shards of the float32 weights and
// of the AdamW moments, draws the same global batch from the seeded iterator,
// keeps its own rows, runs the per-device step program, and updates its
// shards. Global-norm clipping sums each device's Σg² over the tiles it owns
// (the lowest device holding a replicated tile counts it), exchanged with an
// all-gather and added in device order, so every device, and both backends,
// get the same bits.
//
// Output directory (--out, default runs/<config name>):
//   metrics.jsonl   one JSON object per step: step, loss, grad_norm, lr,
//                   tokens, tokens_per_s, step_s, skipped, and val_loss
//                   after a validation step
//   loss.svg        the loss curve (and the validation loss's), written at
//                   the end
//   checkpoint/     train/checkpoint.h; every train.checkpoint_every steps
//                   and at the end: model.safetensors (stacked weights by
//                   name), optimizer.safetensors ("<name>.m", "<name>.v"),
//                   state.json (step, data position, config hash, and the
//                   model's settings as "model.*" extras for `weft sample`)
//   tokenizer.model the SentencePiece model the run used
// Resume (--resume DIR) restores weights, moments, step and data position:
// the losses after a resume equal the uninterrupted run's bit for bit.
//
// The output directory has one owner (train/run_dir.h: an flock held for the
// whole run; a second process is refused with the holder's pid). When it
// already holds a checkpoint, the run continues from it (and says so; a
// checkpoint at the last step means there is nothing to do); metrics without
// a checkpoint are refused; `overwrite` is the only way to start over in
// place. A resume checks the checkpoint against the config ([model], the
// tokenizer) before anything in the directory is written, and prints the
// [train] settings it changes. A step whose gradient norm is not finite, or
// whose update would make any parameter or moment non-finite, is skipped on
// every device.
//
// Validation (train.validation_documents = K): K of the [data] documents,
// spread over them (train/dataset.h HeldOutDocuments), are held out of the
// batches. After every train.validation_every steps and after the
// schedule's last step, every device runs the step program on them without
// an update (its loss output only: no second program to compile), in
// windows of seq_len tokens cut as `weft eval` cuts a document, and the mean
// cross-entropy per predicted token is reported: in the progress line,
// metrics.jsonl's val_loss and loss.svg. It depends only on the step's
// weights, so a resumed run reports the same figures as an uninterrupted one.
//
// Gradient accumulation (train.grad_accum_steps = N, --grad-accum N): a step
// draws the same global batch of train.batch_size rows as without it, runs
// the program (built for batch_size / N rows) on its N consecutive
// micro-batches and sums their loss and gradients into buffers allocated
// once, each weighted by its share of the batch's loss tokens (the program's
// loss is a mean over its own loss tokens): the whole batch's loss and
// gradient, then one clip, one overflow check and one update. A micro-batch
// without loss tokens contributes nothing and is not run. The data order
// and the checkpoint's data position do not depend on N.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include "weft/models/llama_config.h"
#include "weft/runtime/communicator.h"
#include "weft/runtime/executor.h"

namespace weft {

struct StepMetrics {
  int64_t step = 0;  // 1-based: the update this step made
  double loss = 0;
  double grad_norm = 0;  // before clipping
  double lr = 0;
  int64_t tokens = 0;  // tokens in the batch (B x S; the whole batch when accumulating)
  double tokens_per_second = 0;
  double step_seconds = 0;
  bool skipped = false;  // non-finite gradients: no update
  // After this step's update, on the held-out documents (validation steps
  // only, train.validation_every): the mean cross-entropy per predicted
  // token, as `weft eval` of the weights on them gives it.
  std::optional<double> validation_loss;
};

struct TrainOptions {
  std::optional<MeshConfig> mesh;  // --mesh (replaces the config's [mesh])
  // --grad-accum N: replaces train.grad_accum_steps (at least 1).
  std::optional<int64_t> grad_accum;
  // --validation-documents K, --validation-every N: replace
  // train.validation_documents and train.validation_every (0 or more).
  std::optional<int64_t> validation_documents, validation_every;
  // --precision: replaces train.precision. With neither: on a resume the
  // run's recorded precision, else FastestPrecision(); the run says which.
  std::optional<Precision> precision;
  // --steps: total steps of the schedule, at least 1; unset: train.steps.
  std::optional<int64_t> steps;
  // --stop-after: stop after this many steps of this invocation, at least 1
  // (checkpointing there); unset: run to the end. The schedule still spans
  // `steps`. 0 is not "the default" for either: that is leaving them unset.
  std::optional<int64_t> stop_after;
  // --data FILE...: train on these UTF-8 text files (one document each)
  // instead of the config's [data] source.
  std::vector<std::filesystem::path> data_files;
  std::filesystem::path resume;  // --resume DIR (an out dir or its checkpoint/)
  // --init-from DIR (fine-tuning): a Hugging Face Llama directory
  // (train/hf_checkpoint.h) whose weights replace the random initialisation
  // (its config.json must match the config's [model]) and whose
  // tokenizer.model, when it has one, is the run's tokenizer; the optimizer
  // starts fresh. Refused with --resume, and when --out holds a checkpoint
  // (unless --overwrite).
  std::filesystem::path init_from;
  std::filesystem::path out;  // --out DIR; empty: runs/<config stem>
  // --overwrite: start over in `out` even though it holds an earlier run.
  bool overwrite = false;
  bool shard_as = true;             // --no-shard-as
  bool progress = true;             // progress bar on stderr (only on a terminal)
  std::ostream* log = nullptr;      // summary lines; stdout when null
  std::filesystem::path cache_dir;  // tokenizer cache (empty: the default)
  // Called on device 0 after every step.
  std::function<void(const StepMetrics&)> on_step;
};

struct TrainResult {
  std::vector<StepMetrics> steps;  // this invocation's steps (on device 0)
  std::filesystem::path out;
  int64_t num_devices = 0;
  // Device 0's executor: the largest peak over the steps (the step program's
  // buffers; weights, moments and inputs held by the trainer are not in it
  // unless the program holds them) and the bytes it sent in the last step.
  int64_t peak_bytes = 0;
  int64_t collective_bytes_per_step = 0;
};

// On in-process devices (threads), one per mesh device.
TrainResult Train(const RunConfig& config, const TrainOptions& options);
// On this MPI rank (device = rank); every rank calls it with the same config.
TrainResult TrainOnMpiRank(const RunConfig& config, const TrainOptions& options,
                           runtime::Communicator& comm);

// Where Train writes by default: runs/<config file stem>.
std::filesystem::path DefaultOutDir(const RunConfig& config);

// The precision a run takes when neither --precision nor its config says
// (nor, on a resume, the run's checkpoint): the one this CPU trains fastest.
// bf16 where the bf16 kernels have dot instructions (avx512_bf16 or AMX, as
// base/cpu.h reads them, unless WEFT_ISA forces an instruction set without
// them); else f32: without a bf16 unit every bf16 dot is widened to f32, so
// bf16 only adds conversions (875 against 891 tokens/s on a Zen 3).
// `why` says so, for the line a run starts with.
struct PrecisionChoice {
  Precision precision = Precision::kF32;
  std::string why;
};
PrecisionChoice FastestPrecision();

// ---------------------------------------------------------------------------
// Measuring training steps (`weft bench train`).

// What one step cost on device 0, beside its StepMetrics.
struct StepProfile {
  // Device 0's executor, this step's program runs (with gradient
  // accumulation the micro-batches' runs summed: seconds, counts, bytes;
  // peaks the largest).
  // Its collectives.seconds_others_ran also counts the time device 0's
  // thread ran other devices while device 0 waited in the update's sums
  // over devices.
  runtime::ExecutorStats executor;
  // Outside the program: accumulating micro-batch gradients, gradient norm,
  // checks, AdamW update (not the time device 0's thread ran other devices
  // meanwhile).
  double optimizer_seconds = 0;
};

struct TrainStepsOptions {
  std::optional<MeshConfig> mesh;  // replaces the config's [mesh]
  int64_t steps = 1;               // steps to run (the schedule spans at least these)
  bool profile = false;            // runtime::ExecutorOptions::profile on every device
  // StepProgramOptions::fuse; false: `weft bench train --unfused`.
  bool fuse_loops = true;
  std::filesystem::path cache_dir;  // tokenizer cache (empty: the default)
  // Called on device 0 after every step; step_seconds and tokens_per_s are
  // set (the step's wall time, batch drawing included).
  std::function<void(const StepMetrics&, const StepProfile&)> on_step;
};

struct TrainStepsInfo {
  // batch_size: rows per step (train.batch_size, however many micro-batches).
  int64_t num_devices = 0, batch_size = 0, seq_len = 0;
};

// `options.steps` steps of `config` from a fresh initialisation on in-process
// devices, as Train runs them (the same program, data order, per-device step
// and optimizer) but without a run directory: nothing is read or written
// except the tokenizer cache (no checkpoint, metrics or plot).
TrainStepsInfo TrainStepsInMemory(const RunConfig& config, const TrainStepsOptions& options);

}  // namespace weft
