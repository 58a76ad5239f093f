// The runtime's process-wide configuration: the values topology discovery
// reads (how many in-process devices, how devices form slices).
//
// Each value comes from a live ScopedConfigOverride if there is one, else from
// its environment variable, else from its default. Reading the configuration
// never discovers the topology; discovery (Topology::Global) reads it once.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace weft::runtime {

enum class ConfigKey : int {
  kNumDevices,  // WEFT_NUM_DEVICES: in-process (virtual) devices; default 4
  kNumSlices,   // WEFT_NUM_SLICES: slices; 0 = unset (one slice, or from slice_size)
  kSliceSize,   // WEFT_SLICE_SIZE: devices (MPI ranks) per slice; 0 = unset
};
inline constexpr int kNumConfigKeys = 3;

// "num_devices", "num_slices", "slice_size".
std::string_view ConfigKeyName(ConfigKey key);
// "WEFT_NUM_DEVICES", "WEFT_NUM_SLICES", "WEFT_SLICE_SIZE".
std::string_view ConfigEnvVar(ConfigKey key);

struct RuntimeConfig {
  int64_t num_devices = 4;
  int64_t num_slices = 0;  // 0 = unset
  int64_t slice_size = 0;  // 0 = unset

  int64_t Get(ConfigKey key) const;
  void Set(ConfigKey key, int64_t value);
  // "num_devices=4 num_slices=unset slice_size=unset".
  std::string ToString() const;
};

// The configuration as it is now: overrides, then environment, then defaults.
// Throws weft::Error naming the variable when an environment value is
// malformed or out of range.
RuntimeConfig CurrentConfig();

// Overrides one value process-wide for the object's lifetime. Overrides of
// the same key stack: the newest live one wins, and destroying one removes
// only its own entry, so nested overrides restore the previous value when
// destroyed in LIFO order and the state stays consistent in any order (e.g.
// overrides made from several threads). Guarded by a mutex.
class ScopedConfigOverride {
 public:
  // Throws weft::Error when value is out of the key's range.
  ScopedConfigOverride(ConfigKey key, int64_t value);
  ~ScopedConfigOverride();
  ScopedConfigOverride(const ScopedConfigOverride&) = delete;
  ScopedConfigOverride& operator=(const ScopedConfigOverride&) = delete;

 private:
  ConfigKey key_;
  uint64_t id_;
};

}  // namespace weft::runtime
