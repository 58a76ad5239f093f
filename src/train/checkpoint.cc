#include "weft/train/checkpoint.h"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>  // renameat2
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <exception>
#include <nlohmann/json.hpp>
#include <sstream>
#include <system_error>

#include "checkpoint_shards.h"
#include "weft/base/algorithm.h"
#include "weft/base/atomic_file.h"
#include "weft/base/crc32c.h"
#include "weft/base/data_files.h"
#include "weft/base/error.h"
#include "weft/runtime/communicator.h"
#include "weft/sharding/hlo_sharding.h"

namespace weft {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;
using train::CheckFilesAgainstIndex;
using train::CheckTiling;
using train::FirstNonFinitePiece;
using train::kChunkBytes;
using train::WriteShardFile;
using train::WrittenSlice;

constexpr std::string_view kFormat = "weft-checkpoint";
// 3: one file per device and part, state.json indexes every tensor's slices
// with a CRC-32C per chunk. 2 (whole tensors in model.safetensors and
// optimizer.safetensors, a CRC-32C per tensor) and 1 (no checksums) are still
// read.
constexpr int kVersion = 3;
constexpr int kOldestVersion = 1;
constexpr const char* kLegacyModelFile = "model.safetensors";
constexpr const char* kLegacyOptimizerFile = "optimizer.safetensors";
constexpr const char* kStateFile = "state.json";
// state.json is read whole: a file over this (far past the index of any
// checkpoint weft can hold) is refused unread, as is a device or a FIFO.
constexpr int64_t kMaxStateBytes = int64_t{1} << 30;
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
  // A link (the sibling itself, or its marker) is never ours: weft makes none.
  if (!fs::is_directory(fs::symlink_status(sibling, error)) ||
      !fs::is_regular_file(fs::symlink_status(sibling / kOwnerMarker, error))) {
    return false;
  }
  try {
    // The marker holds a directory name: anything longer is not ours.
    return ReadInputFile(sibling / kOwnerMarker, "owner marker", 4096) ==
           sibling.filename().string();
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

void RenameOrFail(const fs::path& from, const fs::path& to) {
  if (::rename(from.c_str(), to.c_str()) != 0) {
    Fail("cannot rename {} to {}: {}", from.string(), to.string(), ErrnoText(errno));
  }
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

// Device 0, before a save: the directory may become a checkpoint; leftovers
// of crashed saves are cleaned; returns the fresh temporary sibling to write.
fs::path PrepareTemp(const fs::path& dir) {
  const fs::path parent = ParentOrDot(dir);
  std::error_code error;
  fs::create_directories(parent, error);
  if (error) {
    Fail("cannot create {} for checkpoint {}: {}", parent.string(), dir.string(), error.message());
  }
  // The checkpoint is replaced, never written through: a link there (to a
  // directory elsewhere) or a file that is not a directory is refused.
  const fs::file_status status = fs::symlink_status(dir, error);
  WEFT_CHECK(!fs::is_symlink(status),
             "{} is a symbolic link; weft never writes through, or replaces, a link it did not "
             "make: remove it (or give another directory)",
             dir.string());
  WEFT_CHECK(!fs::exists(status) || fs::is_directory(status),
             "{} exists and is not a directory; refusing to replace it (choose another directory)",
             dir.string());
  if (fs::exists(dir, error) && !fs::exists(dir / kStateFile, error) && !fs::is_empty(dir, error)) {
    Fail("{} exists and is not a checkpoint; refusing to replace it (choose another directory)",
         dir.string());
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
  const fs::path temp = CreateUniqueSiblingDirectory(dir, kTempTag);
  MarkOwned(temp, temp);
  return temp;
}

// Device 0, after the index is written and synced: `temp` becomes `dir`.
void Commit(const fs::path& dir, const fs::path& temp, const CheckpointSaveOptions& options) {
  const fs::path parent = ParentOrDot(dir);
  std::error_code error;
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

// WEFT_CRASH_AT=<stage>[:<device>[:<n>]]: crash tests of whole runs kill the
// process (SIGKILL, as a power cut or an OOM kill would) when `device` (any
// device if not given) reaches `stage` of a save for the n-th time (the
// first if not given).
void CrashIfAsked(std::string_view stage, int64_t device) {
  static std::atomic<int64_t> reached{0};
  const char* value = std::getenv("WEFT_CRASH_AT");
  if (value == nullptr) return;
  std::vector<std::string> fields;
  std::string_view rest(value);
  while (true) {
    const size_t colon = rest.find(':');
    fields.emplace_back(rest.substr(0, colon));
    if (colon == std::string_view::npos) break;
    rest.remove_prefix(colon + 1);
  }
  if (fields[0] != stage) return;
  if (fields.size() > 1 && fields[1] != std::to_string(device)) return;
  const std::string n = fields.size() > 2 ? fields[2] : "1";
  if (std::to_string(++reached) == n) ::kill(::getpid(), SIGKILL);
}

// The devices that save together; `comm` null: one process alone.
struct Group {
  int64_t device = 0, size = 1;
  runtime::Communicator* comm = nullptr;

  // Every device's `text`, in device order, on every device.
  std::vector<std::string> Gather(const std::string& text) const {
    if (comm == nullptr) return {text};
    const std::vector<int64_t> lengths =
        comm->AllGather(std::vector<int64_t>{static_cast<int64_t>(text.size())});
    const int64_t longest = std::max<int64_t>(1, *std::max_element(lengths.begin(), lengths.end()));
    std::vector<uint8_t> mine(static_cast<size_t>(longest), 0);
    std::memcpy(mine.data(), text.data(), text.size());
    const std::vector<uint8_t> all = comm->AllGather(mine);
    std::vector<std::string> out;
    for (int64_t d = 0; d < size; ++d) {
      const char* at = reinterpret_cast<const char*>(all.data()) + d * longest;
      out.emplace_back(at, static_cast<size_t>(lengths[static_cast<size_t>(d)]));
    }
    return out;
  }

  // Runs `step` on every device; when it fails on any, it fails on all: the
  // failing device rethrows its own error, the others name it.
  template <typename Fn>
  void Together(Fn step) const {
    std::string mine;
    std::exception_ptr error;
    try {
      step();
    } catch (const Error& e) {
      mine = std::string("E") + e.what();
      error = std::current_exception();
    } catch (const std::exception& e) {
      mine = std::string("I") + e.what();
      error = std::current_exception();
    }
    const std::vector<std::string> all = Gather(mine);
    if (error) std::rethrow_exception(error);
    for (int64_t d = 0; d < size; ++d) {
      const std::string& text = all[static_cast<size_t>(d)];
      if (text.empty()) continue;
      if (text[0] == 'E') Fail("device {}: {}", d, text.substr(1));
      FailInternal("device {}: {}", d, text.substr(1));
    }
  }
};

std::string ShardFileName(CheckpointPart part, int64_t device, int64_t devices) {
  return fmt::format("{}-{:05}-of-{:05}.safetensors", CheckpointPartName(part), device + 1,
                     devices);
}

Json BoxJson(const TensorBox& box) { return {{"offset", box.offset}, {"extent", box.extent}}; }

Json SliceJson(const CheckpointSlice& slice) {
  Json crc = Json::array();
  for (uint32_t c : slice.crc32c) crc.push_back(Crc32cText(c));
  Json out = BoxJson(slice.box);
  out["file"] = slice.file;
  out["begin"] = slice.begin;
  out["crc32c"] = crc;
  return out;
}

// What one device wrote, for device 0 (the same fields as the index's).
std::string WrittenJson(const std::vector<WrittenSlice>& written,
                        const std::map<std::string, uint64_t>& files) {
  Json slices = Json::array();
  for (const WrittenSlice& w : written) {
    Json entry = SliceJson(w.slice);
    entry["part"] = CheckpointPartName(w.part);
    entry["name"] = w.name;
    entry["dtype"] = SafetensorsDTypeName(w.global.dtype);
    entry["shape"] = w.global.shape;
    slices.push_back(std::move(entry));
  }
  Json out = {{"slices", slices}, {"files", Json::object()}};
  for (const auto& [file, bytes] : files) out["files"][file] = bytes;
  return out.dump();
}

std::string IndexJson(const CheckpointIndex& index, const std::map<std::string, uint64_t>& files) {
  const TrainState& state = index.state;
  Json json = {
      {"format", kFormat},
      {"version", kVersion},
      {"step", state.step},
      {"rng_state", state.rng_state},
      {"data_position", state.data_position},
      {"config_hash", state.config_hash},
      {"chunk_bytes", kChunkBytes},
      {"files", Json::object()},
      {"tensors", Json::object()},
      {"extra", state.extra},
  };
  for (const auto& [file, bytes] : files) json["files"][file] = {{"bytes", bytes}};
  for (CheckpointPart part : {CheckpointPart::kModel, CheckpointPart::kOptimizer}) {
    Json tensors = Json::object();
    for (const auto& [name, tensor] : index.part(part)) {
      Json slices = Json::array();
      for (const CheckpointSlice& slice : tensor.slices) slices.push_back(SliceJson(slice));
      tensors[name] = {{"dtype", SafetensorsDTypeName(tensor.spec.dtype)},
                       {"shape", tensor.spec.shape},
                       {"slices", slices}};
    }
    json["tensors"][std::string(CheckpointPartName(part))] = tensors;
  }
  return json.dump(1) + "\n";
}

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

std::optional<uint32_t> ParseCrc(const std::string& text) {
  constexpr std::string_view kPrefix = "crc32c:";
  if (text.size() != kPrefix.size() + 8 || text.rfind(kPrefix, 0) != 0) return std::nullopt;
  uint32_t value = 0;
  for (char c : text.substr(kPrefix.size())) {
    const int digit = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (digit < 0) return std::nullopt;
    value = value << 4 | static_cast<uint32_t>(digit);
  }
  return value;
}

std::vector<int64_t> Ints(const StateReader& r, const Json& object, std::string_view key,
                          std::string_view where) {
  const Json& v = r.At(object, key, where);
  std::vector<int64_t> out;
  if (v.is_array()) {
    for (const Json& item : v) {
      if (!item.is_number_integer() || item.get<int64_t>() < 0) break;
      out.push_back(item.get<int64_t>());
    }
  }
  if (!v.is_array() || out.size() != v.size()) {
    r.Bad(fmt::format("field \"{}\" of {} is {}, not a list of non-negative integers", key, where,
                      v.dump()));
  }
  return out;
}

PrimitiveType DType(const StateReader& r, const Json& object, std::string_view where) {
  const std::string name = r.Text(object, "dtype", where);
  const auto dtype = PrimitiveTypeFromSafetensorsName(name);
  if (!dtype) r.Bad(fmt::format("{} has dtype \"{}\", which weft does not read", where, name));
  return *dtype;
}

CheckpointSlice ParseSlice(const StateReader& r, const Json& json, const TensorSpec& spec,
                           int64_t chunk_bytes, std::string_view where) {
  CheckpointSlice slice;
  slice.file = r.Text(json, "file", where);
  if (slice.file.empty() || slice.file.find('/') != std::string::npos || slice.file[0] == '.') {
    r.Bad(fmt::format("{} names file \"{}\", not a file of the checkpoint directory", where,
                      slice.file));
  }
  slice.box.offset = Ints(r, json, "offset", where);
  slice.box.extent = Ints(r, json, "extent", where);
  slice.begin = static_cast<uint64_t>(r.Int(json, "begin", where));
  slice.chunk_bytes = chunk_bytes;
  const Json& sums = r.At(json, "crc32c", where);
  if (sums.is_array()) {
    for (const Json& sum : sums) {
      const auto crc = sum.is_string() ? ParseCrc(sum.get<std::string>()) : std::nullopt;
      if (!crc) break;
      slice.crc32c.push_back(*crc);
    }
  }
  const int64_t bytes = slice.box.extent.size() == spec.shape.size()
                            ? slice.box.num_elements() * ByteWidth(spec.dtype)
                            : 0;
  const size_t chunks = static_cast<size_t>((bytes + chunk_bytes - 1) / chunk_bytes);
  if (!sums.is_array() || slice.crc32c.size() != sums.size() || slice.crc32c.size() != chunks) {
    r.Bad(
        fmt::format("{} needs {} checksums (\"crc32c:\" and 8 hex digits), one per {} bytes; "
                    "it has {}",
                    where, chunks, chunk_bytes, sums.dump()));
  }
  return slice;
}

// Version 3: the "tensors" and "files" fields.
std::map<std::string, uint64_t> ParseIndex(const StateReader& r, const Json& json,
                                           CheckpointIndex* index) {
  const int64_t chunk_bytes = r.Int(json, "chunk_bytes", "the state");
  if (chunk_bytes <= 0 || chunk_bytes % 8 != 0) {
    r.Bad(fmt::format("\"chunk_bytes\" is {}; it is a positive multiple of 8", chunk_bytes));
  }
  std::map<std::string, uint64_t> files;
  const Json& file_list = r.At(json, "files", "the state");
  if (!file_list.is_object()) r.Bad("field \"files\" of the state is not an object");
  for (const auto& [file, entry] : file_list.items()) {
    const int64_t bytes = r.Int(entry, "bytes", fmt::format("\"files\".\"{}\"", file));
    if (bytes < 0) r.Bad(fmt::format("\"files\".\"{}\" \"bytes\" is {}", file, bytes));
    files[file] = static_cast<uint64_t>(bytes);
  }
  const Json& tensors = r.At(json, "tensors", "the state");
  for (CheckpointPart part : {CheckpointPart::kModel, CheckpointPart::kOptimizer}) {
    const std::string part_name(CheckpointPartName(part));
    const Json& list = r.At(tensors, part_name, "\"tensors\"");
    if (!list.is_object()) r.Bad(fmt::format("\"tensors\".\"{}\" is not an object", part_name));
    auto& out = part == CheckpointPart::kModel ? index->model : index->optimizer;
    for (const auto& [name, entry] : list.items()) {
      const std::string where = fmt::format("tensor '{}'", name);
      CheckpointTensor& tensor = out[name];
      tensor.spec.dtype = DType(r, entry, where);
      tensor.spec.shape = Ints(r, entry, "shape", where);
      const Json& slices = r.At(entry, "slices", where);
      if (!slices.is_array()) r.Bad(fmt::format("{} has no list of slices", where));
      for (const Json& slice : slices) {
        tensor.slices.push_back(ParseSlice(r, slice, tensor.spec, chunk_bytes, where));
      }
      CheckTiling(name, tensor, [&](const std::string& problem) { r.Bad(problem); });
    }
  }
  return files;
}

// Versions 1 and 2: whole tensors in two files; version 2 has a checksum per
// tensor in "files".<file>."crc32c".
std::map<std::string, uint64_t> ParseLegacyIndex(const StateReader& r, const Json& json,
                                                 int64_t version, const fs::path& state_path,
                                                 CheckpointIndex* index) {
  std::map<std::string, uint64_t> files;
  const Json& file_list = r.At(json, "files", "the state");
  for (const char* file : {kLegacyModelFile, kLegacyOptimizerFile}) {
    const std::string where = fmt::format("\"files\".\"{}\"", file);
    const Json& entry = r.At(file_list, file, "\"files\"");
    const int64_t bytes = r.Int(entry, "bytes", where);
    if (bytes < 0) r.Bad(fmt::format("{} \"bytes\" is {}", where, bytes));
    files[file] = static_cast<uint64_t>(bytes);
    const fs::path path = index->dir / file;
    std::error_code error;
    const uint64_t actual = fs::file_size(path, error);
    if (error) r.Bad(fmt::format("{} is missing", path.string()));
    if (actual != files[file]) {
      Fail(
          "{} is damaged: it has {} bytes, state.json recorded {} (truncated or replaced); "
          "resume from another checkpoint",
          path.string(), actual, files[file]);
    }
    std::optional<std::map<std::string, std::string>> sums;
    if (version >= 2) sums = r.TextMap(entry, "crc32c", where);
    const SafetensorsHeader header = ReadSafetensorsHeader(path);
    auto& out = file == std::string(kLegacyModelFile) ? index->model : index->optimizer;
    for (const auto& [name, e] : header.tensors) {
      CheckpointSlice slice{file,
                            {std::vector<int64_t>(e.spec.shape.size(), 0), e.spec.shape},
                            e.begin,
                            std::max<int64_t>(8, static_cast<int64_t>(e.end - e.begin)),
                            {}};
      if (sums) {
        const auto it = sums->find(name);
        const auto crc = it == sums->end() ? std::nullopt : ParseCrc(it->second);
        if (!crc) {
          Fail(
              "{} is damaged: it holds tensor '{}' that {} does not record (renamed or "
              "replaced); resume from another checkpoint",
              path.string(), name, state_path.string());
        }
        if (e.end > e.begin) slice.crc32c.push_back(*crc);
      }
      out[name] = {e.spec, {std::move(slice)}};
    }
    for (const auto& [name, sum] : sums.value_or(std::map<std::string, std::string>{})) {
      if (!header.tensors.contains(name)) {
        Fail(
            "{} is damaged: {} records tensor '{}' but the file holds no tensor of that name "
            "(renamed or replaced); resume from another checkpoint",
            path.string(), state_path.string(), name);
      }
    }
  }
  return files;
}

CheckpointIndex ParseState(const std::string& text, const fs::path& path, const fs::path& dir) {
  const StateReader r(path);
  const Json json = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded()) r.Bad("it is not valid JSON");
  if (!json.is_object() || !json.contains("format") || json["format"] != kFormat) {
    r.Bad("it is not a weft checkpoint state (no \"format\": \"weft-checkpoint\")");
  }
  const int64_t version = r.Int(json, "version", "the state");
  if (version < kOldestVersion || version > kVersion) {
    r.Bad(fmt::format("version {} is not one this weft reads ({} to {})", version, kOldestVersion,
                      kVersion));
  }
  CheckpointIndex index;
  index.dir = dir;
  TrainState& state = index.state;
  state.step = r.Int(json, "step", "the state");
  if (state.step < 0)
    r.Bad(fmt::format("\"step\" is {}; it counts steps done, from 0", state.step));
  state.rng_state = r.Text(json, "rng_state", "the state");
  state.data_position = r.Int(json, "data_position", "the state");
  if (state.data_position < 0) {
    r.Bad(fmt::format("\"data_position\" is {}; it counts batches drawn, from 0",
                      state.data_position));
  }
  state.config_hash = r.Text(json, "config_hash", "the state");
  state.extra = r.TextMap(json, "extra", "the state");
  const auto files =
      version >= 3 ? ParseIndex(r, json, &index) : ParseLegacyIndex(r, json, version, path, &index);
  CheckFilesAgainstIndex(index, files, path);
  return index;
}

// Device 0: the index from every device's WrittenJson.
CheckpointIndex MergeWritten(const std::vector<std::string>& written, const TrainState& state,
                             const fs::path& temp, std::map<std::string, uint64_t>* files) {
  CheckpointIndex index;
  index.dir = temp;
  index.state = state;
  const StateReader r(temp / "(slices the devices wrote)");
  for (const std::string& text : written) {
    const Json json = Json::parse(text);
    for (const auto& [file, bytes] : json.at("files").items()) (*files)[file] = bytes;
    for (const Json& entry : json.at("slices")) {
      const std::string name = entry.at("name");
      const TensorSpec spec{DType(r, entry, name), Ints(r, entry, "shape", name)};
      auto& part = entry.at("part") == CheckpointPartName(CheckpointPart::kModel) ? index.model
                                                                                  : index.optimizer;
      CheckpointTensor& tensor = part[name];
      WEFT_INTERNAL_CHECK(tensor.slices.empty() || tensor.spec == spec,
                          "devices disagree on the type or shape of tensor '{}'", name);
      tensor.spec = spec;
      tensor.slices.push_back(ParseSlice(r, entry, spec, kChunkBytes, name));
    }
  }
  for (CheckpointPart part : {CheckpointPart::kModel, CheckpointPart::kOptimizer}) {
    for (const auto& [name, tensor] : index.part(part)) {
      CheckTiling(name, tensor, [&](const std::string& problem) {
        FailInternal("the devices' pieces do not tile the checkpoint: {}", problem);
      });
    }
  }
  return index;
}

void Stage(const CheckpointSaveOptions& options, std::string_view stage, int64_t device) {
  if (options.after_stage) options.after_stage(stage);
  CrashIfAsked(stage, device);
}

// The save, on every device of `group`.
void Save(const fs::path& target, std::span<const SavePiece> pieces, const TrainState& state,
          const Group& group, const CheckpointSaveOptions& options) {
  const fs::path dir = Normalize(target);
  const bool lead = group.device == 0;
  fs::path temp;
  // Every device's pieces are finite before anything is made on disk.
  group.Together([&] {
    if (auto bad = FirstNonFinitePiece(pieces)) {
      Fail("refusing to write checkpoint {} at step {}: {}; the previous checkpoint is kept",
           dir.string(), state.step, *bad);
    }
  });
  group.Together([&] {
    if (lead) temp = PrepareTemp(dir);
  });
  temp = group.Gather(lead ? temp.string() : std::string())[0];
  std::error_code error;
  try {
    std::vector<WrittenSlice> written;
    std::map<std::string, uint64_t> files;
    group.Together([&] {
      for (CheckpointPart part : {CheckpointPart::kModel, CheckpointPart::kOptimizer}) {
        std::vector<const SavePiece*> mine;
        for (const SavePiece& p : pieces) {
          if (p.part == part) mine.push_back(&p);
        }
        if (mine.empty()) continue;
        const std::string file = ShardFileName(part, group.device, group.size);
        for (WrittenSlice& w : WriteShardFile(temp, file, mine)) written.push_back(std::move(w));
        files[file] = fs::file_size(temp / file);
      }
      Stage(options, "shards", group.device);
    });
    const std::vector<std::string> all = group.Gather(WrittenJson(written, files));
    group.Together([&] {
      if (!lead) return;
      std::map<std::string, uint64_t> all_files;
      const CheckpointIndex index = MergeWritten(all, state, temp, &all_files);
      OutputFile state_file(temp / kStateFile);
      state_file.Write(IndexJson(index, all_files));
      state_file.SyncAndClose();
      Stage(options, kStateFile, group.device);
      SyncDirectory(temp);
      Stage(options, "synced", group.device);
      Commit(dir, temp, options);
    });
  } catch (...) {
    if (lead) fs::remove_all(temp, error);
    throw;
  }
}

}  // namespace

std::string_view CheckpointPartName(CheckpointPart part) {
  return part == CheckpointPart::kModel ? "model" : "optimizer";
}

int64_t TensorBox::num_elements() const { return Product(extent); }

TensorBox ShardBox(const HloSharding& sharding, std::span<const int64_t> dims, int64_t device) {
  TensorBox box;
  box.offset = sharding.TileOffsetForDevice(dims, device);
  const std::vector<int64_t> limit = sharding.TileLimitForDevice(dims, device);
  for (size_t d = 0; d < dims.size(); ++d) {
    box.offset[d] = std::min(box.offset[d], dims[d]);
    box.extent.push_back(std::max<int64_t>(0, limit[d] - box.offset[d]));
  }
  return box;
}

bool OwnsTile(const HloSharding& sharding, std::span<const int64_t> dims, int64_t device) {
  const std::vector<int64_t> offset = sharding.TileOffsetForDevice(dims, device);
  for (int64_t d = 0; d < device; ++d) {
    if (sharding.TileOffsetForDevice(dims, d) == offset) return false;
  }
  return true;
}

void SaveShardedCheckpoint(const fs::path& dir, std::span<const SavePiece> pieces,
                           const TrainState& state, runtime::Communicator& comm,
                           const CheckpointSaveOptions& options) {
  Save(dir, pieces, state, Group{comm.device_id(), comm.num_devices(), &comm}, options);
}

void SaveCheckpoint(const fs::path& dir, const Checkpoint& checkpoint,
                    const CheckpointSaveOptions& options) {
  std::vector<SavePiece> pieces;
  for (CheckpointPart part : {CheckpointPart::kModel, CheckpointPart::kOptimizer}) {
    const TensorMap& tensors =
        part == CheckpointPart::kModel ? checkpoint.model : checkpoint.optimizer;
    for (const auto& [name, tensor] : tensors) {
      WEFT_CHECK(tensor.valid() && tensor.shape().IsArray(),
                 "checkpoint {}: tensor '{}' holds no array", dir.string(), name);
      const std::vector<int64_t>& dims = tensor.dimensions();
      pieces.push_back({part,
                        name,
                        {tensor.element_type(), dims},
                        {std::vector<int64_t>(dims.size(), 0), dims},
                        static_cast<const std::byte*>(tensor.raw_data()),
                        dims});
    }
  }
  Save(dir, pieces, checkpoint.state, Group{}, options);
}

CheckpointIndex OpenCheckpoint(const fs::path& target,
                               std::optional<std::string_view> expected_hash) {
  const fs::path dir = Normalize(target);
  auto found = Locate(dir);
  if (!found) {
    std::error_code error;
    if (fs::exists(dir, error)) {
      Fail("{} is not a checkpoint: it has no {}", dir.string(), kStateFile);
    }
    Fail("no checkpoint at {}; check the path (or start without resuming)", dir.string());
  }
  const fs::path state_path = *found / kStateFile;
  CheckpointIndex index =
      ParseState(ReadInputFile(state_path, "checkpoint state", kMaxStateBytes), state_path, *found);
  if (expected_hash && index.state.config_hash != *expected_hash) {
    Fail(
        "checkpoint {} was written under config hash {}, but this run's config hashes to {}; "
        "resume with the config it was trained with, or use a new checkpoint directory",
        dir.string(), index.state.config_hash, *expected_hash);
  }
  return index;
}

Checkpoint LoadCheckpoint(const fs::path& dir, std::optional<std::string_view> expected_hash) {
  const CheckpointIndex index = OpenCheckpoint(dir, expected_hash);
  Checkpoint checkpoint;
  checkpoint.state = index.state;
  for (CheckpointPart part : {CheckpointPart::kModel, CheckpointPart::kOptimizer}) {
    TensorMap& out = part == CheckpointPart::kModel ? checkpoint.model : checkpoint.optimizer;
    for (const auto& [name, tensor] : index.part(part)) {
      const std::vector<int64_t>& dims = tensor.spec.shape;
      runtime::HostTensor t = runtime::HostTensor::Uninitialized(Shape(tensor.spec.dtype, dims));
      ReadTensorBox(
          index, part, name, {std::vector<int64_t>(dims.size(), 0), dims},
          {static_cast<std::byte*>(t.mutable_raw_data()), static_cast<size_t>(t.byte_size())},
          dims);
      out.emplace(name, std::move(t));
    }
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
