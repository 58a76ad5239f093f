// Training checkpoints: a directory holding
//   model.safetensors      the model's parameters (by parameter name)
//   optimizer.safetensors  optimizer state; by convention "<param>.m" and
//                          "<param>.v" (Adam moments) and "<param>.master"
//                          (float32 master weights, when the model is bf16)
//   state.json             step, RNG state, data position, config hash, the
//                          two files' sizes and a CRC-32C of every tensor's
//                          bytes (base/crc32c.h), and free-form extra strings
//                          (docs/CHECKPOINT.md has the format)
//
// Loading verifies everything it reads and names what is wrong: the files'
// sizes, every tensor's checksum (a tensor renamed, swapped or with flipped
// bytes), that no float tensor holds NaN or infinity, and state.json's fields
// (types, a negative step or data position). Saving refuses non-finite
// tensors, so a diverged run never overwrites its last good checkpoint.
//
// Saving is atomic: everything is written into a temporary sibling directory
// and fsynced, then swapped in with one rename (renameat2 RENAME_EXCHANGE) and
// the old copy removed. A crash at any point leaves the previous checkpoint
// loadable at the same path. Where the filesystem cannot exchange, the old
// directory is first renamed to "<dir>.old-…"; LoadCheckpoint recovers it if
// the process died between the two renames. The temporary and old siblings a
// save makes carry a marker file naming them (".weft-owned"); only such
// siblings are ever cleaned up or recovered, so a user's own
// "checkpoint.old-backup" beside the checkpoint is never touched.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <random>
#include <string>
#include <string_view>

#include "weft/train/safetensors.h"

namespace weft {

struct TrainState {
  int64_t step = 0;           // optimizer steps completed
  std::string rng_state;      // RngStateToString of the trainer's generator
  int64_t data_position = 0;  // BatchIterator::position()
  std::string config_hash;    // RunConfig::Hash()
  Metadata extra;             // anything else the trainer wants back
  bool operator==(const TrainState&) const = default;
};

struct Checkpoint {
  TensorMap model;
  TensorMap optimizer;
  TrainState state;
};

struct CheckpointSaveOptions {
  // Called after each stage ("model.safetensors", "optimizer.safetensors",
  // "state.json", "synced"); a hook that throws aborts the save as a crash
  // would at that point. For tests.
  std::function<void(std::string_view stage)> after_stage;
  // false: the two-rename fallback, as on filesystems without RENAME_EXCHANGE.
  bool exchange = true;
};

void SaveCheckpoint(const std::filesystem::path& dir, const Checkpoint& checkpoint,
                    const CheckpointSaveOptions& options = {});

// Throws weft::Error naming the directory and the problem (missing, not a
// checkpoint, damaged file). With `expected_config_hash`, a checkpoint written
// under another config is an error too.
Checkpoint LoadCheckpoint(const std::filesystem::path& dir,
                          std::optional<std::string_view> expected_config_hash = std::nullopt);

// Whether `dir` (or a copy left by an interrupted fallback save) holds a
// checkpoint to resume from.
bool CheckpointExists(const std::filesystem::path& dir);

std::string RngStateToString(const std::mt19937_64& rng);
// Throws weft::Error naming `what` when the text is not a generator state.
std::mt19937_64 RngStateFromString(std::string_view text, std::string_view what);

}  // namespace weft
