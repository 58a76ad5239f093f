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
// error names the file and what is wrong with it. Element types are
// PrimitiveTypes; safetensors' dtype names ("F32", ...) are converted here.
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

#include "weft/base/primitive_type.h"
#include "weft/runtime/executor_tensor.h"

namespace weft {

// safetensors' names of the element types weft reads and writes: "F32",
// "BF16", "F16", "I32", "I64" (f32, bf16, f16, s32, s64). The file format's
// names exist only here; everywhere else an element type is a PrimitiveType.
// Throws weft::Error naming the type for any other type.
std::string_view SafetensorsDTypeName(PrimitiveType type);
// The element type a safetensors dtype name stands for; nullopt for any other
// text (including weft's own names: "f32" is not a safetensors dtype).
std::optional<PrimitiveType> PrimitiveTypeFromSafetensorsName(std::string_view name);

// Tensors in files are the executor's host tensors (runtime::HostTensor:
// shape, element type, bytes little-endian row-major). Copies of a tensor
// share its bytes. Makers of typed tensors (values copied; bf16 and f16 given
// as raw 16-bit patterns), throwing weft::Error when the count of values
// differs from the shape's:
runtime::HostTensor F32Tensor(std::vector<int64_t> shape, std::span<const float> values);
runtime::HostTensor BF16Tensor(std::vector<int64_t> shape, std::span<const uint16_t> bits);
runtime::HostTensor F16Tensor(std::vector<int64_t> shape, std::span<const uint16_t> bits);
runtime::HostTensor I32Tensor(std::vector<int64_t> shape, std::span<const int32_t> values);
runtime::HostTensor I64Tensor(std::vector<int64_t> shape, std::span<const int64_t> values);
// Typed copies of a tensor's values; throw weft::Error when its element type
// differs. TensorToF32 also widens bf16 and f16 (exactly).
std::vector<float> TensorToF32(const runtime::HostTensor& tensor);
std::vector<uint16_t> TensorBF16Bits(const runtime::HostTensor& tensor);
std::vector<int32_t> TensorToI32(const runtime::HostTensor& tensor);
std::vector<int64_t> TensorToI64(const runtime::HostTensor& tensor);
// `tensor` itself when it is f32, else its values widened (bf16, f16) into a
// new f32 tensor; throws weft::Error for other element types.
runtime::HostTensor AsF32Tensor(const runtime::HostTensor& tensor);
// Same shape, element type and bytes.
bool SameTensor(const runtime::HostTensor& a, const runtime::HostTensor& b);

using TensorMap = std::map<std::string, runtime::HostTensor>;
// The same names, each with the same tensor (SameTensor).
bool SameTensors(const TensorMap& a, const TensorMap& b);
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
  PrimitiveType dtype = PrimitiveType::kF32;
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
