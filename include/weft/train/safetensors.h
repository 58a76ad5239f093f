// safetensors files (https://github.com/huggingface/safetensors), readable by
// the standard readers:
//
//   8 bytes     N, little-endian unsigned: the header's length
//   N bytes     JSON: {"name": {"dtype": "F32", "shape": [2, 3],
//                "data_offsets": [begin, end]}, …, "__metadata__": {"k": "v"}}
//               padded with spaces so the data starts 8-byte aligned
//   the rest    tensor bytes, little-endian, row-major; offsets relative to
//               the start of this section, which they cover without gaps
//
// We write tensors in name order and read with strict validation: every
// error names the file and what is wrong with it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace weft {

enum class TensorDType { kF32, kBF16, kF16, kI32, kI64 };

std::string_view TensorDTypeName(TensorDType dtype);  // "F32", "BF16", "F16", "I32", "I64"
int64_t TensorDTypeSize(TensorDType dtype);
// The dtype a name of TensorDTypeName stands for; nullopt for any other text.
std::optional<TensorDType> TensorDTypeFromName(std::string_view name);

// A dense host array with its bytes (little-endian, row-major).
struct HostTensor {
  TensorDType dtype = TensorDType::kF32;
  std::vector<int64_t> shape;
  std::vector<std::byte> bytes;

  static HostTensor F32(std::vector<int64_t> shape, std::span<const float> values);
  // bfloat16 given as raw 16-bit patterns.
  static HostTensor BF16(std::vector<int64_t> shape, std::span<const uint16_t> bits);
  // IEEE half precision given as raw 16-bit patterns.
  static HostTensor F16(std::vector<int64_t> shape, std::span<const uint16_t> bits);
  static HostTensor I32(std::vector<int64_t> shape, std::span<const int32_t> values);
  static HostTensor I64(std::vector<int64_t> shape, std::span<const int64_t> values);

  int64_t num_elements() const;
  // Typed copies; throw weft::Error when the dtype differs.
  std::vector<float> ToF32() const;  // F32, or BF16 / F16 widened exactly
  std::vector<uint16_t> BF16Bits() const;
  std::vector<int32_t> ToI32() const;
  std::vector<int64_t> ToI64() const;

  bool operator==(const HostTensor&) const = default;
};

using TensorMap = std::map<std::string, HostTensor>;
using Metadata = std::map<std::string, std::string>;

struct SafetensorsFile {
  TensorMap tensors;
  Metadata metadata;
};

// Writes atomically (temporary sibling, fsync, rename). Names must be
// non-empty and not "__metadata__"; each tensor's bytes must match its shape.
void WriteSafetensors(const std::filesystem::path& path, const TensorMap& tensors,
                      const Metadata& metadata = {});
// The file's bytes without writing them (the same bytes WriteSafetensors writes).
std::string SerializeSafetensors(const TensorMap& tensors, const Metadata& metadata,
                                 std::string_view what = "safetensors");

SafetensorsFile ReadSafetensors(const std::filesystem::path& path);
// Parses bytes already in memory; `what` names them in errors.
SafetensorsFile ParseSafetensors(std::string_view bytes, std::string_view what);

// A tensor's type and shape, without its bytes.
struct TensorSpec {
  TensorDType dtype = TensorDType::kF32;
  std::vector<int64_t> shape;
  int64_t num_bytes() const;
  bool operator==(const TensorSpec&) const = default;
};
using TensorSpecs = std::map<std::string, TensorSpec>;

// The first bytes of a file holding `specs` (the length and the padded JSON
// header); the tensors' bytes follow in name order, each num_bytes() long.
// For writers that stream the data instead of holding it.
std::string SafetensorsPrefix(const TensorSpecs& specs, const Metadata& metadata,
                              std::string_view what);

// Where a tensor's bytes lie in a safetensors file (offsets from the file's start).
struct SafetensorsEntry {
  TensorSpec spec;
  uint64_t begin = 0, end = 0;
};
struct SafetensorsHeader {
  std::map<std::string, SafetensorsEntry> tensors;
  Metadata metadata;
};
// Validates a file's header as ParseSafetensors does (the entries cover the
// data section exactly) from `prefix`, its first bytes (at least the header),
// and `file_bytes`, its size; reads no tensor data.
SafetensorsHeader ParseSafetensorsHeader(std::string_view prefix, uint64_t file_bytes,
                                         std::string_view what);
// Reads only the header of the file at `path`.
SafetensorsHeader ReadSafetensorsHeader(const std::filesystem::path& path);

}  // namespace weft
