// What `weft train` does before the devices start (trainer.cc runs the
// devices): the run's shared state, the resume chosen and checked against
// the config, the step program built, the memory check and the updates'
// settings. Private to trainer.cc and trainer_setup.cc.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "weft/data/tokenizer.h"
#include "weft/models/llama_config.h"
#include "weft/runtime/executor.h"
#include "weft/train/checkpoint.h"
#include "weft/train/dataset.h"
#include "weft/train/hf_checkpoint.h"
#include "weft/train/optimizer.h"
#include "weft/train/program.h"
#include "weft/train/run_dir.h"
#include "weft/train/trainer.h"

namespace weft::train {

// What every device of a run shares (read-only while the devices run).
struct Run {
  RunConfig config;  // with the --mesh / --steps overrides applied
  TrainOptions options;
  StepProgram program;
  std::optional<Dataset> dataset;  // always set by Prepare
  // The held-out documents (Dataset::validation) cut into windows of the
  // program's seq_len as `weft eval` cuts them; empty without validation.
  std::vector<std::vector<int32_t>> validation_windows;
  std::optional<CheckpointIndex> resume;    // its tensors are read by each device
  std::filesystem::path resume_dir;         // where `resume` was read from
  std::optional<HfModel> init;              // --init-from's weights
  std::optional<Tokenizer> init_tokenizer;  // and its tokenizer.model, when it has one
  bool complete = false;                    // --out's checkpoint is at the last step already
  std::filesystem::path out;
  LrSchedule schedule;
  AdamWHyperParams hyper;
  std::vector<bool> decay;        // per weight
  runtime::ExecutorOptions exec;  // the same GEMM threads on both backends
};

// The model's settings as a checkpoint's state.json keeps them.
std::map<std::string, std::string> ModelExtras(const LlamaConfig& m);
// The [train] settings a resume may change (each change is printed), and
// train.validation_documents, which it may not (Prepare refuses a change:
// the training documents would change under the run's data position).
std::map<std::string, std::string> TrainExtras(const TrainConfig& t);
// The CRC-32C of the dataset's tokenizer model, as state.json keeps it.
std::string TokenizerChecksum(const Dataset& dataset);

// Refuses, before anything is allocated, a run that cannot fit in this
// machine's memory: the step program's peak as the planner predicts it
// (analysis/memory_plan.h, the executor's own rules on sizes; weights held
// for the whole step), plus the AdamW moments the trainer holds beside the
// weights, for each device this process runs.
void CheckFitsInMemory(const Run& run, int64_t devices_here);

// The learning-rate schedule, AdamW settings and GEMM threads of `run`.
void SetUpUpdates(Run* run);

// Everything before the devices start; the same on every process. `lock`
// (null on MPI ranks other than 0) takes the output directory first;
// `in_process`: all devices are threads of this process (else one per rank).
std::unique_ptr<Run> Prepare(const RunConfig& config, const TrainOptions& options,
                             int64_t available_devices, std::optional<RunDirLock>* lock,
                             bool in_process);

}  // namespace weft::train
