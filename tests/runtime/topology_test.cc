#include "weft/runtime/topology.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <atomic>
#include <thread>
#include <vector>

#include "error_of.h"
#include "weft/base/error.h"
#include "weft/runtime/comm_threads.h"
#include "weft/runtime/hybrid_mesh.h"

namespace weft::runtime {
namespace {

using testing::ErrorOf;

RuntimeConfig Config(int64_t devices, int64_t slices = 0, int64_t slice_size = 0) {
  RuntimeConfig config;
  config.num_devices = devices;
  config.num_slices = slices;
  config.slice_size = slice_size;
  return config;
}

TEST(Topology, FromConfigDefaultIsFourDevicesInOneSlice) {
  const Topology t = Topology::FromConfig(RuntimeConfig{});
  EXPECT_EQ(t.backend(), Backend::kThreads);
  ASSERT_EQ(t.num_devices(), 4);
  EXPECT_EQ(t.num_slices(), 1);
  EXPECT_EQ(t.num_processes(), 1);
  for (int64_t d = 0; d < 4; ++d) {
    EXPECT_EQ(t.device(d).id, d);
    EXPECT_EQ(t.device(d).process, 0);
    EXPECT_EQ(t.device(d).slice, 0);
    EXPECT_EQ(t.device(d).local_index, d);
  }
}

TEST(Topology, FromConfigSplitsDevicesIntoEqualSlices) {
  for (const RuntimeConfig& config : {Config(8, 2), Config(8, 0, 4), Config(8, 2, 4)}) {
    const Topology t = Topology::FromConfig(config);
    EXPECT_EQ(t.num_slices(), 2);
    EXPECT_EQ(t.devices_per_slice(), 4);
    EXPECT_EQ(t.device(5).slice, 1);
    EXPECT_EQ(t.device(5).local_index, 1);
    EXPECT_EQ(t.SliceDevices(1), (std::vector<int64_t>{4, 5, 6, 7}));
  }
}

TEST(Topology, SlicesThatDoNotDivideTheDevicesNameTheVariable) {
  std::string e = ErrorOf([] { Topology::FromConfig(Config(8, 3)); });
  EXPECT_NE(e.find("WEFT_NUM_SLICES=3"), std::string::npos) << e;
  EXPECT_NE(e.find("8 devices"), std::string::npos) << e;
  e = ErrorOf([] { Topology::FromConfig(Config(6, 0, 4)); });
  EXPECT_NE(e.find("WEFT_SLICE_SIZE=4"), std::string::npos) << e;
  e = ErrorOf([] { Topology::FromConfig(Config(8, 2, 2)); });
  EXPECT_NE(e.find("disagree"), std::string::npos) << e;
}

TEST(Topology, EnvironmentAndOverridesReachFromConfigThroughCurrentConfig) {
  setenv("WEFT_NUM_SLICES", "5", 1);
  const std::string e = ErrorOf([] { Topology::FromConfig(CurrentConfig()); });
  EXPECT_NE(e.find("WEFT_NUM_SLICES=5"), std::string::npos) << e;
  unsetenv("WEFT_NUM_SLICES");
  ScopedConfigOverride devices(ConfigKey::kNumDevices, 6);
  ScopedConfigOverride slices(ConfigKey::kNumSlices, 3);
  const Topology t = Topology::FromConfig(CurrentConfig());
  EXPECT_EQ(t.num_devices(), 6);
  EXPECT_EQ(t.num_slices(), 3);
}

TEST(Topology, ProcessesFormOneSlicePerHostInOrderOfLowestRank) {
  // Round-robin placement: ranks alternate between two hosts.
  const Topology t = Topology::FromProcesses({"b", "a", "b", "a"}, RuntimeConfig{});
  EXPECT_EQ(t.backend(), Backend::kMpi);
  EXPECT_EQ(t.num_processes(), 4);
  EXPECT_EQ(t.num_slices(), 2);
  EXPECT_EQ(t.SliceDevices(0), (std::vector<int64_t>{0, 2}));  // host b holds rank 0
  EXPECT_EQ(t.SliceDevices(1), (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(t.device(3).process, 3);
  EXPECT_EQ(t.device(3).local_index, 1);
  EXPECT_EQ(t.device(3).host, "a");
}

TEST(Topology, SliceSizeOverridesHostsAndUnequalHostsAreAnError) {
  const std::vector<std::string> hosts = {"a", "a", "a", "b"};
  const std::string e = ErrorOf([&] { Topology::FromProcesses(hosts, RuntimeConfig{}); });
  EXPECT_NE(e.find("a: 3 ranks"), std::string::npos) << e;
  EXPECT_NE(e.find("WEFT_SLICE_SIZE"), std::string::npos) << e;
  const Topology t = Topology::FromProcesses(hosts, Config(99, 0, 2));
  EXPECT_EQ(t.num_devices(), 4);  // num_devices is ignored under MPI
  EXPECT_EQ(t.num_slices(), 2);
  EXPECT_EQ(t.SliceDevices(1), (std::vector<int64_t>{2, 3}));
  EXPECT_NE(ErrorOf([&] { Topology::FromProcesses(hosts, Config(4, 3)); }).find("4 MPI ranks"),
            std::string::npos);
}

// The devices sharing a host's cores (how the executor sizes each device's
// GEMM team): ranks on the same host under MPI, every device in-process.
TEST(Topology, DevicesOnHostCountTheRanksSharingTheMachine) {
  const std::vector<std::string> hosts = {"a", "a", "a", "b", "c", "c"};
  const Topology t = Topology::FromProcesses(hosts, Config(99, 0, 2));
  const std::vector<int64_t> expected = {3, 3, 3, 1, 2, 2};
  for (int64_t id = 0; id < 6; ++id) EXPECT_EQ(t.DevicesOnHostOf(id), expected[id]) << id;
  EXPECT_NE(ErrorOf([&] { t.DevicesOnHostOf(6); }).find("out of range"), std::string::npos);
  const Topology local = Topology::FromConfig(Config(8, 2));
  for (int64_t id = 0; id < 8; ++id) EXPECT_EQ(local.DevicesOnHostOf(id), 8);
}

TEST(Topology, ToStringIsATableWithTheDiscoveryCount) {
  const std::string text = Topology::FromConfig(Config(8, 2)).ToString();
  EXPECT_NE(text.find("8 devices (threads backend, 1 process), 2 slices of 4"), std::string::npos)
      << text;
  EXPECT_NE(text.find("discoveries so far: "), std::string::npos) << text;
  EXPECT_NE(text.find("device  process  slice  local"), std::string::npos) << text;
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 2 + 8) << text;
}

TEST(Topology, DeviceIdOutOfRangeIsAnError) {
  const Topology t = Topology::FromConfig(RuntimeConfig{});
  EXPECT_NE(ErrorOf([&] { t.device(4); }).find("device id 4 is out of range"), std::string::npos);
}

// The only test here that calls Global(): discovery happens once, from the
// configuration in force at that moment, and nothing else discovers.
TEST(Topology, GlobalDiscoversExactlyOnceAndNothingElseDiscovers) {
  ASSERT_EQ(Topology::DiscoveryCount(), 0);
  // Building things does not discover.
  const Topology built = Topology::FromConfig(Config(8, 2));
  HybridDeviceOrder(built, {2, 2}, {2, 1});
  LocalCluster cluster(3);
  cluster.Run(
      [](int64_t, Communicator& comm) { comm.AllReduce(std::vector<float>{1.f}, ReduceOp::kSum); });
  CurrentConfig();
  EXPECT_EQ(Topology::DiscoveryCount(), 0);

  ScopedConfigOverride devices(ConfigKey::kNumDevices, 6);
  ScopedConfigOverride slices(ConfigKey::kNumSlices, 2);
  constexpr int kThreads = 8;
  std::atomic<bool> go{false};
  std::vector<const Topology*> seen(kThreads);
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      while (!go.load()) std::this_thread::yield();
      seen[i] = &Topology::Global();
    });
  }
  go.store(true);
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(Topology::DiscoveryCount(), 1);
  for (const Topology* t : seen) EXPECT_EQ(t, seen[0]);
  EXPECT_EQ(seen[0]->num_devices(), 6);
  EXPECT_EQ(seen[0]->num_slices(), 2);

  // Later overrides and later builds do not rediscover.
  ScopedConfigOverride more(ConfigKey::kNumDevices, 2);
  EXPECT_EQ(Topology::Global().num_devices(), 6);
  LocalCluster global_cluster(Topology::Global());
  global_cluster.Run([](int64_t, Communicator& comm) { comm.Barrier(); });
  EXPECT_EQ(Topology::DiscoveryCount(), 1);
  EXPECT_NE(Topology::Global().ToString().find("discoveries so far: 1"), std::string::npos);
}

}  // namespace
}  // namespace weft::runtime
