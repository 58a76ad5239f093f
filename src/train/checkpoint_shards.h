// The tensor files of a checkpoint: writing a device's pieces as one
// safetensors file with a checksum per chunk, and reading boxes of tensors
// back from the slices that hold them. Private to checkpoint.cc.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "weft/train/checkpoint.h"

namespace weft::train {

inline constexpr int64_t kChunkBytes = kCheckpointChunkBytes;

// A slice one device wrote, for the index.
struct WrittenSlice {
  CheckpointPart part = CheckpointPart::kModel;
  std::string name;
  TensorSpec global;
  CheckpointSlice slice;
};

// Writes `pieces` (all of one part) into `dir / file` as a safetensors file
// whose tensors carry the pieces' names, streaming each box through one
// buffer of kChunkBytes, then fsyncs it. Returns the slices it wrote.
std::vector<WrittenSlice> WriteShardFile(const std::filesystem::path& dir, const std::string& file,
                                         std::span<const SavePiece* const> pieces);

// "tensor 'NAME' (PART) holds a non-finite value (element I of the box at
// [OFFSET])" for the first piece that holds one; nullopt when all are finite.
std::optional<std::string> FirstNonFinitePiece(std::span<const SavePiece> pieces);

// Throws weft::Error (via `bad`) unless the slices lie inside the tensor,
// are pairwise disjoint and cover it.
void CheckTiling(const std::string& name, const CheckpointTensor& tensor,
                 const std::function<void(const std::string&)>& bad);

// The files the index names against the directory: each file has the size
// `file_bytes` records, and its safetensors header holds exactly the slices
// the index puts in it, with their types, extents and places. `state` names
// the index in errors.
void CheckFilesAgainstIndex(const CheckpointIndex& index,
                            const std::map<std::string, uint64_t>& file_bytes,
                            const std::filesystem::path& state);

}  // namespace weft::train
