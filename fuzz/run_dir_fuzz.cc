// libFuzzer target for the readers of a run directory (`weft train --out
// DIR` resumed): the checkpoint, i.e. state.json (every field, the slice
// index and its tiling, versions 1 to 3) and the shard files it names
// (sizes, safetensors headers against the index, chunk checksums, finite
// floats), read as a resume reads them (OpenCheckpoint, then
// LoadCheckpoint); and metrics.jsonl (ReadRunMetrics).
//
// An input is a run directory: DIR/checkpoint/state.json's bytes, then any
// number of files, each "\n~~FILE:<name>\n" followed by its bytes; a file
// named metrics.jsonl goes to DIR, the others beside state.json
// (fuzz/corpus/run_dir holds checkpoints of versions 1 to 3, in this form).
// Bad input must end in weft::Error, never a crash, a hang, an allocation
// the files do not justify or a sanitizer report; a checkpoint that loads
// must hold every tensor the index names, with the index's dtype and shape;
// every metrics line read must be a step's JSON object of at most 64 KiB.
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
#include "weft/train/run_dir.h"

namespace {

namespace fs = std::filesystem;

constexpr std::string_view kFileTag = "\n~~FILE:";

const fs::path& Directory() {
  static const fs::path dir = [] {
    std::string pattern = (fs::temp_directory_path() / "weft-run-dir-fuzz-XXXXXX").string();
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
  fs::remove(dir.parent_path() / "metrics.jsonl");
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
    if (name == "metrics.jsonl") {
      Write(dir.parent_path() / "metrics.jsonl", bytes);
    } else if (PlainName(name)) {
      Write(dir / std::string(name), bytes);
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 65536) return 0;  // long inputs only slow the search down
  Unpack(std::string_view(reinterpret_cast<const char*>(data), size));
  try {
    for (const weft::RunMetricsLine& line :
         weft::ReadRunMetrics(Directory().parent_path() / "metrics.jsonl")) {
      if (line.text.size() > 64 * 1024 || line.text.find('\n') != std::string::npos) std::abort();
    }
  } catch (const weft::Error&) {
    std::abort();  // a regular file is never refused
  }
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
