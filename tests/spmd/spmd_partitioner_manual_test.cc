// Manual regions (what jax.shard_map emits): a region that normalizes each
// device's rows by a psum (all-reduce) of column sums, partitioned for 4 and
// 8 devices, agrees with the same computation written without a region and
// run unsharded; Sharding annotations are reshards; what a region cannot
// hold is refused by name. Partly manual regions:
// spmd_partitioner_partly_manual_test.cc.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <limits>

#include "sharded_run_test_util.h"
#include "weft/base/error.h"
#include "weft/spmd/spmd_partitioner.h"

namespace weft {
namespace {

using testing::kAdd;

// `annotated`: every instruction in the region says {manual}; otherwise only
// the region's edges do (as jax.shard_map leaves it) and propagation fills in.
std::string ShardMap(int64_t n, bool annotated) {
  std::string text = fmt::format(R"(HloModule shard_map, num_partitions={0}
{1}
ENTRY main {{
  p = f32[8,16] parameter(0), sharding={{devices=[{0},1]<=[{0}]}}
  a = f32[8,16] custom-call(p), custom_call_target="Sharding", sharding={{devices=[{0},1]<=[{0}]}}
  m = f32[{2},16] custom-call(a), custom_call_target="SPMDFullToShardShape", sharding={{manual}}
  e = f32[{2},16] exponential(m), sharding={{manual}}
  z = f32[] constant(0), sharding={{manual}}
  cs = f32[16] reduce(e, z), dimensions={{0}}, to_apply=add, sharding={{manual}}
  ps = f32[16] all-reduce(cs), channel_id=1, replica_groups={{}}, use_global_device_ids=true, to_apply=add, sharding={{manual}}
  pb = f32[{2},16] broadcast(ps), dimensions={{1}}, sharding={{manual}}
  d = f32[{2},16] divide(e, pb), sharding={{manual}}
  s = f32[{2},16] custom-call(d), custom_call_target="Sharding", sharding={{manual}}
  f = f32[8,16] custom-call(s), custom_call_target="SPMDShardToFullShape", sharding={{devices=[{0},1]<=[{0}]}}
  ROOT r = f32[8,16] negate(f), sharding={{devices=[{0},1]<=[{0}]}}
}}
)",
                                 n, kAdd, 8 / n);
  if (annotated) return text;
  for (const char* op : {"exponential(m)", "constant(0)", "reduce(e, z)", "all-reduce(cs)",
                         "broadcast(ps)", "divide(e, pb)"}) {
    const size_t at = text.find(op);
    const size_t mark = text.find(", sharding={manual}", at);
    text.erase(mark, std::string(", sharding={manual}").size());
  }
  return text;
}

// The same values without a region: columns summed over all rows.
std::string Plain() {
  return fmt::format(R"(HloModule plain
{}
ENTRY main {{
  p = f32[8,16] parameter(0)
  e = f32[8,16] exponential(p)
  z = f32[] constant(0)
  cs = f32[16] reduce(e, z), dimensions={{0}}, to_apply=add
  pb = f32[8,16] broadcast(cs), dimensions={{1}}
  d = f32[8,16] divide(e, pb)
  ROOT r = f32[8,16] negate(d)
}}
)",
                     kAdd);
}

TEST(SpmdManualTest, AShardMapRegionRunsPerDeviceAndAgreesWithThePlainModule) {
  for (int64_t n : {2, 4, 8}) {
    for (uint64_t seed : {1, 2}) {
      SCOPED_TRACE(fmt::format("n={} seed {}", n, seed));
      const std::unique_ptr<HloModule> module = ParseHloModule(ShardMap(n, seed == 1));
      const compiler::CompiledProgram program =
          compiler::CompileForDevices(*module, {.num_devices = n});
      // No custom call survives partitioning; the psum is the region's own.
      int all_reduces = 0;
      for (const HloInstruction* i : program.program->entry_computation()->instructions()) {
        EXPECT_NE(i->opcode(), HloOpcode::kCustomCall) << i->ToString();
        all_reduces += i->opcode() == HloOpcode::kAllReduce;
      }
      EXPECT_EQ(all_reduces, 1);
      const std::vector<runtime::HostTensor> inputs =
          runtime::RandomInputs(program.input_shapes, seed, {});
      runtime::LocalCluster cluster(n);
      const std::vector<runtime::HostTensor> sharded = runtime::RunSharded(
          program, inputs, cluster, nullptr, {}, std::numeric_limits<double>::quiet_NaN());
      const std::unique_ptr<HloModule> plain_module = ParseHloModule(Plain());
      runtime::Executor plain(*plain_module);
      const std::vector<runtime::HostTensor> want =
          plain.Run(std::vector<runtime::HostTensor>(inputs.begin(), inputs.end()));
      ASSERT_EQ(sharded.size(), 1u);
      EXPECT_LE(runtime::MaxRelativeError(sharded[0], want[0]), 1e-6);
    }
  }
}

// A tuple parameter may hold a manual leaf beside a tiled one: only the
// element a get-tuple-element takes enters the region (XLA's
// MixWithManualPartitioning). The manual leaf is each device's own value,
// stacked along a leading dim in the global input and output.
TEST(SpmdManualTest, ATupleMayHoldAManualLeafBesideATiledOne) {
  const std::unique_ptr<HloModule> module = ParseHloModule(R"(HloModule m
ENTRY main {
  t = (f32[8,2], f32[4,2]) parameter(0), sharding={{devices=[2,1]0,1}, {manual}}
  p = f32[8,2] get-tuple-element(t), index=0, sharding={devices=[2,1]0,1}
  m = f32[4,2] get-tuple-element(t), index=1, sharding={manual}
  s = f32[4,2] custom-call(p), custom_call_target="SPMDFullToShardShape", sharding={manual}
  a = f32[4,2] add(s, m), sharding={manual}
  ROOT f = f32[8,2] custom-call(a), custom_call_target="SPMDShardToFullShape", sharding={devices=[2,1]0,1}
}
)");
  const compiler::CompiledProgram program =
      compiler::CompileForDevices(*module, {.num_devices = 2});
  ASSERT_EQ(program.input_shapes.size(), 2u);
  EXPECT_EQ(program.input_shapes[1].ToString(), "f32[2,4,2]");
  const std::vector<runtime::HostTensor> inputs =
      runtime::RandomInputs(program.input_shapes, 3, {});
  runtime::LocalCluster cluster(2);
  const std::vector<runtime::HostTensor> sharded = runtime::RunSharded(
      program, inputs, cluster, nullptr, {}, std::numeric_limits<double>::quiet_NaN());
  // Device d's rows of p plus its own m, joined back by rows.
  const std::vector<double> p = inputs[0].ToDoubles(), m = inputs[1].ToDoubles();
  const std::vector<double> got = sharded.at(0).ToDoubles();
  ASSERT_EQ(got.size(), 16u);
  for (size_t i = 0; i < 16; ++i)
    EXPECT_EQ(got[i], static_cast<double>(static_cast<float>(p[i] + m[i])));
}

// A Sharding annotation outside a region reshards its operand (and runs
// as an identity unsharded).
TEST(SpmdManualTest, ShardingAnnotationsAreReshards) {
  const std::string text = R"(HloModule m
ENTRY main {
  p = f32[8,6] parameter(0), sharding={devices=[1,4]<=[4]}
  a = f32[8,6] custom-call(p), custom_call_target="Sharding", sharding={devices=[4,1]<=[4]}
  ROOT n = f32[8,6] negate(a), sharding={devices=[4,1]<=[4]}
}
)";
  for (uint64_t seed : {1, 2}) testing::ExpectShardedMatches(text, 4, seed);
}

TEST(SpmdManualTest, WhatARegionCannotHoldIsRefusedByName) {
  auto refused = [](const std::string& text, const std::vector<std::string>& parts) {
    try {
      PartitionModule(*ParseHloModule(text));
      ADD_FAILURE() << "partitioned:\n" << text;
    } catch (const Error& e) {
      for (const std::string& part : parts) {
        EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
      }
    }
  };
  // A tiled value read inside the region without SPMDFullToShardShape.
  refused(R"(HloModule m, num_partitions=2
ENTRY main {
  p = f32[4,6] parameter(0), sharding={devices=[2,1]<=[2]}
  q = f32[2,6] parameter(1), sharding={devices=[2,1]<=[2]}
  m = f32[2,6] custom-call(p), custom_call_target="SPMDFullToShardShape", sharding={manual}
  x = f32[2,6] add(m, q), sharding={manual}
  ROOT f = f32[4,6] custom-call(x), custom_call_target="SPMDShardToFullShape", sharding={devices=[2,1]<=[2]}
}
)",
          {"'x'", "inside a manual region", "SPMDFullToShardShape"});
  // Pieces of the wrong shape.
  refused(R"(HloModule m, num_partitions=2
ENTRY main {
  p = f32[4,6] parameter(0), sharding={devices=[2,1]<=[2]}
  ROOT m = f32[4,3] custom-call(p), custom_call_target="SPMDFullToShardShape", sharding={manual}
}
)",
          {"'m'", "per-device pieces f32[4,3]", "f32[2,6]"});
}

}  // namespace
}  // namespace weft
