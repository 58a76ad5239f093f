// The backend-independent part of Communicator: validation, the calls
// backends receive, and the byte-counting rule, through a recording fake.
#include "weft/runtime/communicator.h"

#include <gtest/gtest.h>

#include <cstring>

#include "error_of.h"

namespace weft::runtime {
namespace {

class FakeCommunicator final : public Communicator {
 public:
  FakeCommunicator(int64_t device, int64_t num_devices) : device_(device), n_(num_devices) {}
  int64_t device_id() const override { return device_; }
  int64_t num_devices() const override { return n_; }
  std::string_view backend() const override { return "fake"; }

  CollectiveCall last;
  std::vector<uint64_t> hashes;  // what kVerifyHash "receives"

 protected:
  void DoCollective(const CollectiveCall& call) override {
    last = call;
    if (call.kind == CollectiveKind::kVerifyHash)
      std::memcpy(call.out, hashes.data(), hashes.size() * sizeof(uint64_t));
  }

 private:
  int64_t device_, n_;
};

using testing::ErrorOf;

// The message of the weft::InternalError fn throws ("" when none).
std::string InternalErrorOf(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const InternalError& e) {
    return e.what();
  }
  return "";
}

TEST(Communicator, ByteCountingRuleByHand) {
  using K = CollectiveKind;
  // Ring all-reduce: each device sends 2(n-1)/n of the buffer.
  EXPECT_EQ(CollectiveBytesSent(K::kAllReduce, 4, 1024), 1536);
  EXPECT_EQ(CollectiveBytesSent(K::kAllReduce, 3, 10), 13);  // 40/3 rounded down
  EXPECT_EQ(CollectiveBytesSent(K::kAllGather, 4, 100), 300);
  EXPECT_EQ(CollectiveBytesSent(K::kReduceScatter, 4, 400), 300);
  EXPECT_EQ(CollectiveBytesSent(K::kAllToAll, 4, 400), 300);
  EXPECT_EQ(CollectiveBytesSent(K::kCollectivePermute, 2, 400), 400);
  EXPECT_EQ(CollectiveBytesSent(K::kCollectivePermute, 1, 400), 0);
  EXPECT_EQ(CollectiveBytesSent(K::kBarrier, 8, 0), 0);
  EXPECT_EQ(CollectiveBytesSent(K::kVerifyHash, 8, 8), 0);
  for (int k = 0; k < kNumCollectiveKinds; ++k)
    EXPECT_EQ(CollectiveBytesSent(static_cast<K>(k), 1, 4096), 0);
}

TEST(Communicator, ReplicaGroupsAreValidatedAsAPartition) {
  EXPECT_EQ(NormalizeReplicaGroups({}, 3), (ReplicaGroups{{0, 1, 2}}));
  EXPECT_EQ(NormalizeReplicaGroups({{2, 0}, {1, 3}}, 4), (ReplicaGroups{{2, 0}, {1, 3}}));
  EXPECT_EQ(ReplicaGroupsToString({{0, 1}, {2, 3}}), "{{0,1},{2,3}}");
  EXPECT_NE(ErrorOf([] {
              NormalizeReplicaGroups({{0, 1}, {1, 2}}, 3);
            }).find("device 1 twice"),
            std::string::npos);
  EXPECT_NE(ErrorOf([] {
              NormalizeReplicaGroups({{0, 1}}, 3);
            }).find("leave out device 2"),
            std::string::npos);
  EXPECT_NE(ErrorOf([] {
              NormalizeReplicaGroups({{0, 4}}, 4);
            }).find("name device 4"),
            std::string::npos);
  EXPECT_NE(ErrorOf([] {
              NormalizeReplicaGroups({{0, 1}, {}}, 2);
            }).find("empty group"),
            std::string::npos);
}

TEST(Communicator, BackendsReceiveSizesGroupAndPosition) {
  FakeCommunicator comm(2, 4);
  std::vector<float> in(6), out(12);
  comm.AllGather(in.data(), out.data(), 6, PrimitiveType::kF32, {{1, 3}, {0, 2}});
  EXPECT_EQ(comm.last.kind, CollectiveKind::kAllGather);
  EXPECT_EQ(comm.last.in_bytes, 24);
  EXPECT_EQ(comm.last.out_bytes, 48);
  EXPECT_EQ(comm.last.group_index, 1);
  EXPECT_EQ(comm.last.position, 1);
  EXPECT_EQ(comm.last.members(), (std::vector<int64_t>{0, 2}));
  EXPECT_EQ(comm.last.sequence, 1);

  comm.ReduceScatter(out.data(), in.data(), 12, PrimitiveType::kF32, ReduceOp::kMax, {});
  EXPECT_EQ(comm.last.out_bytes, 12);
  EXPECT_EQ(comm.last.group_size(), 4);
  EXPECT_EQ(comm.last.position, 2);
  EXPECT_EQ(comm.last.sequence, 2);
  EXPECT_EQ(comm.last.Describe(), "ReduceScatter #2 (max f32, 48 bytes in, groups {{0,1,2,3}})");
  EXPECT_EQ(comm.GroupSize({{0, 2}, {1, 3}}), 2);
}

// A program names a few distinct groups over and over: each is normalized
// once, and every call with it points at that copy (no copy per call), even
// after the caller's own groups are gone.
TEST(Communicator, CallsShareTheNormalizedGroupsTheyName) {
  FakeCommunicator comm(3, 4);
  std::vector<float> in(8), out(8);
  {
    const ReplicaGroups pairs{{0, 1}, {2, 3}};
    comm.AllToAll(in.data(), out.data(), 8, PrimitiveType::kF32, pairs);
  }
  const ReplicaGroups* first = comm.last.groups;
  comm.AllToAll(in.data(), out.data(), 8, PrimitiveType::kF32, {{0, 1}, {2, 3}});
  EXPECT_EQ(comm.last.groups, first);
  EXPECT_EQ(*comm.last.groups, (ReplicaGroups{{0, 1}, {2, 3}}));
  EXPECT_EQ(comm.last.members(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(comm.last.position, 1);
  comm.AllToAll(in.data(), out.data(), 8, PrimitiveType::kF32, {{0, 2}, {1, 3}});
  EXPECT_NE(comm.last.groups, first);
  EXPECT_EQ(comm.last.members(), (std::vector<int64_t>{1, 3}));
  comm.AllToAll(in.data(), out.data(), 8, PrimitiveType::kF32, {});
  EXPECT_EQ(*comm.last.groups, (ReplicaGroups{{0, 1, 2, 3}}));
  EXPECT_EQ(comm.last.position, 3);
  // The first groups again: still the same copy.
  comm.AllToAll(in.data(), out.data(), 8, PrimitiveType::kF32, {{0, 1}, {2, 3}});
  EXPECT_EQ(comm.last.groups, first);
  // Bad groups are still rejected, every time.
  for (int i = 0; i < 2; ++i) {
    EXPECT_NE(ErrorOf([&] {
                comm.AllToAll(in.data(), out.data(), 8, PrimitiveType::kF32, {{0, 1}, {1, 3}});
              }).find("device 1 twice"),
              std::string::npos);
  }
}

TEST(Communicator, StatsFollowTheCountingRule) {
  FakeCommunicator comm(1, 4);
  std::vector<int32_t> a(8), b(16);
  comm.AllReduce(a.data(), a.data(), 8, PrimitiveType::kS32, ReduceOp::kSum, {{0, 1}, {2, 3}});
  comm.AllGather(a.data(), b.data(), 4, PrimitiveType::kS32, {{0, 1, 2, 3}});
  comm.ReduceScatter(a.data(), b.data(), 8, PrimitiveType::kS32, ReduceOp::kSum, {});
  comm.AllToAll(a.data(), b.data(), 8, PrimitiveType::kS32, {{0, 1}, {2, 3}});
  comm.CollectivePermute(a.data(), b.data(), 8, PrimitiveType::kS32, {{1, 2}, {2, 1}});
  comm.CollectivePermute(a.data(), b.data(), 8, PrimitiveType::kS32, {{0, 1}});  // 1 only receives
  comm.Barrier();
  const CollectiveStats& s = comm.stats();
  EXPECT_EQ(s.BytesSent(CollectiveKind::kAllReduce), 32);      // 2*(2-1)*32/2
  EXPECT_EQ(s.BytesSent(CollectiveKind::kAllGather), 48);      // 3*16
  EXPECT_EQ(s.BytesSent(CollectiveKind::kReduceScatter), 24);  // 3*32/4
  EXPECT_EQ(s.BytesSent(CollectiveKind::kAllToAll), 16);       // 1*32/2
  EXPECT_EQ(s.BytesSent(CollectiveKind::kCollectivePermute), 32);
  EXPECT_EQ(s.Calls(CollectiveKind::kCollectivePermute), 2);
  EXPECT_EQ(s.Calls(CollectiveKind::kBarrier), 1);
  EXPECT_EQ(s.TotalBytesSent(), 32 + 48 + 24 + 16 + 32);
  comm.ResetStats();
  EXPECT_EQ(comm.stats().TotalBytesSent(), 0);
}

TEST(Communicator, BadArgumentsAreClearErrors) {
  FakeCommunicator comm(0, 4);
  std::vector<float> a(12), b(48);
  EXPECT_NE(ErrorOf([&] {
              comm.ReduceScatter(a.data(), b.data(), 10, PrimitiveType::kF32, ReduceOp::kSum, {});
            }).find("10 elements, which does not split into 4"),
            std::string::npos);
  EXPECT_EQ(ErrorOf([&] {
              comm.AllReduce(a.data(), a.data(), 12, PrimitiveType::kF32, ReduceOp::kSum, {});
            }),
            "");  // in place is fine

  EXPECT_NE(ErrorOf([&] {
              comm.CollectivePermute(a.data(), b.data(), 4, PrimitiveType::kF32, {{0, 1}, {0, 2}});
            }).find("device 0 is the source of two pairs"),
            std::string::npos);
  EXPECT_NE(ErrorOf([&] {
              comm.CollectivePermute(a.data(), b.data(), 4, PrimitiveType::kF32, {{0, 1}, {2, 1}});
            }).find("device 1 is the target of two pairs"),
            std::string::npos);
  EXPECT_NE(ErrorOf([&] {
              comm.CollectivePermute(a.data(), b.data(), 4, PrimitiveType::kF32, {{0, 9}});
            }).find("outside 0..3"),
            std::string::npos);
}

// Buffers and counts come from weft's own code, never from a user: bad ones
// are internal errors (bugs), not bad input.
TEST(Communicator, BadBuffersAreInternalErrors) {
  FakeCommunicator comm(0, 4);
  std::vector<float> a(12);
  EXPECT_NE(InternalErrorOf([&] {
              comm.AllGather(a.data(), a.data() + 1, 2, PrimitiveType::kF32, {});
            }).find("overlap"),
            std::string::npos);
  EXPECT_NE(InternalErrorOf([&] {
              comm.AllGather(a.data(), a.data(), 2, PrimitiveType::kF32, {});
            }).find("overlap"),
            std::string::npos);
  EXPECT_NE(InternalErrorOf([&] {
              comm.AllReduce(nullptr, a.data(), 4, PrimitiveType::kF32, ReduceOp::kSum);
            }).find("input buffer is null"),
            std::string::npos);
  EXPECT_NE(InternalErrorOf([&] {
              comm.AllReduce(a.data(), a.data(), -1, PrimitiveType::kF32, ReduceOp::kSum);
            }).find("element count -1 is negative"),
            std::string::npos);
  // Groups come from a user's HLO: still bad input.
  EXPECT_NE(ErrorOf([&] {
              comm.AllReduce(a.data(), a.data(), 4, PrimitiveType::kF32, ReduceOp::kSum, {{0, 1}});
            }).find("leave out device 2"),
            std::string::npos);
}

TEST(Communicator, VerifySameHashNamesTheDevicesThatDiffer) {
  FakeCommunicator comm(0, 4);
  comm.hashes = {7, 7, 7, 7};
  comm.VerifySameHash(7, "program");
  comm.hashes = {7, 9, 7, 7};
  const std::string e = ErrorOf([&] { comm.VerifySameHash(7, "program hash"); });
  EXPECT_NE(e.find("program hash differs between devices"), std::string::npos) << e;
  EXPECT_NE(e.find("devices 0,2,3 have 0x0000000000000007"), std::string::npos) << e;
  EXPECT_NE(e.find("device 1 has 0x0000000000000009"), std::string::npos) << e;
}

TEST(Communicator, ElementTypes) {
  EXPECT_EQ(ElementTypeOf<uint16_t>(), PrimitiveType::kBF16);
  EXPECT_EQ(ElementTypeOf<int32_t>(), PrimitiveType::kS32);
  EXPECT_EQ(ElementTypeOf<uint8_t>(), PrimitiveType::kPred);
  EXPECT_NO_THROW(CheckCollectiveType(PrimitiveType::kU16));
  EXPECT_NO_THROW(CheckCollectiveType(PrimitiveType::kF64));
  try {
    CheckCollectiveType(PrimitiveType::kC64);
    FAIL() << "c64 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("does not support element type c64"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace weft::runtime
