// Training checkpoints: a directory holding
//   model-00001-of-0000N.safetensors      the parameters, one file per device
//   optimizer-00001-of-0000N.safetensors  that owns tiles of them (N devices),
//                                         and the optimizer state ("<param>.m",
//                                         "<param>.v": Adam moments) likewise
//   state.json   the index, written last: step, RNG state, data position,
//                config hash, free-form extra strings, and for every tensor
//                its global dtype and shape and its slices (which file holds
//                which box, with a CRC-32C per 4 MiB chunk of the slice's
//                bytes). docs/CHECKPOINT.md has the format.
//
// Saving is collective (SaveShardedCheckpoint): each device writes the tiles
// it owns, straight from its own buffers through one I/O buffer, so no
// process ever holds more than its shard. Loading reads only the boxes a
// device asks for (ReadTensorBox), on any mesh: slices are cut and joined as
// the new sharding needs. Each chunk read is checked against its checksum;
// every float read is checked finite.
//
// Loading verifies everything it reads and names what is wrong: the files'
// sizes, their safetensors headers against the index, every chunk's checksum
// (a tensor's bytes flipped or swapped), that no float tensor holds NaN or
// infinity, and state.json's fields (types, a negative step or data position,
// slices that do not tile their tensor). Saving refuses non-finite tensors,
// so a diverged run never overwrites its last good checkpoint.
//
// Saving is atomic: everything is written into a temporary sibling directory
// and fsynced, the index last, then swapped in with one rename (renameat2
// RENAME_EXCHANGE) and the old copy removed. A crash at any point, of any
// device, leaves the previous checkpoint loadable at the same path. Where the
// filesystem cannot exchange, the old directory is first renamed to
// "<dir>.old-…"; loading recovers it if the process died between the two
// renames. The temporary and old siblings a save makes carry a marker file
// naming them (".weft-owned"); only such siblings are ever cleaned up or
// recovered, so a user's own "checkpoint.old-backup" beside the checkpoint is
// never touched.
//
// Version 2 checkpoints (whole tensors in model.safetensors and
// optimizer.safetensors, one checksum per tensor) and version 1 (no
// checksums) are still read.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "weft/train/safetensors.h"

namespace weft {
namespace runtime {
class Communicator;
}

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
  // Called on every device after each stage ("shards": its files are written
  // and synced; device 0 only: "state.json", "synced"); a hook that throws or
  // kills the process aborts the save as a crash would at that point. For
  // tests. The environment variable WEFT_CRASH_AT=<stage>[:<device>[:<n>]]
  // kills the process (SIGKILL) when that device reaches that stage for the
  // n-th time, for crash tests of whole runs (docs/CHECKPOINT.md).
  std::function<void(std::string_view stage)> after_stage;
  // false: the two-rename fallback, as on filesystems without RENAME_EXCHANGE.
  bool exchange = true;
};

// The checksummed chunks of a slice are this long (its last may be shorter);
// a save or a read of a tensor box moves data through one buffer of this size.
inline constexpr int64_t kCheckpointChunkBytes = int64_t{4} << 20;

// The two halves of a checkpoint.
enum class CheckpointPart { kModel, kOptimizer };
std::string_view CheckpointPartName(CheckpointPart part);  // "model", "optimizer"

// A box of a tensor: where it starts in the tensor and how far it reaches.
struct TensorBox {
  std::vector<int64_t> offset, extent;
  int64_t num_elements() const;
  bool operator==(const TensorBox&) const = default;
};

// A box of a tensor that one device writes, read from a row-major buffer of
// `buffer_dims` elements per dim (at least the extent: a padded tile) with the
// box at its origin.
struct SavePiece {
  CheckpointPart part = CheckpointPart::kModel;
  std::string name;
  TensorSpec global;  // the whole tensor's dtype and shape
  TensorBox box;
  const std::byte* data = nullptr;
  std::vector<int64_t> buffer_dims;
};

// Collective over `comm`: every device calls it with the pieces it owns, so
// that the pieces of all devices tile every tensor exactly once (a replicated
// tile is given by one device only); device 0's `state` is saved. Throws
// weft::Error on every device when any device fails (nothing replaces the
// previous checkpoint then).
void SaveShardedCheckpoint(const std::filesystem::path& dir, std::span<const SavePiece> pieces,
                           const TrainState& state, runtime::Communicator& comm,
                           const CheckpointSaveOptions& options = {});

// Whole tensors from one process: the same files as one device saving
// everything.
void SaveCheckpoint(const std::filesystem::path& dir, const Checkpoint& checkpoint,
                    const CheckpointSaveOptions& options = {});

// A checkpoint's index: its state and where every tensor's slices are.
struct CheckpointSlice {
  std::string file;  // a file of the checkpoint directory
  TensorBox box;
  uint64_t begin = 0;            // where its bytes start in the file
  int64_t chunk_bytes = 0;       // checksummed pieces of its bytes, in order
  std::vector<uint32_t> crc32c;  // one per chunk; empty: not checksummed (version 1)
};
struct CheckpointTensor {
  TensorSpec spec;
  std::vector<CheckpointSlice> slices;
};
struct CheckpointIndex {
  std::filesystem::path dir;  // where it was found
  TrainState state;
  std::map<std::string, CheckpointTensor> model, optimizer;
  const std::map<std::string, CheckpointTensor>& part(CheckpointPart p) const {
    return p == CheckpointPart::kModel ? model : optimizer;
  }
};

// Reads and checks state.json and the files' sizes and headers; no tensor
// data. Throws weft::Error naming the directory and the problem (missing, not
// a checkpoint, damaged file). With `expected_config_hash`, a checkpoint
// written under another config is an error too.
CheckpointIndex OpenCheckpoint(const std::filesystem::path& dir,
                               std::optional<std::string_view> expected_config_hash = std::nullopt);

// Reads `box` of tensor `name` into `dest`, a row-major buffer of `dest_dims`
// (at least the box's extent) with the box at its origin; elements of `dest`
// outside the box are left alone. Reads only the chunks of the slices the box
// overlaps, through one buffer of at most one chunk. Throws weft::Error when
// the tensor is missing or a chunk is damaged or not finite.
void ReadTensorBox(const CheckpointIndex& index, CheckpointPart part, const std::string& name,
                   const TensorBox& box, std::span<std::byte> dest,
                   std::span<const int64_t> dest_dims);

// Every tensor whole, in one process (OpenCheckpoint, then ReadTensorBox).
Checkpoint LoadCheckpoint(const std::filesystem::path& dir,
                          std::optional<std::string_view> expected_config_hash = std::nullopt);

bool CheckpointExists(const std::filesystem::path& dir);

std::string RngStateToString(const std::mt19937_64& rng);
// Throws weft::Error naming `what` when the text is not a generator state.
std::mt19937_64 RngStateFromString(std::string_view text, std::string_view what);

}  // namespace weft
