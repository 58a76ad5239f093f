// The on-disk cache of tuned attention configurations (`weft tune attention`).
//
// One JSON file, {"version": 1, "entries": {key: entry}}, at WEFT_TUNE_CACHE
// or $XDG_CACHE_HOME/weft/attention_tune.json (~/.cache/... without XDG).
// Keys name the CPU model, instruction set, dtype, head dims, mask class and
// size bucket. Reads never fail: a corrupted file, or a missing file that
// WEFT_TUNE_CACHE names explicitly, gives one warning on stderr and no
// entries (kernels then use the heuristic). Writes replace the file
// atomically (temporary + rename).
#pragma once

#include <filesystem>
#include <optional>
#include <string>

#include "weft/kernels/attention.h"
#include "weft/kernels/attention_config.h"

namespace weft::kernels {

struct TuneEntry {
  TileSizes forward, backward;
  BackwardSplit split = BackwardSplit::kAuto;
  double forward_ms = 0, backward_ms = 0;  // what the tuner measured
};

std::filesystem::path TuneCachePath();

// "<cpu model>|<isa>|<dtype>|D<d>|Dv<dv>|<mask class>|S<bucket>".
std::string TuneKey(const ConfigProblem& problem);

// The entry for key, if the cache file has a well-formed one.
std::optional<TuneEntry> LookupTuneEntry(const std::string& key);

// Adds or replaces key's entry (other entries are kept; a corrupted file is
// replaced). Throws weft::Error naming the file when it cannot be written.
void StoreTuneEntry(const std::string& key, const TuneEntry& entry);

// Prints "weft: warning: <message>" to stderr the first time only.
void WarnOnce(const std::string& message);

}  // namespace weft::kernels
