#include "weft/train/safetensors.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "weft/base/algorithm.h"
#include "weft/base/atomic_file.h"
#include "weft/base/error.h"
#include "weft/base/memory.h"
#include "weft/runtime/executor_tensor.h"

namespace weft {
namespace {

static_assert(std::endian::native == std::endian::little,
              "safetensors is little-endian; this code copies bytes as they are in memory");

using Json = nlohmann::json;

// The reference implementation refuses larger headers too.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;
constexpr std::string_view kMetadataKey = "__metadata__";

using runtime::HostTensor;

template <typename T>
HostTensor Make(PrimitiveType dtype, std::vector<int64_t> shape, std::span<const T> values) {
  const Shape array(dtype, std::move(shape));
  WEFT_CHECK(array.ElementsCount() == static_cast<int64_t>(values.size()),
             "a tensor of shape {} needs {} values, got {}", array.ToString(),
             array.ElementsCount(), values.size());
  HostTensor tensor = HostTensor::Uninitialized(array);
  if (!values.empty()) std::memcpy(tensor.mutable_raw_data(), values.data(), values.size_bytes());
  return tensor;
}

template <typename T>
std::vector<T> Copy(const HostTensor& tensor, PrimitiveType expected) {
  WEFT_CHECK(tensor.element_type() == expected, "the tensor is {}, not {}",
             PrimitiveTypeName(tensor.element_type()), PrimitiveTypeName(expected));
  std::vector<T> out(static_cast<size_t>(tensor.element_count()));
  if (!out.empty()) std::memcpy(out.data(), tensor.raw_data(), out.size() * sizeof(T));
  return out;
}

// The element types safetensors files hold in weft, with the format's names.
struct FileType {
  PrimitiveType type;
  std::string_view name;
};
constexpr FileType kFileTypes[] = {{PrimitiveType::kF32, "F32"},
                                   {PrimitiveType::kBF16, "BF16"},
                                   {PrimitiveType::kF16, "F16"},
                                   {PrimitiveType::kS32, "I32"},
                                   {PrimitiveType::kS64, "I64"}};

}  // namespace

std::string_view SafetensorsDTypeName(PrimitiveType type) {
  for (const FileType& t : kFileTypes) {
    if (t.type == type) return t.name;
  }
  Fail("safetensors files in weft hold f32, bf16, f16, s32 or s64 tensors, not {}",
       PrimitiveTypeName(type));
}

std::optional<PrimitiveType> PrimitiveTypeFromSafetensorsName(std::string_view name) {
  for (const FileType& t : kFileTypes) {
    if (t.name == name) return t.type;
  }
  return std::nullopt;
}

namespace {

// Product of dims times the element size; nullopt on overflow or a negative dim.
std::optional<uint64_t> ByteSize(std::span<const int64_t> shape, int64_t element_size) {
  uint64_t total = static_cast<uint64_t>(element_size);
  for (int64_t dim : shape) {
    if (dim < 0) return std::nullopt;
    if (dim != 0 && total > std::numeric_limits<uint64_t>::max() / static_cast<uint64_t>(dim)) {
      return std::nullopt;
    }
    total *= static_cast<uint64_t>(dim);
  }
  return total;
}

// The JSON header, padded with spaces so that the data section is 8-byte aligned.
std::string Header(const TensorSpecs& specs, const Metadata& metadata, std::string_view what) {
  Json header = Json::object();
  uint64_t offset = 0;
  for (const auto& [name, spec] : specs) {
    WEFT_CHECK(!name.empty() && name != kMetadataKey,
               "{}: '{}' cannot name a tensor (empty or reserved)", what, name);
    const std::string_view dtype = SafetensorsDTypeName(spec.dtype);
    auto size = ByteSize(spec.shape, ByteWidth(spec.dtype));
    WEFT_CHECK(size.has_value(), "{}: tensor '{}' has an impossible shape [{}]", what, name,
               fmt::join(spec.shape, ", "));
    header[name] = {
        {"dtype", dtype}, {"shape", spec.shape}, {"data_offsets", {offset, offset + *size}}};
    offset += *size;
  }
  if (!metadata.empty()) header[std::string(kMetadataKey)] = metadata;
  std::string text;
  try {
    text = header.dump();
  } catch (const Json::exception&) {
    Fail("{}: tensor names and metadata must be valid UTF-8", what);
  }
  text.resize((text.size() + 8 + 7) / 8 * 8 - 8, ' ');
  return text;
}

// The specs of `tensors`.
TensorSpecs SpecsOf(const TensorMap& tensors, std::string_view what) {
  TensorSpecs specs;
  for (const auto& [name, tensor] : tensors) {
    WEFT_CHECK(tensor.valid() && tensor.shape().IsArray(), "{}: tensor '{}' holds no array", what,
               name);
    specs[name] = {tensor.element_type(), tensor.dimensions()};
  }
  return specs;
}

std::string LengthPrefix(uint64_t length) {
  std::string prefix(8, '\0');
  std::memcpy(prefix.data(), &length, 8);
  return prefix;
}

[[noreturn]] void Invalid(std::string_view what, const std::string& problem) {
  Fail("{} is not a valid safetensors file: {}", what, problem);
}

struct Entry {
  std::string name;
  uint64_t begin = 0, end = 0;
};

// The tensors' byte ranges cover the data section exactly: no overlaps, no
// holes.
void CheckCoverage(std::vector<Entry> entries, uint64_t data_size, std::string_view what) {
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t covered = 0;
  const Entry* previous = nullptr;
  for (const Entry& entry : entries) {
    if (entry.begin < covered) {
      Invalid(what,
              fmt::format("tensors '{}' and '{}' overlap (bytes {}..{} and {}..{})", previous->name,
                          entry.name, previous->begin, previous->end, entry.begin, entry.end));
    }
    if (entry.begin > covered) {
      Invalid(what, fmt::format("data bytes {}..{} belong to no tensor", covered, entry.begin));
    }
    covered = entry.end;
    if (entry.end > entry.begin) previous = &entry;
  }
  if (covered != data_size) {
    Invalid(what, fmt::format("data bytes {}..{} belong to no tensor", covered, data_size));
  }
}

}  // namespace

HostTensor F32Tensor(std::vector<int64_t> shape, std::span<const float> values) {
  return Make(PrimitiveType::kF32, std::move(shape), values);
}
HostTensor BF16Tensor(std::vector<int64_t> shape, std::span<const uint16_t> bits) {
  return Make(PrimitiveType::kBF16, std::move(shape), bits);
}
HostTensor F16Tensor(std::vector<int64_t> shape, std::span<const uint16_t> bits) {
  return Make(PrimitiveType::kF16, std::move(shape), bits);
}
HostTensor I32Tensor(std::vector<int64_t> shape, std::span<const int32_t> values) {
  return Make(PrimitiveType::kS32, std::move(shape), values);
}
HostTensor I64Tensor(std::vector<int64_t> shape, std::span<const int64_t> values) {
  return Make(PrimitiveType::kS64, std::move(shape), values);
}

std::vector<float> TensorToF32(const HostTensor& tensor) {
  const PrimitiveType dtype = tensor.element_type();
  if (dtype != PrimitiveType::kBF16 && dtype != PrimitiveType::kF16) {
    return Copy<float>(tensor, PrimitiveType::kF32);
  }
  const std::vector<uint16_t> bits = Copy<uint16_t>(tensor, dtype);
  std::vector<float> out(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) {
    out[i] = dtype == PrimitiveType::kBF16 ? runtime::Bf16BitsToFloat(bits[i])
                                           : runtime::F16BitsToFloat(bits[i]);
  }
  return out;
}
HostTensor AsF32Tensor(const HostTensor& tensor) {
  if (tensor.element_type() == PrimitiveType::kF32) return tensor;
  return F32Tensor(tensor.dimensions(), TensorToF32(tensor));
}

std::vector<uint16_t> TensorBF16Bits(const HostTensor& tensor) {
  return Copy<uint16_t>(tensor, PrimitiveType::kBF16);
}
std::vector<int32_t> TensorToI32(const HostTensor& tensor) {
  return Copy<int32_t>(tensor, PrimitiveType::kS32);
}
std::vector<int64_t> TensorToI64(const HostTensor& tensor) {
  return Copy<int64_t>(tensor, PrimitiveType::kS64);
}

bool SameTensor(const HostTensor& a, const HostTensor& b) {
  if (a.valid() != b.valid()) return false;
  if (!a.valid()) return true;
  return a.shape() == b.shape() &&
         (a.byte_size() == 0 || std::memcmp(a.raw_data(), b.raw_data(), a.byte_size()) == 0);
}

bool SameTensors(const TensorMap& a, const TensorMap& b) {
  return a.size() == b.size() &&
         std::equal(a.begin(), a.end(), b.begin(), [](const auto& x, const auto& y) {
           return x.first == y.first && SameTensor(x.second, y.second);
         });
}

int64_t TensorSpec::num_bytes() const {
  int64_t n = ByteWidth(dtype);
  for (int64_t dim : shape) n *= dim;
  return n;
}

std::string SafetensorsPrefix(const TensorSpecs& specs, const Metadata& metadata,
                              std::string_view what) {
  std::string header = Header(specs, metadata, what);
  return LengthPrefix(header.size()) + header;
}

std::string SerializeSafetensors(const TensorMap& tensors, const Metadata& metadata,
                                 std::string_view what) {
  std::string out = SafetensorsPrefix(SpecsOf(tensors, what), metadata, what);
  for (const auto& [name, tensor] : tensors) {
    out.append(static_cast<const char*>(tensor.raw_data()), tensor.byte_size());
  }
  return out;
}

void WriteSafetensors(const std::filesystem::path& path, const TensorMap& tensors,
                      const Metadata& metadata) {
  const std::string prefix =
      SafetensorsPrefix(SpecsOf(tensors, path.string()), metadata, path.string());
  AtomicOutputFile file(path);
  file.Write(prefix);
  for (const auto& [name, tensor] : tensors) file.Write(tensor.raw_data(), tensor.byte_size());
  file.Commit();
}

namespace {

// The header of `file`, read and checked (ParseSafetensorsHeader) against
// the file's size; no tensor data is read.
SafetensorsHeader ReadHeader(const InputFile& file, std::string_view what) {
  const uint64_t size = file.size();
  std::string prefix(static_cast<size_t>(std::min<uint64_t>(size, 8)), '\0');
  file.ReadAt(0, prefix.data(), prefix.size());
  if (size >= 8) {
    uint64_t header_length = 0;
    std::memcpy(&header_length, prefix.data(), 8);
    if (header_length <= kMaxHeaderBytes && header_length <= size - 8) {
      prefix.resize(8 + header_length);
      file.ReadAt(8, prefix.data() + 8, header_length);
    }
  }
  return ParseSafetensorsHeader(prefix, size, what);
}

// A device (/dev/zero) or a FIFO is refused by name before it is opened (a
// FIFO's open would wait for a writer).
void CheckRegularFile(const std::filesystem::path& path) {
  std::error_code error;
  const std::filesystem::file_status status = std::filesystem::status(path, error);
  if (!error && std::filesystem::exists(status) && !std::filesystem::is_regular_file(status)) {
    Fail("{} is not a regular file (a directory, a device or a FIFO); give a safetensors file",
         path.string());
  }
}

}  // namespace

SafetensorsFile ReadSafetensors(const std::filesystem::path& path) {
  // The header first, checked against the file's size; then each tensor's
  // bytes straight into the tensor: the file is never held whole.
  CheckRegularFile(path);
  InputFile file(path);
  SafetensorsHeader header = ReadHeader(file, path.string());
  uint64_t data_bytes = 0;
  for (const auto& [name, entry] : header.tensors) data_bytes += entry.end - entry.begin;
  const int64_t memory = PhysicalMemoryBytes();
  WEFT_CHECK(memory <= 0 || data_bytes <= static_cast<uint64_t>(memory),
             "{}: its tensors are {} ({} bytes), more than this machine's {} of memory; nothing "
             "was read",
             path.string(), FormatBytes(static_cast<int64_t>(data_bytes)), data_bytes,
             FormatBytes(memory));
  SafetensorsFile out;
  out.metadata = std::move(header.metadata);
  for (auto& [name, entry] : header.tensors) {
    HostTensor tensor =
        HostTensor::Uninitialized(Shape(entry.spec.dtype, std::move(entry.spec.shape)));
    if (tensor.byte_size() > 0) {
      file.ReadAt(entry.begin, tensor.mutable_raw_data(), static_cast<size_t>(tensor.byte_size()));
    }
    out.tensors.emplace(name, std::move(tensor));
  }
  return out;
}

SafetensorsFile ParseSafetensors(std::string_view bytes, std::string_view what) {
  SafetensorsHeader header = ParseSafetensorsHeader(bytes, bytes.size(), what);
  SafetensorsFile file;
  file.metadata = std::move(header.metadata);
  for (auto& [name, entry] : header.tensors) {
    HostTensor tensor =
        HostTensor::Uninitialized(Shape(entry.spec.dtype, std::move(entry.spec.shape)));
    if (tensor.byte_size() > 0) {
      std::memcpy(tensor.mutable_raw_data(), bytes.data() + entry.begin,
                  static_cast<size_t>(tensor.byte_size()));
    }
    file.tensors.emplace(name, std::move(tensor));
  }
  return file;
}

SafetensorsHeader ReadSafetensorsHeader(const std::filesystem::path& path) {
  CheckRegularFile(path);
  InputFile file(path);
  return ReadHeader(file, path.string());
}

SafetensorsHeader ParseSafetensorsHeader(std::string_view bytes, uint64_t file_bytes,
                                         std::string_view what) {
  auto fail = [&](const std::string& problem) { Invalid(what, problem); };
  if (file_bytes < 8 || bytes.size() < 8) {
    fail(fmt::format("truncated: {} bytes, less than the 8-byte header length", file_bytes));
  }
  uint64_t header_length = 0;
  std::memcpy(&header_length, bytes.data(), 8);
  if (header_length > kMaxHeaderBytes) {
    fail(fmt::format("the header length {} is implausible (over {} bytes)", header_length,
                     kMaxHeaderBytes));
  }
  if (header_length > file_bytes - 8 || header_length > bytes.size() - 8) {
    fail(fmt::format("truncated: the header length is {} bytes but only {} follow", header_length,
                     file_bytes - 8));
  }
  std::string_view header_text = bytes.substr(8, header_length);
  if (header_text.empty() || header_text[0] != '{') fail("the header does not start with '{'");

  // Duplicate names are invalid; nlohmann would keep the last one silently.
  std::set<std::string> seen;
  std::string duplicate;
  Json header;
  try {
    header = Json::parse(header_text, [&](int depth, Json::parse_event_t event, Json& parsed) {
      if (event == Json::parse_event_t::key && depth == 1 && duplicate.empty() &&
          !seen.insert(parsed.get<std::string>()).second) {
        duplicate = parsed.get<std::string>();
      }
      return true;
    });
  } catch (const Json::parse_error& error) {
    fail(fmt::format("its JSON header is malformed near byte {} of the header", error.byte));
  } catch (const Json::exception&) {
    fail("its JSON header is malformed");
  }
  if (!duplicate.empty()) fail(fmt::format("the header names '{}' twice", duplicate));
  if (!header.is_object()) fail("the header is not a JSON object");

  const uint64_t data_start = 8 + header_length;
  const uint64_t data_size = file_bytes - data_start;
  SafetensorsHeader file;
  std::vector<Entry> entries;
  for (const auto& [name, info] : header.items()) {
    if (name == kMetadataKey) {
      if (!info.is_object()) fail("__metadata__ is not a JSON object");
      for (const auto& [key, value] : info.items()) {
        if (!value.is_string()) fail(fmt::format("__metadata__ '{}' is not a string", key));
        file.metadata[key] = value.get<std::string>();
      }
      continue;
    }
    // A named reference: clang 14 cannot capture a structured binding.
    const std::string& tensor_name = name;
    auto bad = [&](std::string_view problem) {
      Invalid(what, fmt::format("tensor '{}': {}", tensor_name, problem));
    };
    if (!info.is_object()) bad("its entry is not a JSON object");
    for (const auto& [field, unused] : info.items()) {
      if (field != "dtype" && field != "shape" && field != "data_offsets") {
        bad(fmt::format("unexpected field '{}'", field));
      }
    }
    if (!info.contains("dtype") || !info["dtype"].is_string()) bad("no dtype string");
    std::string dtype_name = info["dtype"].get<std::string>();
    auto dtype = PrimitiveTypeFromSafetensorsName(dtype_name);
    if (!dtype) {
      bad(fmt::format("unknown dtype '{}' (weft reads F32, BF16, F16, I32, I64)", dtype_name));
    }
    if (!info.contains("shape") || !info["shape"].is_array()) bad("no shape list");
    TensorSpec tensor;
    tensor.dtype = *dtype;
    for (const Json& dim : info["shape"]) {
      if (!dim.is_number_unsigned())
        bad("the shape has an entry that is not a non-negative integer");
      uint64_t value = dim.get<uint64_t>();
      if (value > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        bad("a dim is too large");
      tensor.shape.push_back(static_cast<int64_t>(value));
    }
    const Json* offsets = info.contains("data_offsets") ? &info["data_offsets"] : nullptr;
    if (offsets == nullptr || !offsets->is_array() || offsets->size() != 2 ||
        !(*offsets)[0].is_number_unsigned() || !(*offsets)[1].is_number_unsigned()) {
      bad("data_offsets is not a pair of non-negative integers");
    }
    Entry entry{name, (*offsets)[0].get<uint64_t>(), (*offsets)[1].get<uint64_t>()};
    if (entry.begin > entry.end)
      bad(fmt::format("data_offsets [{}, {}] are reversed", entry.begin, entry.end));
    if (entry.end > data_size) {
      bad(fmt::format("data_offsets end at {} but the data section has {} bytes (truncated?)",
                      entry.end, data_size));
    }
    auto size = ByteSize(tensor.shape, ByteWidth(*dtype));
    if (!size || *size != entry.end - entry.begin) {
      bad(fmt::format("shape [{}] of {} needs {} bytes but data_offsets span {}",
                      fmt::join(tensor.shape, ", "), dtype_name, size ? *size : 0,
                      entry.end - entry.begin));
    }
    file.tensors[name] = {std::move(tensor), data_start + entry.begin, data_start + entry.end};
    entries.push_back(std::move(entry));
  }
  CheckCoverage(std::move(entries), data_size, what);
  return file;
}

}  // namespace weft
