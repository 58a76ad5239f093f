// The tuned-configuration cache file (see tune_cache.h).
#include "weft/kernels/tune_cache.h"

#include <fmt/core.h>
#include <sys/stat.h>

#include <cstdio>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>

#include "weft/base/atomic_file.h"
#include "weft/base/cpu.h"
#include "weft/base/data_files.h"
#include "weft/base/env.h"
#include "weft/base/error.h"

namespace weft::kernels {

namespace {

using nlohmann::json;

std::mutex g_mutex;

// The parsed file, reloaded when its path, size or modification time change.
struct Loaded {
  std::string path;
  int64_t size = -1, mtime_ns = -1;
  json entries = json::object();
};
Loaded g_loaded;

const char* SplitName(BackwardSplit s) {
  return s == BackwardSplit::kFused ? "fused" : s == BackwardSplit::kSplit ? "split" : "auto";
}

BackwardSplit SplitFromName(const std::string& s) {
  if (s == "fused") return BackwardSplit::kFused;
  if (s == "split") return BackwardSplit::kSplit;
  if (s == "auto") return BackwardSplit::kAuto;
  Fail("unknown backward split '{}'", s);
}

void WarnOnceLocked(const std::string& message) {
  static std::set<std::string> warned;
  if (warned.insert(message).second) fmt::print(stderr, "weft: warning: {}\n", message);
}

// Entries of the file at `path`; {} (with one warning) when unreadable.
json ReadEntries(const std::filesystem::path& path, bool explicit_path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    if (explicit_path) {
      WarnOnceLocked(
          fmt::format("WEFT_TUNE_CACHE={} does not exist; using the heuristic "
                      "configurations (run `weft tune attention` to create it)",
                      path.string()));
    }
    return json::object();
  }
  try {
    // A device (/dev/zero) or a file over 64 MiB is refused unread (a
    // warning, as for any unreadable cache).
    json j = json::parse(ReadInputFile(path, "tune cache", int64_t{64} << 20));
    if (!j.is_object() || j.value("version", 0) != 1 || !j.contains("entries") ||
        !j["entries"].is_object()) {
      Fail("not a version-1 weft tune cache");
    }
    return j["entries"];
  } catch (const std::exception& e) {
    WarnOnceLocked(
        fmt::format("tune cache {} is unreadable ({}); ignoring it and using the "
                    "heuristic configurations (rerun `weft tune attention` to "
                    "rewrite it)",
                    path.string(), e.what()));
    return json::object();
  }
}

const json& CurrentEntries() {
  const std::filesystem::path path = TuneCachePath();
  struct stat st {};
  int64_t size = -1, mtime = -1;
  if (::stat(path.c_str(), &st) == 0) {
    size = st.st_size;
    mtime = int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec;
  }
  if (g_loaded.path != path.string() || g_loaded.size != size || g_loaded.mtime_ns != mtime) {
    g_loaded.path = path.string();
    g_loaded.size = size;
    g_loaded.mtime_ns = mtime;
    g_loaded.entries = ReadEntries(path, GetEnv("WEFT_TUNE_CACHE").has_value());
  }
  return g_loaded.entries;
}

TileSizes TilesFrom(const json& j, const char* m, const char* n) {
  TileSizes t{j.at(m).get<int64_t>(), j.at(n).get<int64_t>()};
  if (t.block_m <= 0 || t.block_n <= 0) Fail("non-positive tile size");
  return t;
}

}  // namespace

std::filesystem::path TuneCachePath() {
  if (auto p = GetEnv("WEFT_TUNE_CACHE")) return *p;
  std::filesystem::path base;
  if (auto xdg = GetEnv("XDG_CACHE_HOME")) {
    base = *xdg;
  } else if (auto home = GetEnv("HOME")) {
    base = std::filesystem::path(*home) / ".cache";
  } else {
    base = std::filesystem::temp_directory_path();
  }
  return base / "weft" / "attention_tune.json";
}

std::string TuneKey(const ConfigProblem& p) {
  return fmt::format("{}|{}|{}|D{}|Dv{}|{}|S{}", GetCpuInfo().model_name, p.isa,
                     PrimitiveTypeName(p.dtype), p.dims.head_dim, p.dims.value_dim, p.MaskClass(),
                     p.SizeBucket());
}

std::optional<TuneEntry> LookupTuneEntry(const std::string& key) {
  std::lock_guard<std::mutex> lock(g_mutex);
  const json& entries = CurrentEntries();
  auto it = entries.find(key);
  if (it == entries.end()) return std::nullopt;
  try {
    TuneEntry e;
    e.forward = TilesFrom(*it, "BLOCK_M", "BLOCK_N");
    e.backward = TilesFrom(*it, "BLOCK_M_BWD", "BLOCK_N_BWD");
    e.split = SplitFromName(it->value("split", "auto"));
    e.forward_ms = it->value("forward_ms", 0.0);
    e.backward_ms = it->value("backward_ms", 0.0);
    return e;
  } catch (const std::exception& ex) {
    WarnOnceLocked(fmt::format("tune cache {}: entry '{}' is malformed ({}); using the heuristic",
                               g_loaded.path, key, ex.what()));
    return std::nullopt;
  }
}

void StoreTuneEntry(const std::string& key, const TuneEntry& e) {
  std::lock_guard<std::mutex> lock(g_mutex);
  const std::filesystem::path path = TuneCachePath();
  json entries = CurrentEntries();
  entries[key] = {{"BLOCK_M", e.forward.block_m},      {"BLOCK_N", e.forward.block_n},
                  {"BLOCK_M_BWD", e.backward.block_m}, {"BLOCK_N_BWD", e.backward.block_n},
                  {"split", SplitName(e.split)},       {"forward_ms", e.forward_ms},
                  {"backward_ms", e.backward_ms}};
  json file = {{"version", 1}, {"entries", entries}};
  std::error_code ec;
  if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path(), ec);
  // WEFT_TUNE_CACHE names the user's own file (a link there is followed); the
  // default one is weft's, never written through a link.
  WriteFileAtomically(path, file.dump(2) + "\n",
                      GetEnv("WEFT_TUNE_CACHE") ? OutputTarget::kUserPath : OutputTarget::kManaged);
  g_loaded.path.clear();  // reread (and re-stat) on the next lookup
}

void WarnOnce(const std::string& message) {
  std::lock_guard<std::mutex> lock(g_mutex);
  WarnOnceLocked(message);
}

}  // namespace weft::kernels
