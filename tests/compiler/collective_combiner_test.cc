// Collective combining: independent all-gathers, reduce-scatters and
// all-reduces of one kind, groups, dimension and reducer become one variadic
// collective; dependent ones, other groups, dimensions or reducers, and
// results over the threshold stay apart; two groups that would wait on each
// other are never both made; the combined program prints, parses back and
// computes the same bits on device threads, on random inputs, with the same
// communicator calls and bytes.
#include "weft/compiler/collective_combiner.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <random>

#include "count_opcode.h"
#include "weft/hlo/parser.h"
#include "weft/hlo/printer.h"
#include "weft/hlo/verifier.h"
#include "weft/runtime/comm_threads.h"
#include "weft/runtime/executor.h"

namespace weft::compiler {
namespace {

using runtime::HostTensor;
using weft::testing::CountOpcode;

constexpr char kAdd[] = R"(add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
)";

// Runs both modules on 4 devices with the same random inputs and expects
// the same bits and (unless duplicates were merged) the same communicator
// traffic.
void ExpectSameResults(const HloModule& a, const HloModule& b, bool same_traffic) {
  std::mt19937_64 rng(11);
  std::vector<std::vector<HostTensor>> inputs(4);
  for (auto& device : inputs) {
    for (const HloInstruction* p : a.entry_computation()->parameter_instructions()) {
      std::vector<double> v(p->shape().ElementsCount());
      for (double& x : v) x = std::uniform_real_distribution<double>(-2, 2)(rng);
      device.push_back(HostTensor::FromDoubles(p->shape(), v));
    }
  }
  runtime::LocalCluster cluster(4);
  auto stats = [&] {
    std::vector<runtime::CollectiveStats> s;
    for (int64_t d = 0; d < 4; ++d) {
      s.push_back(cluster.communicator(d).stats());
      cluster.communicator(d).ResetStats();
    }
    return s;
  };
  stats();
  const auto want = runtime::RunOnDevices(a, inputs, cluster);
  const auto want_stats = stats();
  const auto got = runtime::RunOnDevices(b, inputs, cluster);
  const auto got_stats = stats();
  for (int64_t d = 0; d < 4; ++d) {
    ASSERT_EQ(want[d].size(), got[d].size());
    for (size_t leaf = 0; leaf < want[d].size(); ++leaf) {
      EXPECT_EQ(want[d][leaf].ToDoubles(), got[d][leaf].ToDoubles())
          << "device " << d << " leaf " << leaf;
    }
    if (!same_traffic) continue;
    EXPECT_EQ(want_stats[d].calls, got_stats[d].calls) << "device " << d;
    EXPECT_EQ(want_stats[d].bytes_sent, got_stats[d].bytes_sent) << "device " << d;
  }
}

// Combines a copy of `text` and checks what every combined program must
// satisfy; returns the combined module.
std::unique_ptr<HloModule> CombineAndCheck(const std::string& text,
                                           int64_t threshold = kCombineThresholdBytes,
                                           CollectiveCombinerStats* stats_out = nullptr,
                                           bool same_traffic = true) {
  std::unique_ptr<HloModule> original = ParseHloModule(text), m = ParseHloModule(text);
  const CollectiveCombinerStats stats = CombineCollectives(*m, threshold);
  if (stats_out != nullptr) *stats_out = stats;
  VerifyHloModule(*m);
  const std::string printed = PrintModule(*m);
  EXPECT_EQ(PrintModule(*ParseHloModule(printed)), printed);
  ExpectSameResults(*original, *m, same_traffic);
  return m;
}

TEST(CollectiveCombiner, CombinesIndependentAllGathersOfOneDimensionAndGroups) {
  // Three weights gathered over {0,1},{2,3} along dim 0 (one of them bf16),
  // one over the other groups, one along dim 1: three collectives remain.
  const std::string text = R"(HloModule m, num_partitions=4
ENTRY e {
  w1 = f32[4,6] parameter(0)
  w2 = f32[2,6] parameter(1)
  w3 = bf16[3,5] parameter(2)
  x = f32[8,6] parameter(3)
  g1 = f32[8,6] all-gather(w1), channel_id=1, replica_groups={{0,1},{2,3}}, dimensions={0}, use_global_device_ids=true
  d1 = f32[8,8] dot(x, g1), lhs_contracting_dims={1}, rhs_contracting_dims={1}
  g2 = f32[4,6] all-gather(w2), channel_id=2, replica_groups={{0,1},{2,3}}, dimensions={0}, use_global_device_ids=true
  d2 = f32[8,4] dot(x, g2), lhs_contracting_dims={1}, rhs_contracting_dims={1}
  g3 = bf16[6,5] all-gather(w3), channel_id=3, replica_groups={{0,1},{2,3}}, dimensions={0}, use_global_device_ids=true
  g4 = f32[8,6] all-gather(w1), channel_id=4, replica_groups={{0,2},{1,3}}, dimensions={0}, use_global_device_ids=true
  g5 = f32[4,12] all-gather(w1), channel_id=5, replica_groups={{0,1},{2,3}}, dimensions={1}, use_global_device_ids=true
  ROOT t = (f32[8,8], f32[8,4], bf16[6,5], f32[8,6], f32[4,12]) tuple(d1, d2, g3, g4, g5)
}
)";
  CollectiveCombinerStats stats;
  std::unique_ptr<HloModule> m = CombineAndCheck(text, kCombineThresholdBytes, &stats);
  EXPECT_EQ(stats.combined, 1);
  EXPECT_EQ(stats.removed, 2);
  EXPECT_EQ(CountOpcode(*m, HloOpcode::kAllGather), 3);
  const HloInstruction* combined = m->entry_computation()->GetInstruction("g1.combined");
  ASSERT_NE(combined, nullptr);
  EXPECT_EQ(combined->shape().ToString(), "(f32[8,6], f32[4,6], bf16[6,5])");
  EXPECT_EQ(combined->operand_count(), 3);
}

TEST(CollectiveCombiner, KeepsACollectiveThatDependsOnAnotherApart) {
  // g2 gathers a value computed from g1's result: one must run before the
  // other, so they stay two (g3, independent of both, joins g1).
  const std::string text = R"(HloModule m, num_partitions=4
ENTRY e {
  w1 = f32[4,6] parameter(0)
  w2 = f32[4,6] parameter(1)
  g1 = f32[8,6] all-gather(w1), channel_id=1, replica_groups={{0,1},{2,3}}, dimensions={0}, use_global_device_ids=true
  s = f32[4,6] slice(g1), slice={[2:6], [0:6]}
  n = f32[4,6] negate(s)
  g2 = f32[8,6] all-gather(n), channel_id=2, replica_groups={{0,1},{2,3}}, dimensions={0}, use_global_device_ids=true
  g3 = f32[8,6] all-gather(w2), channel_id=3, replica_groups={{0,1},{2,3}}, dimensions={0}, use_global_device_ids=true
  ROOT t = (f32[8,6], f32[8,6]) tuple(g2, g3)
}
)";
  CollectiveCombinerStats stats;
  std::unique_ptr<HloModule> m = CombineAndCheck(text, kCombineThresholdBytes, &stats);
  EXPECT_EQ(stats.combined, 1);
  EXPECT_EQ(CountOpcode(*m, HloOpcode::kAllGather), 2);
  const HloInstruction* combined = m->entry_computation()->GetInstruction("g1.combined");
  ASSERT_NE(combined, nullptr);
  EXPECT_EQ(combined->operand(1)->name(), "w2");
}

TEST(CollectiveCombiner, NeverMakesTwoGroupsThatWaitOnEachOther) {
  // a feeds b, c feeds d; {a, d} are all-gathers, {b, c} reduce-scatters.
  // Combining both pairs would make each combined collective wait on the
  // other: only the first pair is combined.
  const std::string text = std::string("HloModule m, num_partitions=4\n") + kAdd + R"(
ENTRY e {
  x = f32[4,6] parameter(0)
  y = f32[8,6] parameter(1)
  a = f32[8,6] all-gather(x), channel_id=1, replica_groups={{0,1},{2,3}}, dimensions={0}, use_global_device_ids=true
  b = f32[4,6] reduce-scatter(a), channel_id=2, replica_groups={{0,1},{2,3}}, dimensions={0}, use_global_device_ids=true, to_apply=add
  c = f32[4,6] reduce-scatter(y), channel_id=3, replica_groups={{0,1},{2,3}}, dimensions={0}, use_global_device_ids=true, to_apply=add
  d = f32[8,6] all-gather(c), channel_id=4, replica_groups={{0,1},{2,3}}, dimensions={0}, use_global_device_ids=true
  ROOT t = (f32[4,6], f32[8,6]) tuple(b, d)
}
)";
  CollectiveCombinerStats stats;
  std::unique_ptr<HloModule> m = CombineAndCheck(text, kCombineThresholdBytes, &stats);
  EXPECT_EQ(stats.combined, 1);
  EXPECT_EQ(CountOpcode(*m, HloOpcode::kAllGather) + CountOpcode(*m, HloOpcode::kReduceScatter), 3);
}

TEST(CollectiveCombiner, CombinesReductionsWithTheSameReducerOnly) {
  // Two all-reduces and two reduce-scatters (one the root) with `add`; a
  // third all-reduce with `max` stays apart.
  const std::string text = std::string("HloModule m, num_partitions=4\n") + kAdd + R"(
max {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT m = f32[] maximum(a, b)
}

ENTRY e {
  x = f32[4,6] parameter(0)
  y = f32[8,3] parameter(1)
  r1 = f32[4,6] all-reduce(x), channel_id=1, replica_groups={{0,1,2,3}}, use_global_device_ids=true, to_apply=add
  r2 = f32[8,3] all-reduce(y), channel_id=2, replica_groups={{0,1,2,3}}, use_global_device_ids=true, to_apply=add
  r3 = f32[4,6] all-reduce(x), channel_id=3, replica_groups={{0,1,2,3}}, use_global_device_ids=true, to_apply=max
  s1 = f32[2,6] reduce-scatter(x), channel_id=4, replica_groups={{0,1},{2,3}}, dimensions={0}, use_global_device_ids=true, to_apply=add
  e1 = f32[2,6] exponential(s1)
  s2 = f32[4,3] reduce-scatter(y), channel_id=5, replica_groups={{0,1},{2,3}}, dimensions={0}, use_global_device_ids=true, to_apply=add
  sum = f32[4,6] add(r1, r3)
  ROOT t = (f32[4,6], f32[8,3], f32[2,6], f32[4,3]) tuple(sum, r2, e1, s2)
}
)";
  CollectiveCombinerStats stats;
  std::unique_ptr<HloModule> m = CombineAndCheck(text, kCombineThresholdBytes, &stats);
  EXPECT_EQ(stats.combined, 2);
  EXPECT_EQ(stats.removed, 2);
  EXPECT_EQ(CountOpcode(*m, HloOpcode::kAllReduce), 2);
  EXPECT_EQ(CountOpcode(*m, HloOpcode::kReduceScatter), 1);
}

TEST(CollectiveCombiner, TheThresholdBoundsACombinedResult) {
  // Three gathers of 192 bytes each: a threshold of 400 bytes takes two.
  const std::string text = R"(HloModule m, num_partitions=4
ENTRY e {
  x = f32[4,6] parameter(0)
  y = f32[4,6] parameter(1)
  z = f32[4,6] parameter(2)
  a = f32[8,6] all-gather(x), channel_id=1, replica_groups={{0,1},{2,3}}, dimensions={0}, use_global_device_ids=true
  b = f32[8,6] all-gather(y), channel_id=2, replica_groups={{0,1},{2,3}}, dimensions={0}, use_global_device_ids=true
  c = f32[8,6] all-gather(z), channel_id=3, replica_groups={{0,1},{2,3}}, dimensions={0}, use_global_device_ids=true
  ROOT t = (f32[8,6], f32[8,6], f32[8,6]) tuple(a, b, c)
}
)";
  CollectiveCombinerStats stats;
  std::unique_ptr<HloModule> m = CombineAndCheck(text, 400, &stats);
  EXPECT_EQ(stats.combined, 1);
  EXPECT_EQ(CountOpcode(*m, HloOpcode::kAllGather), 2);
  m = CombineAndCheck(text, 576, &stats);
  EXPECT_EQ(CountOpcode(*m, HloOpcode::kAllGather), 1);
  m = CombineAndCheck(text, 191, &stats);
  EXPECT_EQ(stats.combined, 0);
  EXPECT_EQ(CountOpcode(*m, HloOpcode::kAllGather), 3);
}

TEST(CollectiveCombiner, DuplicatesShareOneResult) {
  // a and c gather the same x (duplicates the CSE may leave far apart):
  // the combined collective moves x once, for both.
  const std::string text = R"(HloModule m, num_partitions=4
ENTRY e {
  x = f32[4,6] parameter(0)
  y = f32[4,6] parameter(1)
  a = f32[8,6] all-gather(x), channel_id=1, replica_groups={{0,1},{2,3}}, dimensions={0}, use_global_device_ids=true
  na = f32[8,6] negate(a)
  b = f32[8,6] all-gather(y), channel_id=2, replica_groups={{0,1},{2,3}}, dimensions={0}, use_global_device_ids=true
  c = f32[8,6] all-gather(x), channel_id=3, replica_groups={{0,1},{2,3}}, dimensions={0}, use_global_device_ids=true
  ec = f32[8,6] exponential(c)
  ROOT t = (f32[8,6], f32[8,6], f32[8,6]) tuple(na, b, ec)
}
)";
  CollectiveCombinerStats stats;
  std::unique_ptr<HloModule> m =
      CombineAndCheck(text, kCombineThresholdBytes, &stats, /*same_traffic=*/false);
  EXPECT_EQ(stats.combined, 1);
  EXPECT_EQ(stats.removed, 2);
  const HloInstruction* combined = m->entry_computation()->GetInstruction("a.combined");
  ASSERT_NE(combined, nullptr);
  EXPECT_EQ(combined->shape().ToString(), "(f32[8,6], f32[8,6])");
  // Only duplicates: one plain all-gather.
  const std::string twice = R"(HloModule m, num_partitions=4
ENTRY e {
  x = f32[4,6] parameter(0)
  a = f32[8,6] all-gather(x), channel_id=1, replica_groups={{0,1},{2,3}}, dimensions={0}, use_global_device_ids=true
  c = f32[8,6] all-gather(x), channel_id=3, replica_groups={{0,1},{2,3}}, dimensions={0}, use_global_device_ids=true
  ROOT s = f32[8,6] subtract(a, c)
}
)";
  std::unique_ptr<HloModule> one =
      CombineAndCheck(twice, kCombineThresholdBytes, nullptr, /*same_traffic=*/false);
  EXPECT_EQ(CountOpcode(*one, HloOpcode::kAllGather), 1);
  EXPECT_TRUE(one->entry_computation()->GetInstruction("a.combined")->shape().IsArray());
}

TEST(CollectiveCombiner, CombinesInsideALoopBody) {
  // A scan body gathering two weights per iteration: one collective per
  // iteration, the same results after three iterations.
  const std::string text = R"(HloModule m, num_partitions=4
body {
  st = (s32[], f32[4,6], f32[2,6]) parameter(0)
  i = s32[] get-tuple-element(st), index=0
  w1 = f32[4,6] get-tuple-element(st), index=1
  w2 = f32[2,6] get-tuple-element(st), index=2
  g1 = f32[8,6] all-gather(w1), channel_id=1, replica_groups={{0,1},{2,3}}, dimensions={0}, use_global_device_ids=true
  g2 = f32[4,6] all-gather(w2), channel_id=2, replica_groups={{0,1},{2,3}}, dimensions={0}, use_global_device_ids=true
  s1 = f32[4,6] slice(g1), slice={[1:5], [0:6]}
  s2 = f32[2,6] slice(g2), slice={[1:3], [0:6]}
  n1 = f32[4,6] tanh(s1)
  n2 = f32[2,6] sine(s2)
  one = s32[] constant(1)
  next = s32[] add(i, one)
  ROOT out = (s32[], f32[4,6], f32[2,6]) tuple(next, n1, n2)
}

cond {
  st = (s32[], f32[4,6], f32[2,6]) parameter(0)
  i = s32[] get-tuple-element(st), index=0
  three = s32[] constant(3)
  ROOT lt = pred[] compare(i, three), direction=LT
}

ENTRY e {
  a = f32[4,6] parameter(0)
  b = f32[2,6] parameter(1)
  zero = s32[] constant(0)
  init = (s32[], f32[4,6], f32[2,6]) tuple(zero, a, b)
  ROOT w = (s32[], f32[4,6], f32[2,6]) while(init), condition=cond, body=body
}
)";
  CollectiveCombinerStats stats;
  std::unique_ptr<HloModule> m = CombineAndCheck(text, kCombineThresholdBytes, &stats);
  EXPECT_EQ(stats.combined, 1);
  EXPECT_EQ(CountOpcode(*m, HloOpcode::kAllGather), 1);
}

}  // namespace
}  // namespace weft::compiler
