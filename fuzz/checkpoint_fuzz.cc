// libFuzzer target for the checkpoint reader: state.json (every field, the
// slice index and its tiling, versions 1 to 3) and the shard files it names
// (sizes, safetensors headers against the index, chunk checksums, finite
// floats), read as `weft train --resume` reads them (OpenCheckpoint, then
// LoadCheckpoint).
//
// An input is a checkpoint directory: state.json's bytes, then any number of
// files, each "\n~~FILE:<name>\n" followed by its bytes (fuzz/corpus/
// checkpoint holds checkpoints SaveCheckpoint wrote, in this form). Bad input
// must end in weft::Error, never a crash, a hang, an allocation the files do
// not justify or a sanitizer report; a checkpoint that loads must hold every
// tensor the index names, with the index's dtype and shape.
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

#include "weft/base/error.h"
#include "weft/train/checkpoint.h"

namespace {

namespace fs = std::filesystem;

constexpr std::string_view kFileTag = "\n~~FILE:";

const fs::path& Directory() {
  static const fs::path dir = [] {
    std::string pattern = (fs::temp_directory_path() / "weft-checkpoint-fuzz-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) std::abort();
    return fs::path(pattern) / "checkpoint";
  }();
  return dir;
}

bool PlainName(std::string_view name) {
  if (name.empty() || name.size() > 64 || name[0] == '.') return false;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '-' || c == '_';
    if (!ok) return false;
  }
  return name != "state.json";
}

void Write(const fs::path& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) std::abort();
}

// Writes the input's files into a fresh Directory().
void Unpack(std::string_view input) {
  const fs::path& dir = Directory();
  fs::remove_all(dir);
  fs::create_directories(dir);
  size_t at = input.find(kFileTag);
  Write(dir / "state.json", input.substr(0, at));
  while (at != std::string_view::npos) {
    const size_t name_begin = at + kFileTag.size();
    const size_t name_end = input.find('\n', name_begin);
    if (name_end == std::string_view::npos) return;
    const std::string_view name = input.substr(name_begin, name_end - name_begin);
    at = input.find(kFileTag, name_end);
    const std::string_view bytes =
        input.substr(name_end + 1, at == std::string_view::npos ? at : at - name_end - 1);
    if (PlainName(name)) Write(dir / std::string(name), bytes);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 65536) return 0;  // long inputs only slow the search down
  Unpack(std::string_view(reinterpret_cast<const char*>(data), size));
  weft::CheckpointIndex index;
  try {
    index = weft::OpenCheckpoint(Directory());
  } catch (const weft::Error&) {
    return 0;  // refused with a message: fine
  }
  weft::Checkpoint checkpoint;
  try {
    checkpoint = weft::LoadCheckpoint(Directory());
  } catch (const weft::Error&) {
    return 0;  // a damaged chunk or a non-finite float, named: fine
  }
  for (weft::CheckpointPart part :
       {weft::CheckpointPart::kModel, weft::CheckpointPart::kOptimizer}) {
    const weft::TensorMap& tensors =
        part == weft::CheckpointPart::kModel ? checkpoint.model : checkpoint.optimizer;
    if (tensors.size() != index.part(part).size()) std::abort();
    for (const auto& [name, tensor] : index.part(part)) {
      const auto it = tensors.find(name);
      if (it == tensors.end()) std::abort();
      const auto& dims = it->second.dimensions();
      if (it->second.element_type() != tensor.spec.dtype ||
          !std::equal(dims.begin(), dims.end(), tensor.spec.shape.begin(),
                      tensor.spec.shape.end())) {
        std::abort();  // loaded as another tensor than the index names
      }
    }
  }
  if (checkpoint.state != index.state) std::abort();
  return 0;
}
