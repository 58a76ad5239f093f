// FLOPs of dots and attention calls (with loop trips) and the model-FLOPs
// formula (step time: step_sim_test.cc).
#include "weft/analysis/cost_model.h"

#include <gtest/gtest.h>

#include <cstring>

#include "tiny_step.h"
#include "weft/compiler/fusion.h"
#include "weft/hlo/parser.h"

namespace weft::analysis {
namespace {

constexpr const char* kDotLoop = R"(HloModule m
cond {
  s = (s32[], f32[8,16]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  n = s32[] constant(3)
  ROOT lt = pred[] compare(i, n), direction=LT
}
body {
  s = (s32[], f32[8,16]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  x = f32[8,16] get-tuple-element(s), index=1
  c0 = f32[] constant(0)
  w = f32[16,16] broadcast(c0), dimensions={}
  y = f32[8,16] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  one = s32[] constant(1)
  i2 = s32[] add(i, one)
  ROOT t = (s32[], f32[8,16]) tuple(i2, y)
}
ENTRY e {
  x = f32[8,16] parameter(0)
  w = f32[16,32] parameter(1)
  d = f32[8,32] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  zero = s32[] constant(0)
  init = (s32[], f32[8,16]) tuple(zero, x)
  loop = (s32[], f32[8,16]) while(init), condition=cond, body=body
  y = f32[8,16] get-tuple-element(loop), index=1
  a = f32[8,16] add(y, y)
  ROOT t = (f32[8,32], f32[8,16]) tuple(d, a)
})";

TEST(CostModelTest, DotFlopsCountEveryTrip) {
  const FlopCount f = CountFlops(*ParseHloModule(kDotLoop));
  EXPECT_DOUBLE_EQ(f.dot, 2.0 * 8 * 32 * 16 + 3 * (2.0 * 8 * 16 * 16));
  EXPECT_DOUBLE_EQ(f.other, 8 * 16 + 4 * 1 + 3 * 1);  // the add, 4 compares, 3 counter adds
  EXPECT_DOUBLE_EQ(f.attention_forward, 0);
}

constexpr const char* kAttention = R"(HloModule m
ENTRY e {
  q = f32[2,4,64,32] parameter(0)
  k = f32[2,2,64,32] parameter(1)
  v = f32[2,2,64,16] parameter(2)
  fa = (f32[2,4,64,16], f32[2,4,64]) custom-call(q, k, v), custom_call_target="weft.flex_attention", backend_config={"mask": "q_idx >= kv_idx"}
  full = (f32[2,4,64,16], f32[2,4,64]) custom-call(q, k, v), custom_call_target="weft.flex_attention"
  o = f32[2,4,64,16] get-tuple-element(fa), index=0
  l = f32[2,4,64] get-tuple-element(fa), index=1
  back = (f32[2,4,64,32], f32[2,2,64,32], f32[2,2,64,16]) custom-call(q, k, v, o, l, o), custom_call_target="weft.flex_attention_backward", backend_config={"mask": "q_idx >= kv_idx"}
  ROOT t = ((f32[2,4,64,32], f32[2,2,64,32], f32[2,2,64,16]), (f32[2,4,64,16], f32[2,4,64])) tuple(back, full)
})";

TEST(CostModelTest, AttentionCountsThePairsTheMaskKeeps) {
  const FlopCount f = CountFlops(*ParseHloModule(kAttention));
  const double causal = 64.0 * 65 / 2, full = 64.0 * 64;
  EXPECT_DOUBLE_EQ(f.attention_forward, 2 * 2 * 4 * causal * (32 + 16) + 2 * 2 * 4 * full * 48);
  EXPECT_DOUBLE_EQ(f.attention_backward, 2 * 2 * 4 * causal * (3 * 32 + 2 * 16));
}

// A fusion's FLOPs are its fused computation's: loop fusion of the tiny
// training step (4 devices) changes neither the matrix FLOPs nor the results
// (the fused step gives the unfused bits); the other (vector) FLOPs grow by
// what fusion computes in more than one place (compiler/fusion.h: cheap
// compares, selects and converts copied into each reader, the
// cross-entropy's exp(x - max) recomputed in its sum and its gradient), under
// a tenth on tiny.
TEST(CostModelTest, AFusionCountsItsFusedComputation) {
  StepProgram p = testing::TinyStep(Remat::kNone, true, "fsdp=2,tensor=2", /*fuse=*/false);
  const FlopCount before = CountFlops(*p.compiled.program);
  runtime::LocalCluster cluster(p.num_devices);
  const std::vector<runtime::HostTensor> inputs =
      runtime::RandomInputs(p.compiled.input_shapes, 11);
  const std::vector<runtime::HostTensor> want = runtime::RunSharded(p.compiled, inputs, cluster);
  const compiler::LoopFusionStats stats = compiler::FuseLoops(*p.compiled.program);
  EXPECT_GT(stats.fusions, 10);
  const FlopCount after = CountFlops(*p.compiled.program);
  EXPECT_DOUBLE_EQ(after.dot, before.dot);
  EXPECT_DOUBLE_EQ(after.attention_forward, before.attention_forward);
  EXPECT_DOUBLE_EQ(after.attention_backward, before.attention_backward);
  EXPECT_GT(after.other, before.other);
  EXPECT_LT(after.other, 1.1 * before.other);
  const std::vector<runtime::HostTensor> got = runtime::RunSharded(p.compiled, inputs, cluster);
  ASSERT_EQ(got.size(), want.size());
  for (size_t k = 0; k < want.size(); ++k) {
    ASSERT_EQ(got[k].shape(), want[k].shape()) << "output " << k;
    EXPECT_EQ(std::memcmp(got[k].raw_data(), want[k].raw_data(),
                          static_cast<size_t>(want[k].shape().ByteSize())),
              0)
        << "output " << k << " differs fused vs unfused";
  }
}

TEST(CostModelTest, SortTopKAndWindowsCountTheirWork) {
  std::unique_ptr<HloModule> m = ParseHloModule(R"(HloModule m
lt {
  lt_a = f32[] parameter(0)
  lt_b = f32[] parameter(1)
  ROOT lt_r = pred[] compare(lt_a, lt_b), direction=LT
}
add {
  add_a = f32[] parameter(0)
  add_b = f32[] parameter(1)
  ROOT add_r = f32[] add(add_a, add_b)
}
ENTRY e {
  x = f32[4,16] parameter(0)
  s = f32[4,16] sort(x), dimensions={1}, to_apply=lt
  k = (f32[4,4], s32[4,4]) topk(x), k=4
  z = f32[] constant(0)
  r = f32[4,8] reduce-window(x, z), window={size=1x3 stride=1x2 pad=0_0x1_0}, to_apply=add
  src = f32[4,8] parameter(1)
  ss = f32[4,16] select-and-scatter(x, src, z), window={size=1x3 stride=1x2 pad=0_0x1_0}, select=lt, scatter=add
  ROOT t = tuple(s, k, r, ss)
})");
  const HloComputation* e = m->entry_computation();
  // 64 elements, log2(16) = 4 comparisons each, one comparator step.
  EXPECT_DOUBLE_EQ(InstructionFlops(*e->GetInstruction("s")).other, 64 * 4);
  EXPECT_DOUBLE_EQ(InstructionFlops(*e->GetInstruction("k")).other, 64 * 2);  // log2(k = 4)
  EXPECT_DOUBLE_EQ(InstructionFlops(*e->GetInstruction("r")).other, 32 * 3);  // outputs x window
  EXPECT_DOUBLE_EQ(InstructionFlops(*e->GetInstruction("ss")).other, 32 * (3 + 1));
  EXPECT_DOUBLE_EQ(CountFlops(*m).other, 64 * 4 + 64 * 2 + 32 * 3 + 32 * 4);
}

// A convolution's FLOPs are matrix FLOPs: 2 x result elements x window
// elements x a group's input features.
TEST(CostModelTest, ConvolutionCountsWindowTimesGroupFeatures) {
  std::unique_ptr<HloModule> m = ParseHloModule(R"(HloModule m
ENTRY e {
  x = f32[8,32,32,16] parameter(0)
  w = f32[3,3,16,64] parameter(1)
  c = f32[8,16,16,64] convolution(x, w), window={size=3x3 stride=2x2 pad=1_1x1_1}, dim_labels=b01f_01io->b01f
  g = f32[3,3,4,64] parameter(2)
  d = f32[8,32,32,64] convolution(x, g), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f, feature_group_count=4
  ROOT t = tuple(c, d)
})");
  const HloComputation* e = m->entry_computation();
  const double c = 2.0 * 8 * 16 * 16 * 64 * 9 * 16;
  const double d = 2.0 * 8 * 32 * 32 * 64 * 9 * 4;
  EXPECT_DOUBLE_EQ(InstructionFlops(*e->GetInstruction("c")).dot, c);
  EXPECT_DOUBLE_EQ(InstructionFlops(*e->GetInstruction("d")).dot, d);
  EXPECT_DOUBLE_EQ(InstructionFlops(*e->GetInstruction("c")).other, 0);
  EXPECT_DOUBLE_EQ(CountFlops(*m).dot, c + d);
}

TEST(CostModelTest, RaggedDotCountsEachRowOnce) {
  std::unique_ptr<HloModule> m = ParseHloModule(R"(HloModule m
ENTRY e {
  x = f32[64,32] parameter(0)
  w = f32[8,32,16] parameter(1)
  s = s32[8] parameter(2)
  n = f32[64,16] ragged-dot(x, w, s), lhs_contracting_dims={1}, rhs_contracting_dims={1}, lhs_ragged_dims={0}, rhs_group_dims={0}
  y = f32[64,16] parameter(3)
  c = f32[8,32,16] ragged-dot(x, y, s), lhs_contracting_dims={0}, rhs_contracting_dims={0}, lhs_ragged_dims={0}
  ROOT t = tuple(n, c)
})");
  const HloComputation* e = m->entry_computation();
  // Each of the 64 rows meets one expert's [32,16] weights; each of the 64
  // contracted rows adds to one expert's gradient.
  EXPECT_DOUBLE_EQ(InstructionFlops(*e->GetInstruction("n")).dot, 2.0 * 64 * 16 * 32);
  EXPECT_DOUBLE_EQ(InstructionFlops(*e->GetInstruction("c")).dot, 2.0 * 32 * 16 * 64);
}

}  // namespace
}  // namespace weft::analysis
