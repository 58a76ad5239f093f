// The algebraic simplifier: transposes that move no element become
// reshapes (or vanish), real ones stay, and the program computes the same
// bits on random inputs, inside a loop body and at a called computation's
// root too.
#include "weft/compiler/algebraic_simplifier.h"

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

TEST(AlgebraicSimplifier, TransposeKeepsOrderByHand) {
  EXPECT_TRUE(TransposeKeepsOrder({4, 1, 256, 32}, {0, 2, 1, 3}));   // [b,1,s,d] -> [b,s,1,d]
  EXPECT_FALSE(TransposeKeepsOrder({4, 2, 256, 32}, {0, 2, 1, 3}));  // two heads: a real one
  EXPECT_TRUE(TransposeKeepsOrder({3, 5}, {0, 1}));                  // identity
  EXPECT_FALSE(TransposeKeepsOrder({3, 5}, {1, 0}));
  EXPECT_TRUE(TransposeKeepsOrder({1, 1}, {1, 0}));
  EXPECT_TRUE(TransposeKeepsOrder({1, 7, 1}, {2, 1, 0}));
  EXPECT_FALSE(TransposeKeepsOrder({3, 1, 5}, {2, 1, 0}));
  EXPECT_TRUE(TransposeKeepsOrder({}, {}));
}

// An entry with a degenerate, a real and an identity transpose, and a loop
// whose body's root is a degenerate transpose.
constexpr char kModule[] = R"(HloModule m

cond {
  s = (s32[], f32[1,6,1,4]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  n = s32[] constant(3)
  ROOT lt = pred[] compare(i, n), direction=LT
}

body {
  s = (s32[], f32[1,6,1,4]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  x = f32[1,6,1,4] get-tuple-element(s), index=1
  e = f32[1,6,1,4] exponential(x)
  t = f32[1,6,1,4] transpose(e), dimensions={2,1,0,3}
  h = f32[1,6,1,4] multiply(t, x)
  one = s32[] constant(1)
  i2 = s32[] add(i, one)
  ROOT r = (s32[], f32[1,6,1,4]) tuple(i2, h)
}

swap {
  a = f32[2,1,3] parameter(0)
  ROOT ta = f32[1,2,3] transpose(a), dimensions={1,0,2}
}

ENTRY e {
  p = f32[2,1,3,5] parameter(0)
  q = f32[1,6,1,4] parameter(1)
  r = f32[2,3] parameter(2)
  flat = f32[2,3,1,5] transpose(p), dimensions={0,2,1,3}
  real = f32[3,2] transpose(r), dimensions={1,0}
  same = f32[2,3] transpose(r), dimensions={0,1}
  neg = f32[2,3] negate(same)
  zero = s32[] constant(0)
  init = (s32[], f32[1,6,1,4]) tuple(zero, q)
  loop = (s32[], f32[1,6,1,4]) while(init), condition=cond, body=body
  out = f32[1,6,1,4] get-tuple-element(loop), index=1
  small = f32[2,1,3] reshape(r)
  called = f32[1,2,3] call(small), to_apply=swap
  ROOT t = (f32[2,3,1,5], f32[3,2], f32[2,3], f32[1,6,1,4], f32[1,2,3]) tuple(flat, real, neg, out, called)
}
)";

TEST(AlgebraicSimplifier, TransposesThatMoveNoElementBecomeReshapes) {
  std::unique_ptr<HloModule> original = ParseHloModule(kModule);
  std::unique_ptr<HloModule> simplified = ParseHloModule(kModule);
  const AlgebraicSimplifierStats stats = SimplifyAlgebra(*simplified);
  // flat, the body's t and swap's root become reshapes; same is removed;
  // real stays.
  EXPECT_EQ(stats.transposes_to_reshapes, 3);
  EXPECT_EQ(stats.transposes_removed, 1);
  EXPECT_EQ(CountOpcode(*simplified, HloOpcode::kTranspose), 1);
  EXPECT_EQ(simplified->GetComputation("swap")->root_instruction()->opcode(), HloOpcode::kReshape);
  VerifyHloModule(*simplified);
  EXPECT_EQ(PrintModule(*ParseHloModule(PrintModule(*simplified))), PrintModule(*simplified));
  // Nothing left to do a second time.
  const AlgebraicSimplifierStats again = SimplifyAlgebra(*simplified);
  EXPECT_EQ(again.transposes_to_reshapes + again.transposes_removed, 0);

  std::mt19937 rng(std::random_device{}());
  std::vector<HostTensor> inputs;
  for (const HloInstruction* p : original->entry_computation()->parameter_instructions()) {
    std::vector<double> v(static_cast<size_t>(p->shape().ElementsCount()));
    for (double& x : v) x = std::uniform_real_distribution<double>(-1.5, 1.5)(rng);
    inputs.push_back(HostTensor::FromDoubles(p->shape(), v));
  }
  runtime::Executor want_exec(*original), got_exec(*simplified);
  const std::vector<HostTensor> want = want_exec.Run(inputs);
  const std::vector<HostTensor> got = got_exec.Run(inputs);
  ASSERT_EQ(want.size(), got.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(want[i].shape(), got[i].shape()) << "output " << i;
    EXPECT_EQ(want[i].ToDoubles(), got[i].ToDoubles()) << "output " << i;
  }
  // The real transpose did move elements: out[1] is r transposed.
  const std::vector<double> r = inputs[2].ToDoubles(), real = got[1].ToDoubles();
  for (int64_t i = 0; i < 2; ++i) {
    for (int64_t j = 0; j < 3; ++j) EXPECT_EQ(real[j * 2 + i], r[i * 3 + j]);
  }
}

}  // namespace
}  // namespace weft::compiler
