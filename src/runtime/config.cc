#include "weft/runtime/config.h"

#include <fmt/core.h>

#include <array>
#include <mutex>
#include <vector>

#include "weft/base/env.h"
#include "weft/base/error.h"
#include "weft/base/limits.h"

namespace weft::runtime {

namespace {

struct KeyInfo {
  std::string_view name;
  std::string_view env_var;
  int64_t default_value;
  int64_t min_value;
  int64_t max_value;
};

// One row per ConfigKey, in enum order. 0 means "unset" for the slice keys.
constexpr std::array<KeyInfo, kNumConfigKeys> kKeys{{
    {"num_devices", "WEFT_NUM_DEVICES", 4, 1, kMaxDevices},
    {"num_slices", "WEFT_NUM_SLICES", 0, 0, kMaxDevices},
    {"slice_size", "WEFT_SLICE_SIZE", 0, 0, kMaxDevices},
    {"collective_timeout", "WEFT_COLLECTIVE_TIMEOUT", kDefaultCollectiveTimeoutSeconds, 1,
     kMaxCollectiveTimeoutSeconds},
}};

const KeyInfo& Info(ConfigKey key) {
  int index = static_cast<int>(key);
  WEFT_INTERNAL_CHECK(index >= 0 && index < kNumConfigKeys, "unknown runtime ConfigKey {}", index);
  return kKeys[index];
}

struct OverrideEntry {
  uint64_t id;
  ConfigKey key;
  int64_t value;
};

// Live overrides, oldest first. A vector: there are only ever a handful.
struct OverrideStack {
  std::mutex mu;
  std::vector<OverrideEntry> entries;
  uint64_t next_id = 1;
};

OverrideStack& Overrides() {
  static OverrideStack* stack = new OverrideStack;  // never destroyed: usable at exit
  return *stack;
}

}  // namespace

std::string_view ConfigKeyName(ConfigKey key) { return Info(key).name; }
std::string_view ConfigEnvVar(ConfigKey key) { return Info(key).env_var; }
int64_t ConfigMinValue(ConfigKey key) { return Info(key).min_value; }
int64_t ConfigMaxValue(ConfigKey key) { return Info(key).max_value; }

int64_t RuntimeConfig::Get(ConfigKey key) const {
  switch (key) {
    case ConfigKey::kNumDevices:
      return num_devices;
    case ConfigKey::kNumSlices:
      return num_slices;
    case ConfigKey::kSliceSize:
      return slice_size;
    case ConfigKey::kCollectiveTimeout:
      return collective_timeout_s;
  }
  FailInternal("unknown runtime ConfigKey {}", static_cast<int>(key));
}

void RuntimeConfig::Set(ConfigKey key, int64_t value) {
  switch (key) {
    case ConfigKey::kNumDevices:
      num_devices = value;
      return;
    case ConfigKey::kNumSlices:
      num_slices = value;
      return;
    case ConfigKey::kSliceSize:
      slice_size = value;
      return;
    case ConfigKey::kCollectiveTimeout:
      collective_timeout_s = value;
      return;
  }
  FailInternal("unknown runtime ConfigKey {}", static_cast<int>(key));
}

std::string RuntimeConfig::ToString() const {
  auto show = [](int64_t v) { return v == 0 ? std::string("unset") : std::to_string(v); };
  return fmt::format("num_devices={} num_slices={} slice_size={} collective_timeout={}s",
                     num_devices, show(num_slices), show(slice_size), collective_timeout_s);
}

RuntimeConfig CurrentConfig() {
  RuntimeConfig config;
  std::array<bool, kNumConfigKeys> overridden{};
  {
    OverrideStack& stack = Overrides();
    std::lock_guard<std::mutex> lock(stack.mu);
    // Oldest first, so the newest override of a key is the one left standing.
    for (const OverrideEntry& e : stack.entries) {
      config.Set(e.key, e.value);
      overridden[static_cast<int>(e.key)] = true;
    }
  }
  for (int i = 0; i < kNumConfigKeys; ++i) {
    if (overridden[i]) continue;
    const KeyInfo& info = kKeys[i];
    config.Set(static_cast<ConfigKey>(i), GetEnvInt(std::string(info.env_var), info.default_value,
                                                    info.min_value, info.max_value));
  }
  return config;
}

int64_t CurrentConfigValue(ConfigKey key) {
  const KeyInfo& info = Info(key);
  {
    OverrideStack& stack = Overrides();
    std::lock_guard<std::mutex> lock(stack.mu);
    for (auto it = stack.entries.rbegin(); it != stack.entries.rend(); ++it)
      if (it->key == key) return it->value;
  }
  return GetEnvInt(std::string(info.env_var), info.default_value, info.min_value, info.max_value);
}

ScopedConfigOverride::ScopedConfigOverride(ConfigKey key, int64_t value) : key_(key) {
  const KeyInfo& info = Info(key);
  WEFT_CHECK(value >= info.min_value && value <= info.max_value,
             "{}={} is out of range; use a value in [{}, {}] (the range of {})", info.name, value,
             info.min_value, info.max_value, info.env_var);
  OverrideStack& stack = Overrides();
  std::lock_guard<std::mutex> lock(stack.mu);
  id_ = stack.next_id++;
  stack.entries.push_back({id_, key, value});
}

ScopedConfigOverride::~ScopedConfigOverride() {
  OverrideStack& stack = Overrides();
  std::lock_guard<std::mutex> lock(stack.mu);
  for (auto it = stack.entries.begin(); it != stack.entries.end(); ++it) {
    if (it->id == id_) {
      stack.entries.erase(it);
      return;
    }
  }
}

}  // namespace weft::runtime
