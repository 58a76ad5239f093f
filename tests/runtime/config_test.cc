#include "weft/runtime/config.h"

#include <fmt/core.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "weft/base/error.h"
#include "weft/runtime/topology.h"

namespace weft::runtime {
namespace {

class ConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* var :
         {"WEFT_NUM_DEVICES", "WEFT_NUM_SLICES", "WEFT_SLICE_SIZE", "WEFT_COLLECTIVE_TIMEOUT"})
      unsetenv(var);
  }
  void TearDown() override { SetUp(); }
};

TEST_F(ConfigTest, DefaultsThenEnvironment) {
  RuntimeConfig config = CurrentConfig();
  EXPECT_EQ(config.num_devices, 4);
  EXPECT_EQ(config.num_slices, 0);
  EXPECT_EQ(config.slice_size, 0);
  EXPECT_EQ(config.collective_timeout_s, 600);
  EXPECT_EQ(config.ToString(),
            "num_devices=4 num_slices=unset slice_size=unset collective_timeout=600s");
  setenv("WEFT_NUM_DEVICES", "8", 1);
  setenv("WEFT_SLICE_SIZE", "2", 1);
  config = CurrentConfig();
  EXPECT_EQ(config.num_devices, 8);
  EXPECT_EQ(config.slice_size, 2);
}

TEST_F(ConfigTest, MalformedEnvironmentNamesTheVariable) {
  setenv("WEFT_NUM_SLICES", "two", 1);
  try {
    CurrentConfig();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("WEFT_NUM_SLICES"), std::string::npos) << e.what();
  }
  setenv("WEFT_NUM_SLICES", "2", 1);
  setenv("WEFT_NUM_DEVICES", "0", 1);
  EXPECT_THROW(CurrentConfig(), Error);
}

// Every key: a malformed or out-of-range value is a weft::Error naming the
// variable, the value and the allowed range.
TEST_F(ConfigTest, EveryMalformedOrOutOfRangeVariableIsAnErrorNamingValueAndRange) {
  for (int k = 0; k < kNumConfigKeys; ++k) {
    const auto key = static_cast<ConfigKey>(k);
    const std::string var(ConfigEnvVar(key));
    const std::string range = fmt::format("[{}, {}]", ConfigMinValue(key), ConfigMaxValue(key));
    const std::string below = std::to_string(ConfigMinValue(key) - 1);
    const std::string above = std::to_string(ConfigMaxValue(key) + 1);
    for (const std::string& bad : {std::string("abc"), std::string("4x"), std::string("1.5"),
                                   std::string(" 2"), below, above}) {
      setenv(var.c_str(), bad.c_str(), 1);
      for (int reader = 0; reader < 2; ++reader) {
        try {
          if (reader == 0) CurrentConfig();
          if (reader == 1) CurrentConfigValue(key);
          ADD_FAILURE() << var << "=" << bad << " was accepted";
        } catch (const Error& e) {
          const std::string message = e.what();
          EXPECT_NE(message.find(var), std::string::npos) << message;
          EXPECT_NE(message.find(bad), std::string::npos) << message;
          EXPECT_NE(message.find(range), std::string::npos) << message;
        }
      }
    }
    unsetenv(var.c_str());
  }
}

TEST_F(ConfigTest, NumDevicesZeroOrTextIsRefused) {
  for (const char* bad : {"0", "abc", "-4"}) {
    setenv("WEFT_NUM_DEVICES", bad, 1);
    EXPECT_THROW(CurrentConfig(), Error) << bad;
    EXPECT_THROW(CurrentConfigValue(ConfigKey::kNumDevices), Error) << bad;
    EXPECT_THROW(Topology::FromConfig(CurrentConfig()), Error) << bad;
  }
}

TEST_F(ConfigTest, CollectiveTimeoutFromEnvironmentAndOverride) {
  EXPECT_EQ(CurrentConfigValue(ConfigKey::kCollectiveTimeout), kDefaultCollectiveTimeoutSeconds);
  setenv("WEFT_COLLECTIVE_TIMEOUT", "2", 1);
  EXPECT_EQ(CurrentConfig().collective_timeout_s, 2);
  EXPECT_EQ(CurrentConfigValue(ConfigKey::kCollectiveTimeout), 2);
  {
    ScopedConfigOverride flag(ConfigKey::kCollectiveTimeout, 30);
    EXPECT_EQ(CurrentConfig().collective_timeout_s, 30);
    EXPECT_EQ(CurrentConfigValue(ConfigKey::kCollectiveTimeout), 30);
  }
  EXPECT_EQ(CurrentConfigValue(ConfigKey::kCollectiveTimeout), 2);
  // The single-key reader does not trip over another key's bad variable.
  setenv("WEFT_NUM_SLICES", "two", 1);
  EXPECT_EQ(CurrentConfigValue(ConfigKey::kCollectiveTimeout), 2);
  EXPECT_THROW(CurrentConfig(), Error);
  try {
    ScopedConfigOverride bad(ConfigKey::kCollectiveTimeout, 0);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("collective_timeout=0"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("WEFT_COLLECTIVE_TIMEOUT"), std::string::npos) << e.what();
  }
}

TEST_F(ConfigTest, OverridesBeatTheEnvironmentAndNestRestoringInLifoOrder) {
  setenv("WEFT_NUM_DEVICES", "6", 1);
  EXPECT_EQ(CurrentConfig().num_devices, 6);
  {
    ScopedConfigOverride outer(ConfigKey::kNumDevices, 8);
    EXPECT_EQ(CurrentConfig().num_devices, 8);
    {
      ScopedConfigOverride inner(ConfigKey::kNumDevices, 2);
      ScopedConfigOverride slices(ConfigKey::kNumSlices, 2);
      EXPECT_EQ(CurrentConfig().num_devices, 2);
      EXPECT_EQ(CurrentConfig().num_slices, 2);
    }
    EXPECT_EQ(CurrentConfig().num_devices, 8);
    EXPECT_EQ(CurrentConfig().num_slices, 0);
  }
  EXPECT_EQ(CurrentConfig().num_devices, 6);
}

TEST_F(ConfigTest, DestroyingOutOfOrderLeavesTheNewestLiveOverride) {
  auto a = std::make_unique<ScopedConfigOverride>(ConfigKey::kSliceSize, 3);
  auto b = std::make_unique<ScopedConfigOverride>(ConfigKey::kSliceSize, 5);
  a.reset();  // not LIFO: b stays in force
  EXPECT_EQ(CurrentConfig().slice_size, 5);
  b.reset();
  EXPECT_EQ(CurrentConfig().slice_size, 0);
}

TEST_F(ConfigTest, OutOfRangeOverrideIsAnErrorNamingTheKey) {
  try {
    ScopedConfigOverride bad(ConfigKey::kNumDevices, 0);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("num_devices=0"), std::string::npos) << e.what();
  }
  EXPECT_EQ(CurrentConfig().num_devices, 4);
  EXPECT_EQ(ConfigEnvVar(ConfigKey::kSliceSize), "WEFT_SLICE_SIZE");
  EXPECT_EQ(ConfigKeyName(ConfigKey::kNumSlices), "num_slices");
}

TEST_F(ConfigTest, NestedOverridesFromManyThreadsAllRestore) {
  constexpr int kThreads = 8;
  std::atomic<bool> go{false};
  std::atomic<int> bad_reads{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      while (!go.load()) std::this_thread::yield();
      for (int i = 0; i < 500; ++i) {
        ScopedConfigOverride devices(ConfigKey::kNumDevices, 100 + t);
        ScopedConfigOverride slices(ConfigKey::kNumSlices, 1 + t);
        {
          ScopedConfigOverride inner(ConfigKey::kNumDevices, 200 + t);
          // Another thread's override may be newer, but the value is always
          // one that some live override set.
          const int64_t n = CurrentConfig().num_devices;
          if (n < 100 || n >= 200 + kThreads) bad_reads.fetch_add(1);
        }
      }
    });
  }
  go.store(true);
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(bad_reads.load(), 0);
  const RuntimeConfig config = CurrentConfig();
  EXPECT_EQ(config.num_devices, 4);
  EXPECT_EQ(config.num_slices, 0);
}

TEST_F(ConfigTest, ReadingAndOverridingNeverDiscoversTheTopology) {
  const int64_t before = Topology::DiscoveryCount();
  {
    ScopedConfigOverride devices(ConfigKey::kNumDevices, 8);
    CurrentConfig();
  }
  EXPECT_EQ(Topology::DiscoveryCount(), before);
  EXPECT_EQ(before, 0);
}

}  // namespace
}  // namespace weft::runtime
