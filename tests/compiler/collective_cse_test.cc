// Duplicate collectives after partitioning: the same all-gather, all-to-all
// or collective-permute of one operand is merged when near, kept when the
// groups, dimensions or operands differ or when merging would keep the first
// result alive far longer; the merged program computes what the original
// did, on device threads, on random inputs.
#include "weft/compiler/collective_cse.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <random>

#include "count_opcode.h"
#include "weft/hlo/parser.h"
#include "weft/hlo/printer.h"
#include "weft/hlo/verifier.h"
#include "weft/runtime/executor.h"

namespace weft::compiler {
namespace {

using runtime::HostTensor;

using weft::testing::CountOpcode;

// Runs both modules on 4 devices with the same random inputs ([4, 6] f32
// each) and expects the same bits.
void ExpectSameResults(const HloModule& a, const HloModule& b, int64_t params) {
  std::mt19937_64 rng(7);
  std::vector<std::vector<HostTensor>> inputs(4);
  for (auto& device : inputs) {
    for (int64_t p = 0; p < params; ++p) {
      std::vector<double> v(24);
      for (double& x : v) x = std::uniform_real_distribution<double>(-2, 2)(rng);
      device.push_back(HostTensor::FromDoubles(ParseShape("f32[4,6]"), v));
    }
  }
  runtime::LocalCluster cluster(4);
  const auto want = runtime::RunOnDevices(a, inputs, cluster);
  const auto got = runtime::RunOnDevices(b, inputs, cluster);
  for (int64_t d = 0; d < 4; ++d) {
    ASSERT_EQ(want[d].size(), got[d].size());
    for (size_t leaf = 0; leaf < want[d].size(); ++leaf) {
      EXPECT_EQ(want[d][leaf].ToDoubles(), got[d][leaf].ToDoubles())
          << "device " << d << " leaf " << leaf;
    }
  }
}

// Two collectives `first` and `second` (their text after the name), an add
// of their results; filler + 1 adds between the first one's user and the
// second.
std::string Module(const std::string& first, const std::string& second, int64_t filler = 0) {
  std::string chain = "  f0 = f32[4,6] add(x, y)\n";
  for (int64_t i = 1; i <= filler; ++i)
    chain += fmt::format("  f{} = f32[4,6] add(f{}, y)\n", i, i - 1);
  return fmt::format(R"(HloModule m, num_partitions=4
ENTRY e {{
  x = f32[4,6] parameter(0)
  y = f32[4,6] parameter(1)
  a = {}
  ua = f32[8,6] negate(a)
{}  b = {}
  ub = f32[8,6] exponential(b)
  sum = f32[8,6] add(ua, ub)
  ROOT out = (f32[8,6], f32[4,6]) tuple(sum, f{})
}}
)",
                     first, chain, second, filler);
}

constexpr char kGather1[] =
    "f32[8,6] all-gather(x), channel_id=1, replica_groups={{0,1},{2,3}}, dimensions={0}, "
    "use_global_device_ids=true";
constexpr char kGather2[] =
    "f32[8,6] all-gather(x), channel_id=2, replica_groups={{0,1},{2,3}}, dimensions={0}, "
    "use_global_device_ids=true";

TEST(CollectiveCse, MergesTheSameAllGatherOfOneOperand) {
  const std::string text = Module(kGather1, kGather2);
  std::unique_ptr<HloModule> original = ParseHloModule(text), merged = ParseHloModule(text);
  const CollectiveCseStats stats = MergeCommonCollectives(*merged);
  EXPECT_EQ(stats.merged, 1);
  EXPECT_EQ(CountOpcode(*merged, HloOpcode::kAllGather), 1);
  VerifyHloModule(*merged);
  EXPECT_EQ(PrintModule(*ParseHloModule(PrintModule(*merged))), PrintModule(*merged));
  ExpectSameResults(*original, *merged, 2);
}

TEST(CollectiveCse, KeepsCollectivesThatDiffer) {
  const char* others[] = {
      // other groups
      "f32[8,6] all-gather(x), channel_id=2, replica_groups={{0,2},{1,3}}, dimensions={0}, "
      "use_global_device_ids=true",
      // another operand
      "f32[8,6] all-gather(y), channel_id=2, replica_groups={{0,1},{2,3}}, dimensions={0}, "
      "use_global_device_ids=true",
  };
  for (const char* other : others) {
    const std::string text = Module(kGather1, other);
    std::unique_ptr<HloModule> original = ParseHloModule(text), m = ParseHloModule(text);
    EXPECT_EQ(MergeCommonCollectives(*m).merged, 0) << other;
    EXPECT_EQ(CountOpcode(*m, HloOpcode::kAllGather), 2) << other;
    ExpectSameResults(*original, *m, 2);
  }
  // Another dimension: f32[4,12].
  const std::string text = fmt::format(R"(HloModule m, num_partitions=4
ENTRY e {{
  x = f32[4,6] parameter(0)
  a = {}
  b = f32[4,12] all-gather(x), channel_id=2, replica_groups={{{{0,1}},{{2,3}}}}, dimensions={{1}}, use_global_device_ids=true
  ROOT t = (f32[8,6], f32[4,12]) tuple(a, b)
}}
)",
                                       kGather1);
  std::unique_ptr<HloModule> m = ParseHloModule(text);
  EXPECT_EQ(MergeCommonCollectives(*m).merged, 0);
}

TEST(CollectiveCse, MergesAllToAllAndPermuteToo) {
  const std::string text = fmt::format(R"(HloModule m, num_partitions=4
ENTRY e {{
  x = f32[4,6] parameter(0)
  a = f32[4,6] all-to-all(x), channel_id=1, replica_groups={{{{0,1}},{{2,3}}}}, dimensions={{0}}
  b = f32[4,6] all-to-all(x), channel_id=2, replica_groups={{{{0,1}},{{2,3}}}}, dimensions={{0}}
  p = f32[4,6] collective-permute(x), channel_id=3, source_target_pairs={{{{0,1}},{{1,2}},{{2,3}},{{3,0}}}}
  q = f32[4,6] collective-permute(x), channel_id=4, source_target_pairs={{{{0,1}},{{1,2}},{{2,3}},{{3,0}}}}
  r = f32[4,6] collective-permute(x), channel_id=5, source_target_pairs={{{{0,2}},{{2,0}}}}
  s1 = f32[4,6] subtract(a, b)
  s2 = f32[4,6] subtract(p, q)
  ROOT t = (f32[4,6], f32[4,6], f32[4,6]) tuple(s1, s2, r)
}}
)");
  std::unique_ptr<HloModule> original = ParseHloModule(text), m = ParseHloModule(text);
  EXPECT_EQ(MergeCommonCollectives(*m).merged, 2);
  EXPECT_EQ(CountOpcode(*m, HloOpcode::kAllToAll), 1);
  EXPECT_EQ(CountOpcode(*m, HloOpcode::kCollectivePermute), 2);  // r's pairs differ
  VerifyHloModule(*m);
  ExpectSameResults(*original, *m, 1);
}

TEST(CollectiveCse, KeepsADuplicateThatWouldKeepTheFirstResultAliveLong) {
  // b comes kMaxExtension + 1 instructions after a's last user (ua): ua,
  // then f0 .. f{filler}, then b.
  const std::string far = Module(kGather1, kGather2, kMaxExtension - 1);
  std::unique_ptr<HloModule> m = ParseHloModule(far);
  const CollectiveCseStats stats = MergeCommonCollectives(*m);
  EXPECT_EQ(stats.merged, 0);
  EXPECT_EQ(stats.kept_far_apart, 1);
  EXPECT_EQ(CountOpcode(*m, HloOpcode::kAllGather), 2);
  // One instruction fewer between them: merged.
  std::unique_ptr<HloModule> near = ParseHloModule(Module(kGather1, kGather2, kMaxExtension - 2));
  EXPECT_EQ(MergeCommonCollectives(*near).merged, 1);
}

TEST(CollectiveCse, NeverKeepsAResultAcrossACall) {
  // A call (or a loop) is one instruction that runs a whole computation:
  // the result is not kept across it, however near the duplicate is.
  const std::string text = fmt::format(R"(HloModule m, num_partitions=4
callee {{
  p = f32[4,6] parameter(0)
  ROOT n = f32[4,6] negate(p)
}}

ENTRY e {{
  x = f32[4,6] parameter(0)
  a = {}
  ua = f32[8,6] negate(a)
  c = f32[4,6] call(x), to_apply=callee
  b = {}
  ub = f32[8,6] exponential(b)
  sum = f32[8,6] add(ua, ub)
  ROOT out = (f32[8,6], f32[4,6]) tuple(sum, c)
}}
)",
                                       kGather1, kGather2);
  std::unique_ptr<HloModule> m = ParseHloModule(text);
  const CollectiveCseStats stats = MergeCommonCollectives(*m);
  EXPECT_EQ(stats.merged, 0);
  EXPECT_EQ(stats.kept_far_apart, 1);
  EXPECT_EQ(CountOpcode(*m, HloOpcode::kAllGather), 2);
}

}  // namespace
}  // namespace weft::compiler
