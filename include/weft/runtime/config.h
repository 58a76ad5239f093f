// The runtime's process-wide configuration: the values topology discovery
// reads (how many in-process devices, how devices form slices) and how long a
// device waits in a collective for the others.
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
  // WEFT_COLLECTIVE_TIMEOUT: seconds a device waits in a collective for the
  // others before the run fails naming the devices that did not arrive;
  // default 600 (10 minutes). The CLI's --collective-timeout overrides it.
  kCollectiveTimeout,
};
inline constexpr int kNumConfigKeys = 4;

// "num_devices", "num_slices", "slice_size", "collective_timeout".
std::string_view ConfigKeyName(ConfigKey key);
// "WEFT_NUM_DEVICES", "WEFT_NUM_SLICES", "WEFT_SLICE_SIZE",
// "WEFT_COLLECTIVE_TIMEOUT".
std::string_view ConfigEnvVar(ConfigKey key);
// The values a key accepts (the same for its variable and an override).
int64_t ConfigMinValue(ConfigKey key);
int64_t ConfigMaxValue(ConfigKey key);

// Default and range of the collective timeout, in seconds.
inline constexpr int64_t kDefaultCollectiveTimeoutSeconds = 600;
inline constexpr int64_t kMaxCollectiveTimeoutSeconds = 7 * 24 * 3600;

struct RuntimeConfig {
  int64_t num_devices = 4;
  int64_t num_slices = 0;  // 0 = unset
  int64_t slice_size = 0;  // 0 = unset
  int64_t collective_timeout_s = kDefaultCollectiveTimeoutSeconds;

  int64_t Get(ConfigKey key) const;
  void Set(ConfigKey key, int64_t value);
  // "num_devices=4 num_slices=unset slice_size=unset collective_timeout=600s".
  std::string ToString() const;
};

// The configuration as it is now: overrides, then environment, then defaults.
// Throws weft::Error naming the variable, its value and the allowed range when
// an environment value is malformed or out of range (any key, not only the
// ones a caller needs: a CLI calls it once at start to refuse a bad
// environment before any work).
RuntimeConfig CurrentConfig();

// One value as CurrentConfig() would give it, reading only that key's
// override or variable.
int64_t CurrentConfigValue(ConfigKey key);

// Overrides one value process-wide for the object's lifetime. Overrides of
// the same key stack: the newest live one wins, and destroying one removes
// only its own entry, so nested overrides restore the previous value when
// destroyed in LIFO order and the state stays consistent in any order (e.g.
// overrides made from several threads). Guarded by a mutex.
//
// A CLI flag becomes an override held for the whole command, e.g.
//   std::optional<ScopedConfigOverride> timeout;
//   if (seconds) timeout.emplace(ConfigKey::kCollectiveTimeout, *seconds);
class ScopedConfigOverride {
 public:
  // Throws weft::Error naming the key, the value and the range when value is
  // out of the key's range.
  ScopedConfigOverride(ConfigKey key, int64_t value);
  ~ScopedConfigOverride();
  ScopedConfigOverride(const ScopedConfigOverride&) = delete;
  ScopedConfigOverride& operator=(const ScopedConfigOverride&) = delete;

 private:
  ConfigKey key_;
  uint64_t id_;
};

}  // namespace weft::runtime
