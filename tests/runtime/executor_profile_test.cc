// The executor's measurements for `weft bench train`: per-class instruction
// timers (ExecutorOptions::profile) and the allocation counter.
#include <gtest/gtest.h>

#include <cstring>
#include <set>
#include <string>

#include "executor_test_util.h"
#include "weft/compiler/fusion.h"
#include "weft/runtime/executor.h"

namespace weft::runtime {
namespace {

using testing::Random;

// Four layers h <- tanh(h W[i]) as a while loop, then a transpose, a
// broadcast and a row sum: every class but attention and collectives, some
// in a loop body.
constexpr const char* kLoop = R"(HloModule profile

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

cond {
  s = (s32[], f32[16,16], f32[4,16,16]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  n = s32[] constant(4)
  ROOT lt = pred[] compare(i, n), direction=LT
}

body {
  s = (s32[], f32[16,16], f32[4,16,16]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  h = f32[16,16] get-tuple-element(s), index=1
  w = f32[4,16,16] get-tuple-element(s), index=2
  zero = s32[] constant(0)
  wi = f32[1,16,16] dynamic-slice(w, i, zero, zero), dynamic_slice_sizes={1,16,16}
  w2 = f32[16,16] reshape(wi)
  hw = f32[16,16] dot(h, w2), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  h2 = f32[16,16] tanh(hw)
  one = s32[] constant(1)
  i2 = s32[] add(i, one)
  ROOT t = (s32[], f32[16,16], f32[4,16,16]) tuple(i2, h2, w)
}

ENTRY e {
  x = f32[16,16] parameter(0)
  w = f32[4,16,16] parameter(1)
  zero = s32[] constant(0)
  init = (s32[], f32[16,16], f32[4,16,16]) tuple(zero, x, w)
  loop = (s32[], f32[16,16], f32[4,16,16]) while(init), condition=cond, body=body
  h = f32[16,16] get-tuple-element(loop), index=1
  ht = f32[16,16] transpose(h), dimensions={1,0}
  c0 = f32[] constant(0)
  bc = f32[16,16] broadcast(c0), dimensions={}
  hs = f32[16,16] add(ht, bc)
  ROOT r = f32[16] reduce(hs, c0), dimensions={1}, to_apply=add
})";

int Index(OpClass c) { return static_cast<int>(c); }

TEST(ExecutorProfileTest, CountsAndTimesEveryExecutedInstructionByClass) {
  auto module = testing::Parse(kLoop);
  std::mt19937 rng(5);
  const HostTensor x = Random("f32[16,16]", rng), w = Random("f32[4,16,16]", rng, -0.3, 0.3);

  Executor plain(*module);
  const std::vector<HostTensor> want = plain.Run({x, w});
  for (int k = 0; k < kNumOpClasses; ++k) {  // off: nothing timed
    EXPECT_EQ(plain.stats().class_instructions[k], 0);
    EXPECT_EQ(plain.stats().class_seconds[k], 0);
  }

  ExecutorOptions options;
  options.profile = true;
  Executor profiled(*module, options);
  const std::vector<HostTensor> got = profiled.Run({x, w});
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(std::memcmp(got[0].raw_data(), want[0].raw_data(), got[0].byte_size()), 0);

  const ExecutorStats& s = profiled.stats();
  const auto& n = s.class_instructions;
  EXPECT_EQ(n[Index(OpClass::kDot)], 4);  // once per trip
  // compare in 5 condition runs; tanh and the counter's add in 4 bodies;
  // the add after the loop.
  EXPECT_EQ(n[Index(OpClass::kElementwise)], 5 + 4 + 4 + 1);
  EXPECT_EQ(n[Index(OpClass::kBroadcast)], 1);
  // dynamic-slice and reshape per trip, the transpose once.
  EXPECT_EQ(n[Index(OpClass::kDataMovement)], 4 + 4 + 1);
  EXPECT_EQ(n[Index(OpClass::kReduction)], 1);
  EXPECT_EQ(n[Index(OpClass::kAttention)], 0);
  EXPECT_EQ(n[Index(OpClass::kCollective)], 0);
  // Everything executed is in one class, except the while itself.
  int64_t classified = 0;
  double seconds = 0;
  for (int k = 0; k < kNumOpClasses; ++k) {
    classified += n[k];
    seconds += s.class_seconds[k];
    EXPECT_GE(s.class_seconds[k], 0);
    EXPECT_EQ(s.class_seconds[k] > 0, n[k] > 0) << OpClassName(static_cast<OpClass>(k));
  }
  EXPECT_EQ(classified, s.instructions - 1);
  EXPECT_LE(seconds, s.seconds);

  // The counters start over with each Run.
  profiled.Run({x, w});
  EXPECT_EQ(profiled.stats().class_instructions, n);
}

// A loop fusion is one instruction of its own class; what it fused is no
// longer timed as elementwise work, and the results are the same bits.
TEST(ExecutorProfileTest, LoopFusionsAreTimedAsFusedLoops) {
  auto module = testing::Parse(R"(HloModule fused
ENTRY e {
  p = f32[64,32] parameter(0)
  q = f32[64,32] parameter(1)
  a = f32[64,32] multiply(p, q)
  b = f32[64,32] tanh(a)
  ROOT c = f32[64,32] add(b, p)
})");
  std::mt19937 rng(7);
  const HostTensor x = Random("f32[64,32]", rng), y = Random("f32[64,32]", rng);
  ExecutorOptions options;
  options.profile = true;
  Executor unfused(*module, options);
  const std::vector<HostTensor> want = unfused.Run({x, y});
  EXPECT_EQ(unfused.stats().class_instructions[Index(OpClass::kElementwise)], 3);
  EXPECT_EQ(unfused.stats().class_instructions[Index(OpClass::kFusedLoops)], 0);

  ASSERT_EQ(compiler::FuseLoops(*module).fusions, 1);
  Executor fused(*module, options);
  const std::vector<HostTensor> got = fused.Run({x, y});
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(std::memcmp(got[0].raw_data(), want[0].raw_data(), got[0].byte_size()), 0);
  const ExecutorStats& s = fused.stats();
  EXPECT_EQ(s.class_instructions[Index(OpClass::kFusedLoops)], 1);
  EXPECT_EQ(s.class_instructions[Index(OpClass::kElementwise)], 0);
  EXPECT_GT(s.class_seconds[Index(OpClass::kFusedLoops)], 0);
}

// An output fusion is a GEMM with its epilogue: timed as dot.
TEST(ExecutorProfileTest, OutputFusionsAreTimedAsDots) {
  auto module = testing::Parse(R"(HloModule fused
ENTRY e {
  p = f32[64,32] parameter(0)
  w = f32[32,16] parameter(1)
  r = f32[64,16] parameter(2)
  d = f32[64,16] dot(p, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT c = f32[64,16] add(d, r)
})");
  std::mt19937 rng(8);
  const HostTensor x = Random("f32[64,32]", rng), w = Random("f32[32,16]", rng),
                   r = Random("f32[64,16]", rng);
  ExecutorOptions options;
  options.profile = true;
  const compiler::LoopFusionStats fusion = compiler::FuseLoops(*module);
  ASSERT_EQ(fusion.output_fusions, 1);
  Executor fused(*module, options);
  fused.Run({x, w, r});
  const ExecutorStats& s = fused.stats();
  EXPECT_EQ(s.class_instructions[Index(OpClass::kDot)], 1);
  EXPECT_EQ(s.class_instructions[Index(OpClass::kFusedLoops)], 0);
  EXPECT_EQ(s.class_instructions[Index(OpClass::kElementwise)], 0);
  EXPECT_GT(s.class_seconds[Index(OpClass::kDot)], 0);
}

TEST(ExecutorProfileTest, ClassesHaveDistinctNames) {
  std::set<std::string> names;
  for (int k = 0; k < kNumOpClasses; ++k) {
    names.insert(std::string(OpClassName(static_cast<OpClass>(k))));
  }
  EXPECT_EQ(names.size(), static_cast<size_t>(kNumOpClasses));
  EXPECT_TRUE(names.count("dot") && names.count("attention") && names.count("collective"));
}

// Allocations are counted where memory is taken: the first run allocates
// the buffer assignment's arena and the outputs it copies out; later runs
// take nothing new once the caller has let go of the earlier outputs.
TEST(ExecutorProfileTest, CountsTheArenaOnceAndNothingInLaterRuns) {
  auto module = testing::Parse(R"(HloModule chain
ENTRY e {
  p = f32[256] parameter(0)
  n = f32[256] negate(p)
  ROOT t = f32[256] tanh(n)
})");
  std::mt19937 rng(6);
  const HostTensor p = Random("f32[256]", rng);
  Executor executor(*module);
  // The arena holds n (1 kB; tanh writes over it in place); t is copied out.
  executor.Run({p});
  EXPECT_EQ(executor.stats().allocations, 2);
  EXPECT_EQ(executor.stats().allocated_bytes, 1024 + 1024);
  executor.Run({p});
  EXPECT_EQ(executor.stats().allocations, 0);
  EXPECT_EQ(executor.stats().allocated_bytes, 0);

  // The loop: the same once its arena exists, whatever runs in the body.
  auto loop = testing::Parse(kLoop);
  Executor looped(*loop);
  const HostTensor x = Random("f32[16,16]", rng), w = Random("f32[4,16,16]", rng);
  looped.Run({x, w});
  EXPECT_GE(looped.stats().allocations, 2);
  looped.Run({x, w});
  EXPECT_EQ(looped.stats().allocations, 0);
}

}  // namespace
}  // namespace weft::runtime
