#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "executor_test_util.h"
#include "weft/runtime/comm_threads.h"

namespace weft::runtime {
namespace {

using testing::ExpectEqual;
using testing::ExpectNear;
using testing::Random;

constexpr int64_t kDevices = 4;

struct DeviceRun {
  std::vector<std::vector<HostTensor>> inputs, outputs;
  std::vector<ExecutorStats> stats;
};

// Runs `text` on 4 threads with fresh random inputs of `shapes` per device.
DeviceRun RunOn4(const std::string& text, const std::vector<std::string>& shapes, uint32_t seed,
                 double lo = -1, double hi = 1) {
  auto module = testing::Parse(text);
  std::mt19937 rng(seed);
  DeviceRun run;
  for (int64_t d = 0; d < kDevices; ++d) {
    std::vector<HostTensor> in;
    for (const std::string& s : shapes) in.push_back(Random(s, rng, lo, hi));
    run.inputs.push_back(std::move(in));
  }
  LocalCluster cluster(kDevices);
  run.outputs = RunOnDevices(*module, run.inputs, cluster, &run.stats);
  return run;
}

const char* kSum = R"(
sum {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
max {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] maximum(a, b)
}
)";

TEST(EvalCollectivesTest, AllReduceOverGroupsAndAllDevices) {
  const std::string text = std::string("HloModule m\n") + kSum + R"(
ENTRY e {
  x = f32[3,5] parameter(0)
  pairs = f32[3,5] all-reduce(x), replica_groups={{0,1},{2,3}}, to_apply=sum
  all = f32[3,5] all-reduce(x), replica_groups={}, to_apply=max
  ROOT t = (f32[3,5], f32[3,5]) tuple(pairs, all)
})";
  DeviceRun run = RunOn4(text, {"f32[3,5]"}, 1);
  for (int64_t d = 0; d < kDevices; ++d) {
    const int64_t partner = d ^ 1;
    std::vector<double> pairs, all;
    for (int64_t i = 0; i < 15; ++i) {
      // The left-to-right order in group-member order, in f32.
      const int64_t first = std::min(d, partner), second = std::max(d, partner);
      pairs.push_back(static_cast<float>(run.inputs[first][0].data<float>()[i] +
                                         run.inputs[second][0].data<float>()[i]));
      double m = -INFINITY;
      for (int64_t k = 0; k < kDevices; ++k) m = std::max(m, run.inputs[k][0].GetDouble(i));
      all.push_back(m);
    }
    ExpectEqual(run.outputs[d][0], pairs, "sum over pairs");
    ExpectEqual(run.outputs[d][1], all, "max over all");
    // Ring model: 2 (n-1)/n * B per all-reduce; 60 bytes in.
    EXPECT_EQ(run.stats[d].collectives.BytesSent(CollectiveKind::kAllReduce), 60 + 90);
    EXPECT_EQ(run.stats[d].collectives.Calls(CollectiveKind::kAllReduce), 2);
  }
}

TEST(EvalCollectivesTest, AllGatherAlongAnyDimension) {
  const char* text = R"(HloModule m
ENTRY e {
  x = f32[2,3] parameter(0)
  g0 = f32[8,3] all-gather(x), replica_groups={}, dimensions={0}
  g1 = f32[2,6] all-gather(x), replica_groups={{0,2},{1,3}}, dimensions={1}
  ROOT t = (f32[8,3], f32[2,6]) tuple(g0, g1)
})";
  DeviceRun run = RunOn4(text, {"f32[2,3]"}, 2);
  for (int64_t d = 0; d < kDevices; ++d) {
    std::vector<double> g0, g1;
    for (int64_t k = 0; k < kDevices; ++k) {
      for (double v : run.inputs[k][0].ToDoubles()) g0.push_back(v);
    }
    const int64_t members[2] = {d % 2, d % 2 + 2};
    for (int64_t r = 0; r < 2; ++r) {
      for (int64_t m : members) {
        for (int64_t c = 0; c < 3; ++c) g1.push_back(run.inputs[m][0].GetDouble(r * 3 + c));
      }
    }
    ExpectEqual(run.outputs[d][0], g0, "dim 0");
    ExpectEqual(run.outputs[d][1], g1, "dim 1");
  }
}

TEST(EvalCollectivesTest, ReduceScatterAndAllToAllAlongInnerDims) {
  const std::string text = std::string("HloModule m\n") + kSum + R"(
ENTRY e {
  x = f32[3,8] parameter(0)
  rs = f32[3,2] reduce-scatter(x), replica_groups={}, dimensions={1}, to_apply=sum
  a2a = f32[3,8] all-to-all(x), replica_groups={}, dimensions={1}
  y = s32[4,2] parameter(1)
  a2a0 = s32[4,2] all-to-all(y), replica_groups={}, dimensions={0}
  ROOT t = (f32[3,2], f32[3,8], s32[4,2]) tuple(rs, a2a, a2a0)
})";
  DeviceRun run = RunOn4(text, {"f32[3,8]", "s32[4,2]"}, 3, -100, 100);
  for (int64_t d = 0; d < kDevices; ++d) {
    std::vector<double> rs, a2a, a2a0;
    for (int64_t r = 0; r < 3; ++r) {
      for (int64_t c = 0; c < 2; ++c) {
        float s = 0;
        for (int64_t k = 0; k < kDevices; ++k)
          s += run.inputs[k][0].data<float>()[r * 8 + d * 2 + c];
        rs.push_back(s);
      }
      // Chunk j of member i becomes chunk i of member j.
      for (int64_t i = 0; i < kDevices; ++i) {
        for (int64_t c = 0; c < 2; ++c)
          a2a.push_back(run.inputs[i][0].GetDouble(r * 8 + d * 2 + c));
      }
    }
    for (int64_t i = 0; i < kDevices; ++i) {
      for (int64_t c = 0; c < 2; ++c) a2a0.push_back(run.inputs[i][1].GetDouble(d * 2 + c));
    }
    ExpectNear(run.outputs[d][0], rs, 1e-6, 1e-5, "reduce-scatter");
    ExpectEqual(run.outputs[d][1], a2a, "all-to-all dim 1");
    ExpectEqual(run.outputs[d][2], a2a0, "all-to-all dim 0");
  }
}

// An all-to-all of a value that dies there runs in place (the buffer
// assignment puts its result over its operand): the members swap chunks
// where they lie. One of a value that lives on gets a buffer of its own.
TEST(EvalCollectivesTest, AllToAllInPlaceOfADyingValue) {
  const std::string text = R"(HloModule m
ENTRY e {
  x = f32[3,8] parameter(0)
  n = f32[3,8] negate(x)
  a2a = f32[3,8] all-to-all(n), replica_groups={{0,1},{2,3}}, dimensions={1}
  y = f32[6,2] parameter(1)
  e = f32[6,2] exponential(y)
  rows = f32[6,2] all-to-all(e), replica_groups={{0,1},{2,3}}, dimensions={0}
  m = f32[3,8] negate(x)
  kept = f32[3,8] all-to-all(m), replica_groups={{0,1},{2,3}}, dimensions={1}
  again = f32[3,8] add(m, kept)
  ROOT t = (f32[3,8], f32[6,2], f32[3,8]) tuple(a2a, rows, again)
})";
  DeviceRun run = RunOn4(text, {"f32[3,8]", "f32[6,2]"}, std::random_device{}());
  for (int64_t d = 0; d < kDevices; ++d) {
    const int64_t first = d / 2 * 2, p = d % 2;
    std::vector<double> a2a, rows, again;
    for (int64_t r = 0; r < 3; ++r) {
      for (int64_t i = 0; i < 2; ++i) {  // chunk p of member i at position i
        for (int64_t c = 0; c < 4; ++c)
          a2a.push_back(-run.inputs[first + i][0].GetDouble(r * 8 + p * 4 + c));
      }
    }
    for (int64_t i = 0; i < 2; ++i) {
      for (int64_t k = 0; k < 6; ++k)
        rows.push_back(std::exp(static_cast<float>(run.inputs[first + i][1].GetDouble(p * 6 + k))));
    }
    for (int64_t k = 0; k < 24; ++k) {
      again.push_back(static_cast<float>(-run.inputs[d][0].GetDouble(k)) +
                      static_cast<float>(a2a[k]));
    }
    ExpectEqual(run.outputs[d][0], a2a, "in place, strided");
    ExpectNear(run.outputs[d][1], rows, 1e-6, 1e-6, "in place, leading dimension");
    ExpectEqual(run.outputs[d][2], again, "operand lives on");
  }
}

// An all-to-all whose only user is a transpose moving just its split
// dimension writes its chunks straight into the transpose's layout
// (compiler/all_to_all_layout.h): the same values as the two steps.
TEST(EvalCollectivesTest, AllToAllWritesIntoTheLayoutOfTheTransposeReadingIt) {
  // Small (the last device to arrive moves all) and over 32 KiB (each
  // device moves its own share).
  for (int64_t s : {5, 300}) {
    const std::string x = fmt::format("f32[3,2,{},4]", s), t = fmt::format("f32[3,{},2,4]", s);
    const std::string text = fmt::format(R"(HloModule m
ENTRY e {{
  x = {0} parameter(0)
  n = {0} negate(x)
  a2a = {0} all-to-all(n), replica_groups={{{{0,1}},{{2,3}}}}, dimensions={{1}}
  t = {1} transpose(a2a), dimensions={{0,2,1,3}}
  y = f32[2,6] parameter(1)
  rows = f32[2,6] all-to-all(y), replica_groups={{{{0,1}},{{2,3}}}}, dimensions={{0}}
  last = f32[6,2] transpose(rows), dimensions={{1,0}}
  ROOT r = ({1}, f32[6,2]) tuple(t, last)
}})",
                                         x, t);
    DeviceRun run = RunOn4(text, {x, "f32[2,6]"}, std::random_device{}());
    for (int64_t d = 0; d < kDevices; ++d) {
      const int64_t first = d / 2 * 2, p = d % 2;
      std::vector<double> want, last;
      for (int64_t b = 0; b < 3; ++b) {
        for (int64_t k = 0; k < s; ++k) {
          for (int64_t i = 0; i < 2; ++i) {  // chunk p of member i at index i
            for (int64_t h = 0; h < 4; ++h)
              want.push_back(-run.inputs[first + i][0].GetDouble(((b * 2 + p) * s + k) * 4 + h));
          }
        }
      }
      for (int64_t c = 0; c < 6; ++c) {
        for (int64_t i = 0; i < 2; ++i)
          last.push_back(run.inputs[first + i][1].GetDouble(p * 6 + c));
      }
      ExpectEqual(run.outputs[d][0], want, "split dimension moved inward");
      ExpectEqual(run.outputs[d][1], last, "split dimension moved last");
    }
  }
}

TEST(EvalCollectivesTest, CollectivePermuteAndIds) {
  const char* text = R"(HloModule m
ENTRY e {
  x = bf16[5] parameter(0)
  cp = bf16[5] collective-permute(x), source_target_pairs={{0,1},{1,2},{2,0}}
  id = u32[] partition-id()
  ROOT t = (bf16[5], u32[]) tuple(cp, id)
})";
  DeviceRun run = RunOn4(text, {"bf16[5]"}, 4);
  for (int64_t d = 0; d < kDevices; ++d) {
    // Device 3 is nobody's target: zeros.
    const std::vector<double> want =
        d == 3 ? std::vector<double>(5, 0.0) : run.inputs[(d + 2) % 3][0].ToDoubles();
    ExpectEqual(run.outputs[d][0], want, "permute");
    EXPECT_EQ(run.outputs[d][1].data<uint32_t>()[0], static_cast<uint32_t>(d));
  }
}

TEST(EvalCollectivesTest, XlaGroupModesWithReplicasAndPartitions) {
  // 2 replicas x 2 partitions: device = replica * 2 + partition.
  const std::string text =
      std::string("HloModule m, replica_count=2, num_partitions=2\n") + kSum + R"(
ENTRY e {
  x = f32[4] parameter(0)
  cross_partition = f32[4] all-reduce(x), channel_id=1, replica_groups={{0,1}}, to_apply=sum
  cross_replica = f32[4] all-reduce(x), replica_groups={{0,1}}, to_apply=sum
  global = f32[4] all-reduce(x), channel_id=2, replica_groups={{0,3},{1,2}}, use_global_device_ids=true, to_apply=sum
  p = u32[] partition-id()
  r = u32[] replica-id()
  ROOT t = (f32[4], f32[4], f32[4], u32[], u32[]) tuple(cross_partition, cross_replica, global, p, r)
})";
  DeviceRun run = RunOn4(text, {"f32[4]"}, 5);
  auto sum2 = [&](int64_t a, int64_t b) {
    std::vector<double> out;
    for (int64_t i = 0; i < 4; ++i) {
      out.push_back(static_cast<float>(run.inputs[std::min(a, b)][0].data<float>()[i] +
                                       run.inputs[std::max(a, b)][0].data<float>()[i]));
    }
    return out;
  };
  for (int64_t d = 0; d < kDevices; ++d) {
    ExpectEqual(run.outputs[d][0], sum2(d, d ^ 1), "cross-partition");
    ExpectEqual(run.outputs[d][1], sum2(d, d ^ 2), "cross-replica");
    ExpectEqual(run.outputs[d][2], sum2(d, 3 - d), "global ids");
    EXPECT_EQ(run.outputs[d][3].data<uint32_t>()[0], static_cast<uint32_t>(d % 2));
    EXPECT_EQ(run.outputs[d][4].data<uint32_t>()[0], static_cast<uint32_t>(d / 2));
  }
}

TEST(EvalCollectivesTest, PredAllReduceAndInPlaceOnDyingBuffers) {
  const char* text = R"(HloModule m
or {
  a = pred[] parameter(0)
  b = pred[] parameter(1)
  ROOT s = pred[] or(a, b)
}
sum {
  a = s32[] parameter(0)
  b = s32[] parameter(1)
  ROOT s = s32[] add(a, b)
}
ENTRY e {
  p = pred[6] parameter(0)
  any = pred[6] all-reduce(p), replica_groups={}, to_apply=or
  i = s32[6] parameter(1)
  doubled = s32[6] add(i, i)
  total = s32[6] all-reduce(doubled), replica_groups={}, to_apply=sum
  ROOT t = (pred[6], s32[6]) tuple(any, total)
})";
  DeviceRun run = RunOn4(text, {"pred[6]", "s32[6]"}, 6, -1000, 1000);
  for (int64_t d = 0; d < kDevices; ++d) {
    std::vector<double> any(6, 0), total(6, 0);
    for (int64_t k = 0; k < kDevices; ++k) {
      for (int64_t i = 0; i < 6; ++i) {
        any[i] = any[i] || run.inputs[k][0].GetDouble(i) != 0;
        total[i] += 2 * run.inputs[k][1].GetDouble(i);
      }
    }
    ExpectEqual(run.outputs[d][0], any, "or");
    ExpectEqual(run.outputs[d][1], total, "sum");
  }
}

TEST(EvalCollectivesTest, SingleDeviceRunSeesGroupsOfOne) {
  const std::string text = std::string("HloModule m\n") + kSum + R"(
ENTRY e {
  x = f32[4] parameter(0)
  ar = f32[4] all-reduce(x), replica_groups={}, to_apply=sum
  ROOT ag = f32[4] all-gather(ar), replica_groups={}, dimensions={0}
})";
  auto module = testing::Parse(text);
  std::mt19937 rng(7);
  HostTensor x = Random("f32[4]", rng);
  ExecutorStats stats;
  auto out = testing::Run(*module, {x}, &stats);
  ExpectEqual(out[0], x.ToDoubles());
  EXPECT_EQ(stats.collective_bytes(), 0);
}

TEST(EvalCollectivesTest, UnsupportedReducerIsAnError) {
  const char* text = R"(HloModule m
mul {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] multiply(a, b)
}
ENTRY e {
  x = f32[4] parameter(0)
  ROOT ar = f32[4] all-reduce(x), replica_groups={}, to_apply=mul
})";
  auto module = testing::Parse(text);
  testing::ExpectErrorContaining(
      [&] { Executor executor(*module); },
      {"'ar' (all-reduce)", "to_apply 'mul'", "add, maximum or minimum"});
}

}  // namespace
}  // namespace weft::runtime
