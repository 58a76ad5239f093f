#include "weft/train/checkpoint.h"

#include <fcntl.h>
#include <stdio.h>  // renameat2

#include <cerrno>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <sstream>
#include <system_error>

#include "weft/base/atomic_file.h"
#include "weft/base/crc32c.h"
#include "weft/base/error.h"

namespace weft {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

constexpr std::string_view kFormat = "weft-checkpoint";
// 2: state.json records a CRC-32C per tensor. 1 (no checksums) is still read.
constexpr int kVersion = 2;
constexpr int kOldestVersion = 1;
constexpr const char* kModelFile = "model.safetensors";
constexpr const char* kOptimizerFile = "optimizer.safetensors";
constexpr const char* kStateFile = "state.json";
constexpr std::string_view kTempTag = ".tmp-";
constexpr std::string_view kOldTag = ".old-";
// A file inside a temporary or retired sibling that this code made, holding
// the sibling's own name. Only siblings that carry it (with their own name,
// so a user's renamed copy does not qualify) are ever removed or recovered.
constexpr const char* kOwnerMarker = ".weft-owned";

// "runs/a/" and "runs/a" name the same directory; we need its last component.
fs::path Normalize(const fs::path& dir) {
  fs::path normal = dir.lexically_normal();
  if (normal.filename().empty()) normal = normal.parent_path();
  WEFT_CHECK(!normal.empty() && normal.filename() != "." && normal.filename() != "..",
             "'{}' cannot be a checkpoint directory; name one, e.g. runs/tiny/checkpoint",
             dir.string());
  return normal;
}

fs::path ParentOrDot(const fs::path& path) {
  return path.parent_path().empty() ? fs::path(".") : path.parent_path();
}

// Writes the owner marker into `sibling` (before it takes its sibling name,
// or right after it is created).
void MarkOwned(const fs::path& sibling, const fs::path& name) {
  OutputFile marker(sibling / kOwnerMarker);
  marker.Write(name.filename().string());
  marker.SyncAndClose();
}

bool IsOwned(const fs::path& sibling) {
  std::error_code error;
  if (!fs::is_regular_file(sibling / kOwnerMarker, error)) return false;
  try {
    return ReadFileToString(sibling / kOwnerMarker) == sibling.filename().string();
  } catch (const Error&) {
    return false;
  }
}

// Siblings of `dir` named "<dir name><tag>…" that a save of this checkpoint
// made (they carry the owner marker); a user's "checkpoint.old-backup" is
// never among them.
std::vector<fs::path> OwnedSiblings(const fs::path& dir, std::string_view tag) {
  std::vector<fs::path> out;
  std::error_code error;
  std::string prefix = dir.filename().string() + std::string(tag);
  for (const auto& entry : fs::directory_iterator(ParentOrDot(dir), error)) {
    if (entry.path().filename().string().rfind(prefix, 0) == 0 && IsOwned(entry.path())) {
      out.push_back(entry.path());
    }
  }
  return out;
}

std::string ErrnoText(int error) { return std::generic_category().message(error); }

void RenameOrFail(const fs::path& from, const fs::path& to) {
  if (::rename(from.c_str(), to.c_str()) != 0) {
    Fail("cannot rename {} to {}: {}", from.string(), to.string(), ErrnoText(errno));
  }
}

Json Checksums(const TensorMap& tensors) {
  Json out = Json::object();
  for (const auto& [name, tensor] : tensors) {
    out[name] = Crc32cText(Crc32c(tensor.bytes.data(), tensor.bytes.size()));
  }
  return out;
}

// The first element that is NaN or infinite, if any (float tensors only).
std::optional<int64_t> FirstNonFinite(const HostTensor& tensor) {
  if (tensor.dtype == TensorDType::kF32) {
    const size_t n = tensor.bytes.size() / sizeof(float);
    for (size_t i = 0; i < n; ++i) {
      float x;
      std::memcpy(&x, tensor.bytes.data() + i * sizeof(float), sizeof(float));
      if (!std::isfinite(x)) return static_cast<int64_t>(i);
    }
  } else if (tensor.dtype == TensorDType::kBF16) {
    const size_t n = tensor.bytes.size() / 2;
    for (size_t i = 0; i < n; ++i) {
      uint16_t bits;
      std::memcpy(&bits, tensor.bytes.data() + i * 2, 2);
      if ((bits & 0x7F80u) == 0x7F80u) return static_cast<int64_t>(i);  // exponent all ones
    }
  }
  return std::nullopt;
}

std::string StateJson(const Checkpoint& checkpoint, uint64_t model_bytes,
                      uint64_t optimizer_bytes) {
  const TrainState& state = checkpoint.state;
  Json json = {
      {"format", kFormat},
      {"version", kVersion},
      {"step", state.step},
      {"rng_state", state.rng_state},
      {"data_position", state.data_position},
      {"config_hash", state.config_hash},
      {"files",
       {{kModelFile, {{"bytes", model_bytes}, {"crc32c", Checksums(checkpoint.model)}}},
        {kOptimizerFile,
         {{"bytes", optimizer_bytes}, {"crc32c", Checksums(checkpoint.optimizer)}}}}},
      {"extra", state.extra},
  };
  return json.dump(2) + "\n";
}

// What state.json says about one tensor file.
struct FileRecord {
  uint64_t bytes = 0;
  std::optional<std::map<std::string, std::string>> crc32c;  // absent in version 1
};

// Typed fields of state.json; a missing or mistyped one is named, with the
// type it should have (never the JSON library's own message).
class StateReader {
 public:
  StateReader(const fs::path& path) : path_(path) {}

  [[noreturn]] void Bad(std::string_view problem) const {
    Fail("{} is damaged: {}; resume from another checkpoint or start afresh", path_.string(),
         problem);
  }
  const Json& At(const Json& object, std::string_view key, std::string_view where) const {
    if (!object.is_object()) Bad(fmt::format("{} is not a JSON object", where));
    const auto it = object.find(key);
    if (it == object.end()) Bad(fmt::format("{} has no field \"{}\"", where, key));
    return *it;
  }
  int64_t Int(const Json& object, std::string_view key, std::string_view where) const {
    const Json& v = At(object, key, where);
    if (!v.is_number_integer()) {
      Bad(fmt::format("field \"{}\" of {} is {}, not an integer", key, where, v.dump()));
    }
    return v.get<int64_t>();
  }
  std::string Text(const Json& object, std::string_view key, std::string_view where) const {
    const Json& v = At(object, key, where);
    if (!v.is_string()) {
      Bad(fmt::format("field \"{}\" of {} is {}, not a string", key, where, v.dump()));
    }
    return v.get<std::string>();
  }
  std::map<std::string, std::string> TextMap(const Json& object, std::string_view key,
                                             std::string_view where) const {
    const Json& v = At(object, key, where);
    if (!v.is_object()) Bad(fmt::format("field \"{}\" of {} is not an object", key, where));
    std::map<std::string, std::string> out;
    for (const auto& [k, item] : v.items()) {
      if (!item.is_string()) {
        Bad(fmt::format("\"{}\" in field \"{}\" of {} is {}, not a string", k, key, where,
                        item.dump()));
      }
      out[k] = item.get<std::string>();
    }
    return out;
  }

 private:
  fs::path path_;
};

TrainState ParseState(const std::string& text, const fs::path& path, const fs::path& dir,
                      std::map<std::string, FileRecord>* records) {
  const StateReader r(path);
  const Json json = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded()) r.Bad("it is not valid JSON");
  if (!json.is_object() || !json.contains("format") || json["format"] != kFormat) {
    r.Bad("it is not a weft checkpoint state (no \"format\": \"weft-checkpoint\")");
  }
  const int64_t version = r.Int(json, "version", "the state");
  if (version < kOldestVersion || version > kVersion) {
    r.Bad(fmt::format("version {} is not one this weft reads ({} to {})", version,
                      kOldestVersion, kVersion));
  }
  TrainState state;
  state.step = r.Int(json, "step", "the state");
  if (state.step < 0) r.Bad(fmt::format("\"step\" is {}; it counts steps done, from 0", state.step));
  state.rng_state = r.Text(json, "rng_state", "the state");
  state.data_position = r.Int(json, "data_position", "the state");
  if (state.data_position < 0) {
    r.Bad(fmt::format("\"data_position\" is {}; it counts batches drawn, from 0",
                      state.data_position));
  }
  state.config_hash = r.Text(json, "config_hash", "the state");
  state.extra = r.TextMap(json, "extra", "the state");
  const Json& files = r.At(json, "files", "the state");
  for (const char* file : {kModelFile, kOptimizerFile}) {
    const std::string where = fmt::format("\"files\".\"{}\"", file);
    const Json& entry = r.At(files, file, "\"files\"");
    FileRecord& record = (*records)[file];
    const int64_t bytes = r.Int(entry, "bytes", where);
    if (bytes < 0) r.Bad(fmt::format("{} \"bytes\" is {}", where, bytes));
    record.bytes = static_cast<uint64_t>(bytes);
    if (version >= 2) record.crc32c = r.TextMap(entry, "crc32c", where);
    std::error_code error;
    const uint64_t actual = fs::file_size(dir / file, error);
    if (error) r.Bad(fmt::format("{} is missing", (dir / file).string()));
    if (actual != record.bytes) {
      r.Bad(fmt::format("{} has {} bytes, state.json recorded {} (truncated or replaced)",
                        (dir / file).string(), actual, record.bytes));
    }
  }
  return state;
}

Checkpoint LoadFrom(const fs::path& dir) {
  Checkpoint checkpoint;
  fs::path state_path = dir / kStateFile;
  std::error_code error;
  if (!fs::exists(state_path, error)) {
    Fail("{} is not a checkpoint: it has no {}", dir.string(), kStateFile);
  }
  std::map<std::string, FileRecord> records;
  checkpoint.state = ParseState(ReadFileToString(state_path), state_path, dir, &records);
  checkpoint.model = ReadSafetensors(dir / kModelFile).tensors;
  checkpoint.optimizer = ReadSafetensors(dir / kOptimizerFile).tensors;
  for (const auto& [file, tensors] :
       {std::pair<const char*, const TensorMap*>{kModelFile, &checkpoint.model},
        std::pair<const char*, const TensorMap*>{kOptimizerFile, &checkpoint.optimizer}}) {
    const fs::path path = dir / file;
    const FileRecord& record = records.at(file);
    if (record.crc32c) {
      for (const auto& [name, sum] : *record.crc32c) {
        if (!tensors->contains(name)) {
          Fail("{} is damaged: {} records tensor '{}' but the file holds no tensor of that name "
               "(renamed or replaced); resume from another checkpoint",
               path.string(), state_path.string(), name);
        }
      }
    }
    for (const auto& [name, tensor] : *tensors) {
      if (record.crc32c) {
        const auto it = record.crc32c->find(name);
        if (it == record.crc32c->end()) {
          Fail("{} is damaged: it holds tensor '{}' that {} does not record (renamed or "
               "replaced); resume from another checkpoint",
               path.string(), name, state_path.string());
        }
        const std::string actual = Crc32cText(Crc32c(tensor.bytes.data(), tensor.bytes.size()));
        if (actual != it->second) {
          Fail("{} is damaged: tensor '{}' has checksum {}, {} recorded {} (its bytes changed); "
               "resume from another checkpoint",
               path.string(), name, actual, state_path.string(), it->second);
        }
      }
      if (auto bad = FirstNonFinite(tensor)) {
        Fail("{}: tensor '{}' holds a non-finite value (element {}); a weft checkpoint never "
             "does, so this one was damaged or written by another tool; resume from another "
             "checkpoint",
             path.string(), name, *bad);
      }
    }
  }
  return checkpoint;
}

// Where a checkpoint for `dir` can be loaded from: `dir`, or the old copy an
// interrupted fallback save left behind.
std::optional<fs::path> Locate(const fs::path& dir) {
  std::error_code error;
  if (fs::exists(dir / kStateFile, error)) return dir;
  if (fs::exists(dir, error)) return std::nullopt;
  for (const fs::path& old : OwnedSiblings(dir, kOldTag)) {
    if (fs::exists(old / kStateFile, error)) return old;
  }
  return std::nullopt;
}

}  // namespace

void SaveCheckpoint(const fs::path& target, const Checkpoint& checkpoint,
                    const CheckpointSaveOptions& options) {
  const fs::path dir = Normalize(target);
  const fs::path parent = ParentOrDot(dir);
  std::error_code error;
  fs::create_directories(parent, error);
  if (error) {
    Fail("cannot create {} for checkpoint {}: {}", parent.string(), dir.string(), error.message());
  }
  if (fs::exists(dir, error) && !fs::exists(dir / kStateFile, error) &&
      !fs::is_empty(dir, error)) {
    Fail("{} exists and is not a checkpoint; refusing to replace it (choose another directory)",
         dir.string());
  }
  for (const auto& [tensors, file] :
       {std::pair<const TensorMap*, const char*>{&checkpoint.model, kModelFile},
        std::pair<const TensorMap*, const char*>{&checkpoint.optimizer, kOptimizerFile}}) {
    for (const auto& [name, tensor] : *tensors) {
      if (auto bad = FirstNonFinite(tensor)) {
        Fail("refusing to write checkpoint {} at step {}: tensor '{}' ({}) holds a non-finite "
             "value (element {}); the previous checkpoint is kept",
             dir.string(), checkpoint.state.step, name, file, *bad);
      }
    }
  }
  // A recovered fallback copy becomes the checkpoint again before we start.
  if (!fs::exists(dir, error)) {
    if (auto old = Locate(dir)) {
      RenameOrFail(*old, dir);
      fs::remove(dir / kOwnerMarker, error);
    }
  }
  // Leftovers of this checkpoint's saves that crashed (they carry the owner
  // marker); anything else beside it is not ours and stays.
  for (const fs::path& stale : OwnedSiblings(dir, kTempTag)) fs::remove_all(stale, error);
  for (const fs::path& stale : OwnedSiblings(dir, kOldTag)) fs::remove_all(stale, error);
  fs::remove(dir / kOwnerMarker, error);  // a crash between marking and retiring

  const fs::path temp = UniqueSiblingPath(dir, kTempTag);
  auto stage = [&](std::string_view name) {
    if (options.after_stage) options.after_stage(name);
  };
  try {
    fs::create_directory(temp, error);
    if (error) Fail("cannot create {}: {}", temp.string(), error.message());
    MarkOwned(temp, temp);
    WriteSafetensors(temp / kModelFile, checkpoint.model, {{"format", "pt"}});
    stage(kModelFile);
    WriteSafetensors(temp / kOptimizerFile, checkpoint.optimizer, {{"format", "pt"}});
    stage(kOptimizerFile);
    std::string state = StateJson(checkpoint, fs::file_size(temp / kModelFile),
                                  fs::file_size(temp / kOptimizerFile));
    OutputFile state_file(temp / kStateFile);
    state_file.Write(state);
    state_file.SyncAndClose();
    stage(kStateFile);
    SyncDirectory(temp);
    stage("synced");
  } catch (...) {
    fs::remove_all(temp, error);
    throw;
  }

  // The new checkpoint keeps temp's marker until it is in place (the marker
  // names temp, so it does not make the checkpoint itself "owned"); the old
  // one is marked with temp's name before the exchange gives it that name, so
  // a crash before its removal leaves an owned leftover, cleaned next time.
  const bool replacing = fs::exists(dir, error);
  if (replacing) MarkOwned(dir, temp);
  if (!replacing) {
    RenameOrFail(temp, dir);
  } else if (options.exchange &&
             ::renameat2(AT_FDCWD, temp.c_str(), AT_FDCWD, dir.c_str(), RENAME_EXCHANGE) == 0) {
    fs::remove_all(temp, error);  // now the previous checkpoint
  } else {
    if (options.exchange && errno != EINVAL && errno != ENOSYS && errno != ENOTSUP) {
      int saved = errno;
      fs::remove_all(temp, error);
      Fail("cannot swap {} into {}: {}", temp.string(), dir.string(), ErrnoText(saved));
    }
    // No exchange here: old aside, new in place. A crash in between leaves
    // the old copy, which Locate finds.
    const fs::path old = UniqueSiblingPath(dir, kOldTag);
    MarkOwned(dir, old);
    RenameOrFail(dir, old);
    RenameOrFail(temp, dir);
    fs::remove_all(old, error);
  }
  fs::remove(dir / kOwnerMarker, error);
  SyncDirectory(parent);
}

Checkpoint LoadCheckpoint(const fs::path& target, std::optional<std::string_view> expected_hash) {
  const fs::path dir = Normalize(target);
  auto found = Locate(dir);
  if (!found) {
    std::error_code error;
    if (fs::exists(dir, error)) {
      Fail("{} is not a checkpoint: it has no {}", dir.string(), kStateFile);
    }
    Fail("no checkpoint at {}; check the path (or start without resuming)", dir.string());
  }
  Checkpoint checkpoint = LoadFrom(*found);
  if (expected_hash && checkpoint.state.config_hash != *expected_hash) {
    Fail(
        "checkpoint {} was written under config hash {}, but this run's config hashes to {}; "
        "resume with the config it was trained with, or use a new checkpoint directory",
        dir.string(), checkpoint.state.config_hash, *expected_hash);
  }
  return checkpoint;
}

bool CheckpointExists(const fs::path& dir) { return Locate(Normalize(dir)).has_value(); }

std::string RngStateToString(const std::mt19937_64& rng) {
  std::ostringstream out;
  out << rng;
  return out.str();
}

std::mt19937_64 RngStateFromString(std::string_view text, std::string_view what) {
  std::istringstream in{std::string(text)};
  std::mt19937_64 rng;
  in >> rng;
  if (in.fail()) Fail("{}: '{}…' is not a random generator state", what, text.substr(0, 40));
  return rng;
}

}  // namespace weft
