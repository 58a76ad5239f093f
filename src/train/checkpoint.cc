#include "weft/train/checkpoint.h"

#include <fcntl.h>
#include <stdio.h>  // renameat2

#include <cerrno>
#include <nlohmann/json.hpp>
#include <sstream>
#include <system_error>

#include "weft/base/error.h"
#include "weft/base/atomic_file.h"

namespace weft {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

constexpr std::string_view kFormat = "weft-checkpoint";
constexpr int kVersion = 1;
constexpr const char* kModelFile = "model.safetensors";
constexpr const char* kOptimizerFile = "optimizer.safetensors";
constexpr const char* kStateFile = "state.json";
constexpr std::string_view kTempTag = ".tmp-";
constexpr std::string_view kOldTag = ".old-";

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

// Siblings of `dir` named "<dir name><tag>…".
std::vector<fs::path> Siblings(const fs::path& dir, std::string_view tag) {
  std::vector<fs::path> out;
  std::error_code error;
  std::string prefix = dir.filename().string() + std::string(tag);
  for (const auto& entry : fs::directory_iterator(ParentOrDot(dir), error)) {
    if (entry.path().filename().string().rfind(prefix, 0) == 0) out.push_back(entry.path());
  }
  return out;
}

std::string ErrnoText(int error) { return std::generic_category().message(error); }

void RenameOrFail(const fs::path& from, const fs::path& to) {
  if (::rename(from.c_str(), to.c_str()) != 0) {
    Fail("cannot rename {} to {}: {}", from.string(), to.string(), ErrnoText(errno));
  }
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
       {{kModelFile, {{"bytes", model_bytes}}}, {kOptimizerFile, {{"bytes", optimizer_bytes}}}}},
      {"extra", state.extra},
  };
  return json.dump(2) + "\n";
}

TrainState ParseState(const std::string& text, const fs::path& path, const fs::path& dir) {
  auto bad = [&](std::string_view problem) {
    Fail("{} is damaged: {}; resume from another checkpoint or start afresh", path.string(),
         problem);
  };
  TrainState state;
  try {
    Json json = Json::parse(text);
    if (!json.is_object() || !json.contains("format") || json["format"] != kFormat) {
      bad("it is not a weft checkpoint state (no \"format\": \"weft-checkpoint\")");
    }
    if (json.at("version") != kVersion) {
      bad(fmt::format("version {} is not {}, the one this weft reads", json.at("version").dump(),
                      kVersion));
    }
    state.step = json.at("step").get<int64_t>();
    state.rng_state = json.at("rng_state").get<std::string>();
    state.data_position = json.at("data_position").get<int64_t>();
    state.config_hash = json.at("config_hash").get<std::string>();
    state.extra = json.at("extra").get<Metadata>();
    for (const char* file : {kModelFile, kOptimizerFile}) {
      uint64_t expected = json.at("files").at(file).at("bytes").get<uint64_t>();
      std::error_code error;
      uint64_t actual = fs::file_size(dir / file, error);
      if (error) bad(fmt::format("{} is missing", (dir / file).string()));
      if (actual != expected) {
        bad(fmt::format("{} has {} bytes, state.json recorded {} (truncated or replaced)",
                        (dir / file).string(), actual, expected));
      }
    }
  } catch (const Json::parse_error& error) {
    bad(fmt::format("bad JSON ({})", error.what()));
  } catch (const Json::exception& error) {
    bad(fmt::format("a field is missing or has the wrong type ({})", error.what()));
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
  checkpoint.state = ParseState(ReadFileToString(state_path), state_path, dir);
  checkpoint.model = ReadSafetensors(dir / kModelFile).tensors;
  checkpoint.optimizer = ReadSafetensors(dir / kOptimizerFile).tensors;
  return checkpoint;
}

// Where a checkpoint for `dir` can be loaded from: `dir`, or the old copy an
// interrupted fallback save left behind.
std::optional<fs::path> Locate(const fs::path& dir) {
  std::error_code error;
  if (fs::exists(dir / kStateFile, error)) return dir;
  if (fs::exists(dir, error)) return std::nullopt;
  for (const fs::path& old : Siblings(dir, kOldTag)) {
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
  // A recovered fallback copy becomes the checkpoint again before we start.
  if (!fs::exists(dir, error)) {
    if (auto old = Locate(dir)) RenameOrFail(*old, dir);
  }
  // Leftovers of saves that crashed; they were never the checkpoint.
  for (const fs::path& stale : Siblings(dir, kTempTag)) fs::remove_all(stale, error);
  for (const fs::path& stale : Siblings(dir, kOldTag)) fs::remove_all(stale, error);

  const fs::path temp = UniqueSiblingPath(dir, kTempTag);
  auto stage = [&](std::string_view name) {
    if (options.after_stage) options.after_stage(name);
  };
  try {
    fs::create_directory(temp, error);
    if (error) Fail("cannot create {}: {}", temp.string(), error.message());
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

  if (!fs::exists(dir, error)) {
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
    RenameOrFail(dir, old);
    RenameOrFail(temp, dir);
    fs::remove_all(old, error);
  }
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
