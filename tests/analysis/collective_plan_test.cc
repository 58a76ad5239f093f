// Collectives per step: the predicted calls and bytes equal what the
// communicator counts when the executor runs the program, on every device;
// ICI and DCN follow the slices.
#include "weft/analysis/collective_plan.h"

#include <gtest/gtest.h>

#include "tiny_step.h"
#include "weft/base/error.h"
#include "weft/hlo/parser.h"

namespace weft::analysis {
namespace {

using runtime::CollectiveKind;

TEST(CollectivePlanTest, TrainingStepBytesEqualTheExecutorsCountOnEveryDevice) {
  for (Remat remat : {Remat::kNone, Remat::kFull}) {
    for (bool shard_as : {true, false}) {
      const StepProgram p = testing::TinyStep(remat, shard_as);
      CollectivePlanOptions o;
      o.num_devices = 4;
      const CollectivePlan plan = PlanCollectives(*p.compiled.program, o);
      const std::vector<runtime::ExecutorStats> stats = testing::Execute(p);
      ASSERT_EQ(plan.per_device.size(), stats.size());
      for (size_t d = 0; d < stats.size(); ++d) {
        for (int k = 0; k < kNumProgramCollectiveKinds; ++k) {
          const auto kind = static_cast<CollectiveKind>(k);
          EXPECT_EQ(plan.per_device[d].by_kind[k].calls, stats[d].collectives.Calls(kind))
              << "device " << d << " " << runtime::CollectiveKindName(kind);
          EXPECT_EQ(plan.per_device[d].by_kind[k].bytes, stats[d].collectives.BytesSent(kind))
              << "device " << d << " " << runtime::CollectiveKindName(kind);
        }
        EXPECT_EQ(plan.per_device[d].bytes(), stats[d].collective_bytes());
        EXPECT_GT(plan.per_device[d].bytes(), 0);
        EXPECT_EQ(plan.per_device[d].dcn_bytes(), 0) << "one slice: everything over ICI";
      }
    }
  }
}

TEST(CollectivePlanTest, GroupsThatCrossSlicesGoOverDcn) {
  const StepProgram p = testing::TinyStep(Remat::kFull);
  CollectivePlanOptions o;
  o.num_devices = 4;
  const CollectivePlan one = PlanCollectives(*p.compiled.program, o);
  o.slices = 2;  // devices {0,1} and {2,3}: fsdp groups {0,2}, {1,3} cross
  const CollectivePlan two = PlanCollectives(*p.compiled.program, o);
  for (int64_t d = 0; d < 4; ++d) {
    EXPECT_EQ(two.per_device[d].bytes(), one.per_device[d].bytes());
    EXPECT_GT(two.per_device[d].dcn_bytes(), 0);
    EXPECT_GT(two.per_device[d].ici_bytes(), 0);
  }
  // Each site crosses exactly when its group does: the all-gathers of
  // weights over fsdp (device 0 with device 2) cross, those over tensor do not.
  int64_t crossing = 0, local = 0;
  for (const CollectiveSite& s : two.sites) (s.crosses_slices ? crossing : local) += 1;
  EXPECT_GT(crossing, 0);
  EXPECT_GT(local, 0);
  o.slices = 3;  // the planner refuses these first: here they are weft's bug
  EXPECT_THROW(PlanCollectives(*p.compiled.program, o), InternalError);
}

// An all-reduce in a 3-trip loop and a collective-permute in which devices 2
// and 3 send nothing: the counting rule of runtime/communicator.h.
constexpr const char* kLoop = R"(HloModule m, num_partitions=4
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = f32[] add(a, b)
}
cond {
  s = (s32[], f32[1000]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  n = s32[] constant(3)
  ROOT lt = pred[] compare(i, n), direction=LT
}
body {
  s = (s32[], f32[1000]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  x = f32[1000] get-tuple-element(s), index=1
  r = f32[1000] all-reduce(x), channel_id=1, replica_groups={{0,1},{2,3}}, use_global_device_ids=true, to_apply=add
  one = s32[] constant(1)
  i2 = s32[] add(i, one)
  ROOT t = (s32[], f32[1000]) tuple(i2, r)
}
ENTRY e {
  x = f32[1000] parameter(0)
  zero = s32[] constant(0)
  init = (s32[], f32[1000]) tuple(zero, x)
  loop = (s32[], f32[1000]) while(init), condition=cond, body=body
  y = f32[1000] get-tuple-element(loop), index=1
  ROOT p = f32[1000] collective-permute(y), channel_id=2, source_target_pairs={{0,1},{1,0}}
})";

TEST(CollectivePlanTest, LoopTripsAndPermutePairsFollowTheCountingRule) {
  auto module = ParseHloModule(kLoop);
  CollectivePlanOptions o;
  o.num_devices = 4;
  const CollectivePlan plan = PlanCollectives(*module, o);
  const int ar = static_cast<int>(CollectiveKind::kAllReduce);
  const int cp = static_cast<int>(CollectiveKind::kCollectivePermute);
  for (int64_t d = 0; d < 4; ++d) {
    EXPECT_EQ(plan.per_device[d].by_kind[ar].calls, 3);
    EXPECT_EQ(plan.per_device[d].by_kind[ar].bytes, 3 * (2 * 1 * 4000 / 2));
    EXPECT_EQ(plan.per_device[d].by_kind[cp].calls, 1);
    EXPECT_EQ(plan.per_device[d].by_kind[cp].bytes, d < 2 ? 4000 : 0);
  }
  // The executor counts the same.
  runtime::LocalCluster cluster(4);
  std::vector<std::vector<runtime::HostTensor>> inputs(4);
  for (auto& in : inputs) in.push_back(runtime::HostTensor(Shape(PrimitiveType::kF32, {1000})));
  std::vector<runtime::ExecutorStats> stats;
  runtime::RunOnDevices(*module, inputs, cluster, &stats);
  for (int64_t d = 0; d < 4; ++d) {
    EXPECT_EQ(stats[d].collectives.BytesSent(CollectiveKind::kAllReduce),
              plan.per_device[d].by_kind[ar].bytes);
    EXPECT_EQ(stats[d].collectives.BytesSent(CollectiveKind::kCollectivePermute),
              plan.per_device[d].by_kind[cp].bytes);
  }
  EXPECT_THROW(PlanCollectives(*module, {8, 1}), InternalError)
      << "num_partitions=4 planned for 8 devices";
}

}  // namespace
}  // namespace weft::analysis
