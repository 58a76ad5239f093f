#include "weft/runtime/executor.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "../hlo/hostile_hlo.h"
#include "executor_eval.h"
#include "executor_test_util.h"
#include "weft/runtime/comm_threads.h"

namespace weft::runtime {
namespace {

using testing::ExpectEqual;
using testing::ExpectErrorContaining;
using testing::ExpectNear;
using testing::Random;

// An instruction's value keeps one leaf inline and two or more in a vector;
// either way its leaves keep their order and share their bytes when copied,
// and a moved-from value is empty.
TEST(ExecutorValue, KeepsItsLeavesInOrderWhetherOneOrMany) {
  const Shape shape(PrimitiveType::kF32, {3, 2});
  std::mt19937 rng(std::random_device{}());
  std::vector<HostTensor> leaves;
  for (int i = 0; i < 4; ++i) leaves.push_back(Random(shape, rng));
  auto expect_leaves = [&](const exec::Value& v, size_t n, const char* what) {
    ASSERT_EQ(v.size(), n) << what;
    EXPECT_EQ(v.empty(), n == 0) << what;
    size_t k = 0;
    for (const HostTensor& t : v) {
      ASSERT_LT(k, n) << what;
      EXPECT_EQ(t.raw_data(), leaves[k].raw_data()) << what << " leaf " << k;
      EXPECT_EQ(t.shape(), shape) << what;
      ++k;
    }
    EXPECT_EQ(k, n) << what;
  };
  exec::Value v;
  expect_leaves(v, 0, "empty");
  for (size_t n = 1; n <= leaves.size(); ++n) {
    v.push_back(leaves[n - 1]);
    expect_leaves(v, n, "grown");
    const exec::Value copy = v;  // shares the bytes
    expect_leaves(copy, n, "copied");
    exec::Value moved = std::move(v);
    expect_leaves(moved, n, "moved");
    expect_leaves(v, 0, "moved from");  // NOLINT(bugprone-use-after-move)
    v = std::move(moved);
    expect_leaves(v, n, "moved back");
  }
  EXPECT_EQ(v.at(3).GetDouble(5), leaves[3].GetDouble(5));
  EXPECT_THROW(v.at(4), InternalError);
  expect_leaves(exec::Value(leaves.data(), leaves.data() + 1), 1, "range of one");
  expect_leaves(exec::Value(leaves.data(), leaves.data() + 3), 3, "range of three");
  expect_leaves(exec::Value(leaves[0], leaves[1]), 2, "pair");
  expect_leaves(exec::Value(leaves[0]), 1, "one");
  v.clear();
  expect_leaves(v, 0, "cleared");
  v.reserve(3);
  v.push_back(leaves[0]);
  expect_leaves(v, 1, "reserved, then one");
}

// A stack of 8 layers h <- tanh(h W[i]) as a while loop over stacked
// weights, collecting every layer's output with dynamic-update-slice (what
// the builder's scan lowers to).
constexpr const char* kScan = R"(HloModule scan

cond {
  s = (s32[], f32[32,32], f32[8,32,32], f32[8,32,32]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  n = s32[] constant(8)
  ROOT lt = pred[] compare(i, n), direction=LT
}

body {
  s = (s32[], f32[32,32], f32[8,32,32], f32[8,32,32]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  h = f32[32,32] get-tuple-element(s), index=1
  w = f32[8,32,32] get-tuple-element(s), index=2
  acc = f32[8,32,32] get-tuple-element(s), index=3
  zero = s32[] constant(0)
  wi = f32[1,32,32] dynamic-slice(w, i, zero, zero), dynamic_slice_sizes={1,32,32}
  w2 = f32[32,32] reshape(wi)
  hw = f32[32,32] dot(h, w2), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  h2 = f32[32,32] tanh(hw)
  h3 = f32[1,32,32] reshape(h2)
  acc2 = f32[8,32,32] dynamic-update-slice(acc, h3, i, zero, zero)
  one = s32[] constant(1)
  i2 = s32[] add(i, one)
  ROOT t = (s32[], f32[32,32], f32[8,32,32], f32[8,32,32]) tuple(i2, h2, w, acc2)
}

ENTRY main {
  x = f32[32,32] parameter(0)
  weights = f32[8,32,32] parameter(1)
  zero = s32[] constant(0)
  fz = f32[] constant(0)
  acc = f32[8,32,32] broadcast(fz), dimensions={}
  init = (s32[], f32[32,32], f32[8,32,32], f32[8,32,32]) tuple(zero, x, weights, acc)
  loop = (s32[], f32[32,32], f32[8,32,32], f32[8,32,32]) while(init), condition=cond, body=body
  ROOT out = f32[8,32,32] get-tuple-element(loop), index=3
})";

TEST(ExecutorTest, ScanOverStackedWeightsUpdatesTheCarryInPlace) {
  auto module = testing::Parse(kScan);
  std::mt19937 rng(1);
  HostTensor x = Random("f32[32,32]", rng);
  HostTensor w = Random("f32[8,32,32]", rng, -0.3, 0.3);
  ExecutorStats stats;
  std::vector<HostTensor> out = testing::Run(*module, {x, w}, &stats);
  ASSERT_EQ(out.size(), 1u);

  std::vector<double> h = x.ToDoubles(), want;
  for (int64_t l = 0; l < 8; ++l) {
    std::vector<double> next(32 * 32, 0.0);
    for (int64_t r = 0; r < 32; ++r) {
      for (int64_t c = 0; c < 32; ++c) {
        double acc = 0;
        for (int64_t k = 0; k < 32; ++k) acc += h[r * 32 + k] * w.GetDouble((l * 32 + k) * 32 + c);
        next[r * 32 + c] = std::tanh(acc);
      }
    }
    h = next;
    want.insert(want.end(), h.begin(), h.end());
  }
  ExpectNear(out[0], want, 1e-5, 1e-5, "scan");

  // The [8,32,32] accumulator is updated in place and the weights, which the
  // body passes through, are not copied into the loop: the arena holds one
  // stack (the accumulator) and a few layers. The peak adds the inputs and
  // the output copied out of the arena.
  const int64_t stack = 8 * 32 * 32 * 4, layer = 32 * 32 * 4;
  EXPECT_GE(stats.arena_bytes, stack + layer);
  EXPECT_LT(stats.arena_bytes, stack + 5 * layer);
  EXPECT_EQ(stats.peak_bytes, (layer + stack) + stats.arena_bytes + stack);
  EXPECT_EQ(stats.misplaced_results, 0);
  // Constants are made once and take no step, nor do get-tuple-elements
  // that only evaluators read (i, h and acc in the body, i in the
  // condition; w is also the body's result, and out is the root): 6 entry
  // instructions + 8 bodies of 10 + 9 conditions of 2.
  EXPECT_EQ(stats.instructions, 6 + 8 * 10 + 9 * 2);
}

TEST(ExecutorTest, PeakBytesOfAChainMatchTheHandCount) {
  const char* text = R"(HloModule chain
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY e {
  p = f32[256] parameter(0)
  b = f32[4,256] broadcast(p), dimensions={1}
  x = f32[4,256] exponential(b)
  zero = f32[] constant(0)
  ROOT r = f32[4] reduce(x, zero), dimensions={1}, to_apply=add
})";
  auto module = testing::Parse(text);
  std::mt19937 rng(2);
  HostTensor p = Random("f32[256]", rng);
  Executor executor(*module);
  // Inputs + arena + outputs. The arena: b (4096 B); exp reuses b's buffer
  // (b dies there); the reduce's r (64 B: sizes round up to 64) beside it.
  // p (1024 B) is the caller's; r is copied out (64 B); zero is a constant.
  executor.Run({p});
  EXPECT_EQ(executor.stats().arena_bytes, 4096 + 64);
  EXPECT_EQ(executor.stats().peak_bytes, 1024 + (4096 + 64) + 64);

  // Same program, but b is read again after exp: both 4 KiB buffers live;
  // the add writes into x (its first candidate that dies).
  const char* text2 = R"(HloModule chain2
ENTRY e {
  p = f32[256] parameter(0)
  b = f32[4,256] broadcast(p), dimensions={1}
  x = f32[4,256] exponential(b)
  ROOT y = f32[4,256] add(x, b)
})";
  auto module2 = testing::Parse(text2);
  Executor executor2(*module2);
  executor2.Run({p});
  EXPECT_EQ(executor2.stats().peak_bytes, 1024 + (4096 + 4096) + 4096);

  // The input is only read: negate writes a new buffer, tanh writes into it.
  const char* text3 = R"(HloModule chain3
ENTRY e {
  p = f32[256] parameter(0)
  n = f32[256] negate(p)
  ROOT t = f32[256] tanh(n)
})";
  auto module3 = testing::Parse(text3);
  Executor executor3(*module3);
  const double first = p.GetDouble(0);
  std::vector<HostTensor> out = executor3.Run({p});
  EXPECT_EQ(executor3.stats().peak_bytes, 1024 + 1024 + 1024);
  EXPECT_EQ(executor3.stats().allocations, 2);  // the arena and the output
  // A second run reuses the arena; the first run's output is its own.
  HostTensor q = p.Clone();
  q.mutable_data<float>()[0] = 0.5f;
  std::vector<HostTensor> out2 = executor3.Run({q});
  EXPECT_NEAR(out[0].GetDouble(0), std::tanh(-first), 1e-6);
  EXPECT_NEAR(out2[0].GetDouble(0), std::tanh(-0.5), 1e-6);
  EXPECT_EQ(executor3.stats().allocations, 1);  // the new output (the first is still held)
  out.clear();
  executor3.Run({q});
  EXPECT_EQ(executor3.stats().allocations, 0);  // the first output's buffer came back
  EXPECT_NEAR(p.GetDouble(0), first, 0);        // the shared input is untouched
}

TEST(ExecutorTest, CallTuplesAndTupleParameters) {
  const char* text = R"(HloModule m
f {
  a = f32[3] parameter(0)
  b = f32[3] parameter(1)
  m = f32[3] multiply(a, b)
  ROOT t = (f32[3], f32[3]) tuple(m, a)
}
ENTRY e {
  pair = (f32[3], s32[2]) parameter(0)
  y = f32[3] parameter(1)
  x = f32[3] get-tuple-element(pair), index=0
  c = (f32[3], f32[3]) call(x, y), to_apply=f
  m = f32[3] get-tuple-element(c), index=0
  i = s32[2] get-tuple-element(pair), index=1
  inner = (s32[2], f32[3]) tuple(i, x)
  ROOT out = (f32[3], (s32[2], f32[3])) tuple(m, inner)
})";
  HloParseOptions options;
  auto module = ParseHloModule(text, options);
  Executor executor(*module);
  ASSERT_EQ(executor.InputShapes().size(), 3u);
  EXPECT_EQ(executor.InputNames()[0], "pair{0}");
  EXPECT_EQ(executor.InputNames()[2], "y");
  std::mt19937 rng(3);
  HostTensor x = Random("f32[3]", rng), y = Random("f32[3]", rng);
  HostTensor i = Random("s32[2]", rng, -5, 5);
  std::vector<HostTensor> out = executor.Run({x, i, y});
  ASSERT_EQ(out.size(), 3u);
  std::vector<double> m;
  for (int64_t k = 0; k < 3; ++k) m.push_back(static_cast<float>(x.GetDouble(k) * y.GetDouble(k)));
  ExpectEqual(out[0], m);
  ExpectEqual(out[1], i.ToDoubles());
  ExpectEqual(out[2], x.ToDoubles());
}

// Get-tuple-elements that only evaluators read take no step
// (compiler::TakesStep): the add reads a and the nested tuple's leaf b
// (the parameter's third leaf) where they lie, and the multiply reads c,
// whose leaf the root's tuple also returns through c2 (which keeps its
// step: a tuple reads it).
TEST(ExecutorTest, EvaluatorsReadTupleLeavesThroughGetTupleElementsThatTakeNoStep) {
  const char* text = R"(HloModule m
ENTRY e {
  p = (f32[5], (f32[5], f32[5]), f32[5]) parameter(0)
  a = f32[5] get-tuple-element(p), index=0
  inner = (f32[5], f32[5]) get-tuple-element(p), index=1
  b = f32[5] get-tuple-element(inner), index=1
  c = f32[5] get-tuple-element(p), index=2
  c2 = f32[5] get-tuple-element(p), index=2
  ab = f32[5] add(a, b)
  abc = f32[5] multiply(ab, c)
  ROOT t = (f32[5], f32[5], f32[5]) tuple(abc, c2, ab)
})";
  std::mt19937 rng(7);
  std::vector<HostTensor> in;
  for (int k = 0; k < 4; ++k) in.push_back(Random("f32[5]", rng));
  ExecutorStats stats;
  auto module = testing::Parse(text);
  std::vector<HostTensor> out = testing::Run(*module, in, &stats);
  ASSERT_EQ(out.size(), 3u);
  std::vector<double> ab, abc;
  for (int64_t k = 0; k < 5; ++k) {
    const float sum = static_cast<float>(in[0].GetDouble(k) + in[2].GetDouble(k));
    ab.push_back(sum);
    abc.push_back(static_cast<float>(double{sum} * in[3].GetDouble(k)));
  }
  ExpectEqual(out[0], abc);
  ExpectEqual(out[1], in[3].ToDoubles());
  ExpectEqual(out[2], ab);
  // p, inner, c2, ab, abc and t: a, b and c take no step.
  EXPECT_EQ(stats.instructions, 6);
}

// conditional with a predicate: true runs true_computation on the first
// branch argument (here a tuple), false the other on its own argument.
TEST(ExecutorTest, ConditionalOnAPredicateRunsTheChosenBranchOnItsArgument) {
  const char* text = R"(HloModule cond_pred
on_true {
  t = (f32[5,3], f32[3]) parameter(0)
  x = f32[5,3] get-tuple-element(t), index=0
  b = f32[3] get-tuple-element(t), index=1
  bb = f32[5,3] broadcast(b), dimensions={1}
  s = f32[5,3] add(x, bb)
  ROOT r = f32[5,3] tanh(s)
}
on_false {
  y = f32[5,3] parameter(0)
  ROOT r = f32[5,3] exponential(y)
}
ENTRY e {
  p = pred[] parameter(0)
  x = f32[5,3] parameter(1)
  b = f32[3] parameter(2)
  y = f32[5,3] parameter(3)
  t = (f32[5,3], f32[3]) tuple(x, b)
  ROOT c = f32[5,3] conditional(p, t, y), true_computation=on_true, false_computation=on_false
})";
  auto module = testing::Parse(text);
  std::mt19937 rng(11);
  const HostTensor x = Random("f32[5,3]", rng), b = Random("f32[3]", rng),
                   y = Random("f32[5,3]", rng);
  for (bool p : {true, false}) {
    const HostTensor pred = HostTensor::Scalar(PrimitiveType::kPred, p ? 1 : 0);
    std::vector<double> want;
    for (int64_t i = 0; i < 15; ++i) {
      want.push_back(p ? std::tanh(x.GetDouble(i) + b.GetDouble(i % 3)) : std::exp(y.GetDouble(i)));
    }
    ExpectNear(testing::Run(*module, {pred, x, b, y})[0], want, 1e-6, 0,
               p ? "true branch" : "false branch");
  }
}

// branch_computations: index i runs branch i; an index outside [0, N)
// runs the last branch, as XLA defines it. A branch may return its
// parameter (the result is then a copy of the argument).
TEST(ExecutorTest, ConditionalOnABranchIndexRunsTheLastBranchOutOfRange) {
  const char* text = R"(HloModule cond_index
b0 {
  x = f32[4] parameter(0)
  n = f32[4] negate(x)
  k = s32[] constant(0)
  ROOT r = (f32[4], s32[]) tuple(n, k)
}
b1 {
  x = f32[4] parameter(0)
  m = f32[4] multiply(x, x)
  k = s32[] constant(1)
  ROOT r = (f32[4], s32[]) tuple(m, k)
}
b2 {
  x = f32[4] parameter(0)
  k = s32[] constant(2)
  ROOT r = (f32[4], s32[]) tuple(x, k)
}
ENTRY e {
  i = s32[] parameter(0)
  x = f32[4] parameter(1)
  y = f32[4] parameter(2)
  z = f32[4] parameter(3)
  ROOT c = (f32[4], s32[]) conditional(i, x, y, z), branch_computations={b0, b1, b2}
})";
  auto module = testing::Parse(text);
  std::mt19937 rng(12);
  const std::vector<HostTensor> args = {Random("f32[4]", rng), Random("f32[4]", rng),
                                        Random("f32[4]", rng)};
  for (const auto& [index, branch] :
       std::vector<std::pair<int, int>>{{0, 0}, {1, 1}, {2, 2}, {-3, 2}, {7, 2}}) {
    const std::vector<HostTensor> out = testing::Run(
        *module, {HostTensor::Scalar(PrimitiveType::kS32, index), args[0], args[1], args[2]});
    ASSERT_EQ(out.size(), 2u);
    std::vector<double> want;
    for (int64_t k = 0; k < 4; ++k) {
      const double v = args[branch].GetDouble(k);
      want.push_back(branch == 0 ? -v : branch == 1 ? static_cast<float>(v * v) : v);
    }
    const std::string what = "index " + std::to_string(index);
    ExpectEqual(out[0], want, what);
    ExpectEqual(out[1], {static_cast<double>(branch)}, what);
  }
}

// A conditional in a while body: the branch's region nests in the body's,
// and the carry is updated by whichever branch ran on each trip.
TEST(ExecutorTest, ConditionalInsideAWhileBodyAlternatesBranches) {
  const char* text = R"(HloModule cond_loop
double {
  a = f32[8] parameter(0)
  ROOT d = f32[8] add(a, a)
}
plus_one {
  a = f32[8] parameter(0)
  one = f32[] constant(1)
  ones = f32[8] broadcast(one), dimensions={}
  ROOT s = f32[8] add(a, ones)
}
cond {
  s = (s32[], f32[8]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  n = s32[] constant(6)
  ROOT lt = pred[] compare(i, n), direction=LT
}
body {
  s = (s32[], f32[8]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  acc = f32[8] get-tuple-element(s), index=1
  two = s32[] constant(2)
  r = s32[] remainder(i, two)
  zero = s32[] constant(0)
  even = pred[] compare(r, zero), direction=EQ
  next = f32[8] conditional(even, acc, acc), true_computation=double, false_computation=plus_one
  one = s32[] constant(1)
  i2 = s32[] add(i, one)
  ROOT t = (s32[], f32[8]) tuple(i2, next)
}
ENTRY e {
  x = f32[8] parameter(0)
  zero = s32[] constant(0)
  init = (s32[], f32[8]) tuple(zero, x)
  loop = (s32[], f32[8]) while(init), condition=cond, body=body
  ROOT out = f32[8] get-tuple-element(loop), index=1
})";
  std::mt19937 rng(13);
  const HostTensor x = Random("f32[8]", rng);
  std::vector<double> want;
  for (int64_t k = 0; k < 8; ++k) {
    double v = x.GetDouble(k);
    for (int trip = 0; trip < 6; ++trip) v = trip % 2 == 0 ? 2 * v : v + 1;
    want.push_back(v);
  }
  ExpectNear(testing::RunText(text, {x})[0], want, 1e-6, 0);
}

// A root tuple may name one value several times (autodiff's gradients of
// two weights that share a cotangent): every output gets the value.
TEST(ExecutorTest, AValueNamedTwiceInTheRootIsReturnedTwice) {
  std::mt19937 rng(7);
  HostTensor x = Random("f32[2]", rng), y = Random("f32[2]", rng);
  std::vector<double> sum;
  for (int64_t k = 0; k < 2; ++k) {
    sum.push_back(static_cast<float>(x.GetDouble(k) + y.GetDouble(k)));
  }

  // An intermediate that dies at the root, named twice (and once more nested).
  auto module = testing::Parse(R"(HloModule m
ENTRY e {
  x = f32[2] parameter(0)
  y = f32[2] parameter(1)
  a = f32[2] add(x, y)
  ROOT t = (f32[2], f32[2], f32[2]) tuple(a, a, a)
})");
  std::vector<HostTensor> out = testing::Run(*module, {x, y});
  ASSERT_EQ(out.size(), 3u);
  for (const HostTensor& t : out) {
    ASSERT_TRUE(t.valid());
    ExpectEqual(t, sum);
  }

  // A parameter that is itself the output, twice, beside another output;
  // the input given away (moved) or shared with the caller.
  auto params = testing::Parse(R"(HloModule m
ENTRY e {
  x = f32[2] parameter(0)
  y = f32[2] parameter(1)
  n = f32[2] negate(y)
  ROOT t = (f32[2], f32[2], f32[2]) tuple(x, n, x)
})");
  Executor executor(*params);
  for (bool given : {false, true}) {
    std::vector<HostTensor> inputs;
    inputs.push_back(given ? x.Clone() : x);
    inputs.push_back(y);
    out = executor.Run(std::move(inputs));
    ASSERT_EQ(out.size(), 3u);
    ASSERT_TRUE(out[0].valid() && out[2].valid()) << (given ? "given" : "shared");
    ExpectEqual(out[0], x.ToDoubles());
    ExpectEqual(out[2], x.ToDoubles());
    ExpectEqual(out[1], {-y.GetDouble(0), -y.GetDouble(1)});
  }

  // The same through a call with a repeated argument, whose root repeats a
  // parameter too.
  auto call = testing::Parse(R"(HloModule m
f {
  a = f32[2] parameter(0)
  b = f32[2] parameter(1)
  m = f32[2] multiply(a, b)
  ROOT t = (f32[2], f32[2], f32[2]) tuple(a, m, a)
}
ENTRY e {
  x = f32[2] parameter(0)
  y = f32[2] parameter(1)
  s = f32[2] add(x, y)
  c = (f32[2], f32[2], f32[2]) call(s, s), to_apply=f
  g0 = f32[2] get-tuple-element(c), index=0
  g1 = f32[2] get-tuple-element(c), index=1
  g2 = f32[2] get-tuple-element(c), index=2
  ROOT t = (f32[2], f32[2], f32[2], f32[2]) tuple(g0, g1, g2, g0)
})");
  out = testing::Run(*call, {x, y});
  ASSERT_EQ(out.size(), 4u);
  for (const HostTensor& t : out) ASSERT_TRUE(t.valid());
  std::vector<double> square;
  for (double v : sum) square.push_back(static_cast<float>(v * v));
  ExpectEqual(out[0], sum);
  ExpectEqual(out[1], square);
  ExpectEqual(out[2], sum);
  ExpectEqual(out[3], sum);
}

TEST(ExecutorTest, InputErrorsNameTheParameter) {
  auto module = testing::Parse(kScan);
  Executor executor(*module);
  std::mt19937 rng(4);
  HostTensor x = Random("f32[32,32]", rng);
  ExpectErrorContaining([&] { executor.Run({x}); }, {"takes 2 inputs", "got 1"});
  ExpectErrorContaining(
      [&] {
        executor.Run({x, Random("f32[8,32,31]", rng)});
      },
      {"input 1 for parameter 'weights'", "f32[8,32,31]", "expected f32[8,32,32]"});
  ExpectErrorContaining([&] { executor.Run({x, HostTensor()}); }, {"input 1", "empty"});
}

TEST(ExecutorTest, RunTimeErrorsNameTheInstruction) {
  const char* text = R"(HloModule m
sum {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY e {
  x = f32[4] parameter(0)
  ROOT ar = f32[4] all-reduce(x), replica_groups={{0,1}}, to_apply=sum
})";
  auto module = testing::Parse(text);
  std::mt19937 rng(5);
  HostTensor x = Random("f32[4]", rng);
  // One device cannot be grouped with device 1.
  ExpectErrorContaining([&] { testing::Run(*module, {x}); },
                        {"'ar' (all-reduce) at 9:3", "name device 1"});
}

TEST(ExecutorTest, RunOnDevicesGivesEveryDeviceItsResultAndStats) {
  const char* text = R"(HloModule m, num_partitions=4
sum {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY e {
  x = f32[16,8] parameter(0)
  w = f32[8,4] parameter(1)
  local = f32[16,4] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT total = f32[16,4] all-reduce(local), channel_id=1, replica_groups={{0,1,2,3}}, use_global_device_ids=true, to_apply=sum
})";
  auto module = testing::Parse(text);
  std::mt19937 rng(6);
  std::vector<std::vector<HostTensor>> inputs;
  for (int d = 0; d < 4; ++d) inputs.push_back({Random("f32[16,8]", rng), Random("f32[8,4]", rng)});
  LocalCluster cluster(4);
  std::vector<ExecutorStats> stats;
  auto outputs = RunOnDevices(*module, inputs, cluster, &stats);
  std::vector<double> want(64, 0.0);
  for (int d = 0; d < 4; ++d) {
    for (int64_t r = 0; r < 16; ++r) {
      for (int64_t c = 0; c < 4; ++c) {
        for (int64_t k = 0; k < 8; ++k) {
          want[r * 4 + c] += inputs[d][0].GetDouble(r * 8 + k) * inputs[d][1].GetDouble(k * 4 + c);
        }
      }
    }
  }
  for (int d = 0; d < 4; ++d) {
    ExpectNear(outputs[d][0], want, 1e-5, 1e-5, "device " + std::to_string(d));
    // Bit-identical on every device.
    EXPECT_EQ(outputs[d][0].ToDoubles(), outputs[0][0].ToDoubles());
    EXPECT_EQ(stats[d].collective_bytes(), 2 * 3 * 256 / 4);
    EXPECT_EQ(stats[d].instructions, 4);
  }
}

// A while that never ends stops at ExecutorOptions::max_while_iterations
// with the loop's name, the limit and the flag that raises it; a loop of
// exactly that many iterations still runs. The limit is per execution of the
// loop: an inner loop reached again starts counting anew.
TEST(ExecutorTest, WhileLoopsStopAtTheIterationLimit) {
  const char* text = R"(HloModule m
forever {
  s = s32[] parameter(0)
  ROOT t = pred[] constant(true)
}
below {
  s = s32[] parameter(0)
  n = s32[] constant(5)
  ROOT lt = pred[] compare(s, n), direction=LT
}
step {
  s = s32[] parameter(0)
  one = s32[] constant(1)
  ROOT a = s32[] add(s, one)
}
ENTRY e {
  p = s32[] parameter(0)
  counted = s32[] while(p), condition=below, body=step
  ROOT spin = s32[] while(counted), condition=forever, body=step
})";
  auto module = testing::Parse(text);
  HostTensor zero = HostTensor::Scalar(PrimitiveType::kS32, 0);
  ExecutorOptions options;
  options.max_while_iterations = 1000;
  Executor executor(*module, options);
  ExpectErrorContaining(
      [&] { executor.Run({zero}); },
      {"'spin' (while) at 19:3", "while loop 'spin' ran 1000 iterations",
       "condition 'forever' still holds", "limit of 1000 per loop", "--max-iterations"});

  // Exactly at the limit: `counted` runs 5 iterations.
  const char* counted_only = R"(HloModule m
below {
  s = s32[] parameter(0)
  n = s32[] constant(5)
  ROOT lt = pred[] compare(s, n), direction=LT
}
step {
  s = s32[] parameter(0)
  one = s32[] constant(1)
  ROOT a = s32[] add(s, one)
}
ENTRY e {
  p = s32[] parameter(0)
  ROOT counted = s32[] while(p), condition=below, body=step
})";
  auto counted = testing::Parse(counted_only);
  options.max_while_iterations = 5;
  EXPECT_EQ(Executor(*counted, options).Run({zero})[0].GetDouble(0), 5);
  options.max_while_iterations = 4;
  Executor limited(*counted, options);
  ExpectErrorContaining([&] { limited.Run({zero}); },
                        {"while loop 'counted' ran 4 iterations", "limit of 4 per loop"});
  // An executor whose run failed midway runs again (from 2: 3 iterations).
  EXPECT_EQ(limited.Run({HostTensor::Scalar(PrimitiveType::kS32, 2)})[0].GetDouble(0), 5);
  options.max_while_iterations = 0;
  ExpectErrorContaining([&] { Executor(*counted, options); },
                        {"--max-iterations must be at least 1", "got 0"});
  EXPECT_EQ(ExecutorOptions().max_while_iterations, 10'000'000);
}

// The executor follows calls on the stack: it refuses recursion and calls
// nested deeper than kMaxCallDepth (CheckCallGraph) when it is made, and
// runs a chain of exactly kMaxCallDepth.
TEST(ExecutorTest, RefusesRecursionAndOverDeepCallsAndRunsTheDeepestAllowed) {
  for (const hostile_hlo::RecursiveModule& m : hostile_hlo::RecursiveModules()) {
    HloParseOptions unverified;
    unverified.verify = false;
    auto module = ParseHloModule(m.text, unverified);
    ExpectErrorContaining([&] { Executor executor(*module); }, {"calls itself", m.cycle});
  }
  for (hostile_hlo::ChainKind kind :
       {hostile_hlo::ChainKind::kCall, hostile_hlo::ChainKind::kWhile}) {
    HloParseOptions unverified;
    unverified.verify = false;
    const int64_t depth = hostile_hlo::OverDeepChain(kind);
    auto deep = ParseHloModule(hostile_hlo::CallChainModule(depth, kind), unverified);
    ExpectErrorContaining([&] { Executor executor(*deep); },
                          {fmt::format("calls nest {} deep", depth)});
    auto allowed = testing::Parse(hostile_hlo::CallChainModule(kMaxCallDepth, kind));
    const std::vector<double> values = {1, 2, 3, 4};
    const HostTensor x = HostTensor::FromDoubles(ParseShape("f32[4]"), values);
    // One negate at the bottom of the chain.
    EXPECT_EQ(testing::Run(*allowed, {x})[0].ToDoubles(), (std::vector<double>{-1, -2, -3, -4}));
  }
}

// A constant is made once, when the executor is built, and its readers
// read it where it is: runs take no step for it, and no result is ever
// written over it, not where the buffer assignment could reuse a dying
// operand (an add, a dynamic-update-slice) and not across runs. A root
// constant is still a result.
TEST(ExecutorTest, ConstantsAreMadeOnceAndNeverWrittenOver) {
  auto module = testing::Parse(R"(HloModule constants
ENTRY main {
  p = f32[4] parameter(0)
  c = f32[4] constant({1.5, -2, 3.25, 4})
  sum = f32[4] add(c, p)
  u = f32[1] slice(p), slice={[0:1]}
  i = s32[] constant(2)
  updated = f32[4] dynamic-update-slice(c, u, i)
  twice = f32[4] add(sum, updated)
  ROOT out = (f32[4], f32[4], f32[4]) tuple(twice, c, sum)
})");
  const std::vector<double> c = {1.5, -2, 3.25, 4};
  Executor executor(*module);
  std::mt19937 rng(11);
  for (int run = 0; run < 3; ++run) {
    HostTensor p = Random("f32[4]", rng);
    const std::vector<double> pv = p.ToDoubles();
    std::vector<HostTensor> out = executor.Run({p});
    ASSERT_EQ(out.size(), 3u);
    std::vector<double> sum(4), twice(4);
    for (int k = 0; k < 4; ++k) {
      sum[k] = c[k] + pv[k];
      twice[k] = sum[k] + (k == 2 ? pv[0] : c[k]);
    }
    ExpectNear(out[0], twice, 1e-6, 1e-6, "twice");
    ExpectNear(out[1], c, 0, 0, "the constant");
    ExpectNear(out[2], sum, 1e-6, 1e-6, "sum");
    // parameter, add, slice, dynamic-update-slice, add, tuple: no step for
    // either constant.
    EXPECT_EQ(executor.stats().instructions, 6);
  }
  auto root = testing::Parse(R"(HloModule root_constant
ENTRY main {
  ROOT c = s32[3] constant({7, -8, 9})
})");
  std::vector<HostTensor> out = testing::Run(*root, {});
  ASSERT_EQ(out.size(), 1u);
  ExpectNear(out[0], {7, -8, 9}, 0, 0, "root constant");
}

}  // namespace
}  // namespace weft::runtime
