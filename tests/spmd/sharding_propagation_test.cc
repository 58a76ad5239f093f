// Per-op propagation behaviour, text modules in and per-instruction shardings
// out. Expected values follow XLA's documented ShardingPropagation semantics.
#include "weft/spmd/sharding_propagation.h"

#include <gtest/gtest.h>

#include "propagation_test_util.h"
#include "weft/hlo/parser.h"

namespace weft {
namespace {

using testing::Propagate;
using testing::Propagated;

std::string Module(const std::string& body, int partitions = 4) {
  return "HloModule m, num_partitions=" + std::to_string(partitions) +
         "\n\nsum {\n  sa = f32[] parameter(0)\n  sb = f32[] "
         "parameter(1)\n  ROOT ss = f32[] add(sa, sb)\n}\n\nENTRY main {\n" +
         body + "}\n";
}

TEST(ShardingPropagationTest, ElementwiseForwardAndBackward) {
  auto p = Propagate(Module(R"(
  p0 = f32[8,16] parameter(0), sharding={devices=[2,2]<=[4]}
  p1 = f32[8,16] parameter(1)
  a = f32[8,16] add(p0, p1)
  n = f32[8,16] negate(a)
  p2 = f32[8,16] parameter(2)
  e = f32[8,16] exponential(p2)
  c = f32[8,16] copy(e), sharding={devices=[4,1]<=[4]}
  ROOT t = (f32[8,16], f32[8,16]) tuple(n, c)
)"));
  EXPECT_SHARDING(p, "a", "{devices=[2,2]<=[4]}");
  EXPECT_SHARDING(p, "n", "{devices=[2,2]<=[4]}");
  EXPECT_SHARDING(p, "e", "{devices=[4,1]<=[4]}");
  EXPECT_EQ(p.ShardingOf("p1"), "(none)");  // parameters are not propagated to by default
  EXPECT_EQ(p.ShardingOf("t"), "(none)");   // nor the output
}

// Unreduced axes are the user's: propagation sees them as the summed
// layout, so the data split spreads and the addends do not, and the
// annotations keep them.
TEST(ShardingPropagationTest, UnreducedAxesStayWhereTheUserPutThem) {
  auto p = Propagate(Module(R"(
  p0 = f32[8,16] parameter(0), sharding={devices=[2,1,2]<=[4] last_tile_dims={unreduced}}
  p1 = f32[8,16] parameter(1), sharding={unreduced}
  a = f32[8,16] add(p0, p0)
  b = f32[8,16] multiply(p1, p1)
  ROOT t = (f32[8,16], f32[8,16]) tuple(a, b)
)"));
  EXPECT_SHARDING(p, "p0", "{devices=[2,1,2]<=[4] last_tile_dims={unreduced}}");
  EXPECT_SHARDING(p, "p1", "{unreduced}");
  EXPECT_SHARDING(p, "a", "{devices=[2,1,2]<=[4] last_tile_dim_replicate}");
  EXPECT_SHARDING(p, "b", "{replicated}");
}

// Dead code that reads live values (an unused multiply of a live add) is
// propagated through like live code instead of breaking the engine.
TEST(ShardingPropagationTest, DeadInstructionsUsingLiveOnesGetShardings) {
  auto p = Propagate(Module(R"(
  p0 = f32[8,16] parameter(0), sharding={devices=[4,1]<=[4]}
  a = f32[8,16] add(p0, p0)
  dead = f32[8,16] multiply(a, a)
  dead2 = f32[16,8] transpose(dead), dimensions={1,0}
  ROOT n = f32[8,16] negate(a)
)"));
  EXPECT_SHARDING(p, "a", "{devices=[4,1]<=[4]}");
  EXPECT_SHARDING(p, "dead", "{devices=[4,1]<=[4]}");
  EXPECT_SHARDING(p, "dead2", "{devices=[1,4]<=[4]}");
}

TEST(ShardingPropagationTest, BroadcastForward) {
  auto p = Propagate(Module(R"(
  p = f32[8] parameter(0), sharding={devices=[4]<=[4]}
  b = f32[16,8] broadcast(p), dimensions={1}
  ROOT r = f32[16,8] negate(b)
)"));
  EXPECT_SHARDING(p, "b", "{devices=[1,4]<=[4]}");
}

TEST(ShardingPropagationTest, BroadcastBackwardReplicatesTheNewDims) {
  auto p = Propagate(Module(R"(
  p = f32[8] parameter(0)
  x = f32[8] exponential(p)
  b = f32[8,16] broadcast(x), dimensions={0}
  c = f32[8,16] copy(b), sharding={devices=[2,2]<=[4]}
  ROOT r = f32[8,16] negate(c)
)"));
  EXPECT_SHARDING(p, "b", "{devices=[2,2]<=[4]}");
  EXPECT_SHARDING(p, "x", "{devices=[2,2]<=[4] last_tile_dim_replicate}");
}

TEST(ShardingPropagationTest, ReduceReplicatesReducedDimsAndBackward) {
  auto p = Propagate(Module(R"(
  p = f32[8,16] parameter(0), sharding={devices=[2,2]<=[4]}
  zero = f32[] constant(0)
  r = f32[8] reduce(p, zero), dimensions={1}, to_apply=sum
  q = f32[8,16] parameter(1)
  x = f32[8,16] exponential(q)
  r2 = f32[8] reduce(x, zero), dimensions={1}, to_apply=sum, sharding={devices=[4]<=[4]}
  ROOT t = (f32[8], f32[8]) tuple(r, r2)
)"));
  EXPECT_SHARDING(p, "r", "{devices=[2,2]<=[4] last_tile_dim_replicate}");
  EXPECT_SHARDING(p, "x", "{devices=[4,1]<=[4]}");
}

TEST(ShardingPropagationTest, ReshapeSplitMergeAndUnrepresentable) {
  auto p = Propagate(Module(R"(
  p0 = f32[16] parameter(0), sharding={devices=[4]<=[4]}
  split = f32[4,4] reshape(p0)
  p1 = f32[4,8] parameter(1), sharding={devices=[4,1]<=[4]}
  merge = f32[32] reshape(p1)
  p2 = f32[4,8] parameter(2), sharding={devices=[2,2]<=[4]}
  partial = f32[32] reshape(p2)
  p3 = f32[6,4] parameter(3), sharding={devices=[2,1,2]<=[4] last_tile_dim_replicate}
  odd = f32[4,6] reshape(p3)
  ROOT t = (f32[4,4], f32[32], f32[32], f32[4,6]) tuple(split, merge, partial, odd)
)"));
  EXPECT_SHARDING(p, "split", "{devices=[4,1]<=[4]}");
  EXPECT_SHARDING(p, "merge", "{devices=[4]<=[4]}");
  // dim 0 is split only 2 of 4 ways, so dim 1's split would be strided: dropped.
  EXPECT_SHARDING(p, "partial", "{devices=[2,2]<=[4] last_tile_dim_replicate}");
  // [6,4] -> [4,6]: both dim 0s have 2 = gcd(6, 4) as their major factor,
  // so dim 0's 2-way split carries over (XLA's gcd rule).
  EXPECT_SHARDING(p, "odd", "{devices=[2,1,2]<=[4] last_tile_dim_replicate}");
}

TEST(ShardingPropagationTest, ReshapeBackward) {
  auto p = Propagate(Module(R"(
  p = f32[4,8] parameter(0)
  x = f32[4,8] exponential(p)
  r = f32[32] reshape(x), sharding={devices=[4]<=[4]}
  ROOT n = f32[32] negate(r)
)"));
  EXPECT_SHARDING(p, "x", "{devices=[4,1]<=[4]}");
}

TEST(ShardingPropagationTest, Transpose) {
  auto p = Propagate(Module(R"(
  p = f32[8,16,4] parameter(0), sharding={devices=[2,1,2]<=[4]}
  t = f32[4,8,16] transpose(p), dimensions={2,0,1}
  ROOT n = f32[4,8,16] negate(t)
)"));
  EXPECT_SHARDING(p, "t", "{devices=[2,2,1]0,2,1,3}");
}

TEST(ShardingPropagationTest, DotForwardDropsContractingSplit) {
  auto p = Propagate(Module(R"(
  lhs = f32[8,16] parameter(0), sharding={devices=[2,2]<=[4]}
  rhs = f32[16,32] parameter(1)
  d = f32[8,32] dot(lhs, rhs), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  bl = f32[2,8,16] parameter(2), sharding={devices=[2,1,1,2]<=[4] last_tile_dim_replicate}
  br = f32[2,16,4] parameter(3)
  bd = f32[2,8,4] dot(bl, br), lhs_batch_dims={0}, rhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_contracting_dims={1}
  ROOT t = (f32[8,32], f32[2,8,4]) tuple(d, bd)
)"));
  EXPECT_SHARDING(p, "d", "{devices=[2,1,2]<=[4] last_tile_dim_replicate}");
  EXPECT_SHARDING(p, "bd", "{devices=[2,1,1,2]<=[4] last_tile_dim_replicate}");
}

TEST(ShardingPropagationTest, DotOperandLookahead) {
  // Only lhs is sharded (on the contracting dim); the dot result carries no
  // split, but rhs still gets the matching contracting split through the dot.
  auto p = Propagate(Module(R"(
  lhs = f32[8,16] parameter(0), sharding={devices=[1,4]<=[4]}
  p1 = f32[16,32] parameter(1)
  rhs = f32[16,32] exponential(p1)
  d = f32[8,32] dot(lhs, rhs), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT n = f32[8,32] negate(d)
)"));
  EXPECT_SHARDING(p, "rhs", "{devices=[4,1]<=[4]}");
}

TEST(ShardingPropagationTest, DotBothOperandsMergeNonContracting) {
  auto p = Propagate(Module(R"(
  lhs = f32[8,16] parameter(0), sharding={devices=[2,1,2]<=[4] last_tile_dim_replicate}
  rhs = f32[16,32] parameter(1), sharding={devices=[1,2,2]<=[2,2]T(1,0) last_tile_dim_replicate}
  d = f32[8,32] dot(lhs, rhs), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT n = f32[8,32] negate(d)
)"));
  EXPECT_SHARDING(p, "d", "{devices=[2,2]<=[4]}");
}

// convolution: the input's batch and spatial splits reach the result, its
// feature split does not (it is contracted) but reaches the kernel's input
// features; backward, the result's output-feature split reaches the kernel
// and its batch and spatial splits the input.
TEST(ShardingPropagationTest, ConvolutionForwardAndBackward) {
  auto p = Propagate(Module(R"(
  x = f32[8,32,32,16] parameter(0), sharding={devices=[2,2,1,1]<=[4]}
  w = f32[3,3,16,64] parameter(1)
  c = f32[8,32,32,64] convolution(x, w), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f
  y = f32[8,32,32,16] parameter(2), sharding={devices=[1,1,1,4]<=[4]}
  p3 = f32[3,3,16,64] parameter(3)
  v = f32[3,3,16,64] exponential(p3)
  d = f32[8,32,32,64] convolution(y, v), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f
  nd = f32[8,32,32,64] negate(d)
  p4 = f32[8,32,32,16] parameter(4)
  z = f32[8,32,32,16] exponential(p4)
  p5 = f32[1,1,16,64] parameter(5)
  u = f32[1,1,16,64] exponential(p5)
  e = f32[8,32,32,64] convolution(z, u), window={size=1x1}, dim_labels=b01f_01io->b01f, sharding={devices=[2,1,1,2]<=[4]}
  ROOT t = (f32[8,32,32,64], f32[8,32,32,64], f32[8,32,32,64]) tuple(c, nd, e)
)"));
  EXPECT_SHARDING(p, "c", "{devices=[2,2,1,1]<=[4]}");
  // A true convolution (a moving window) asks nothing of its operands, as in
  // XLA: only its input's sharding flows, forward.
  EXPECT_FALSE(p.Get("v")->has_sharding());
  EXPECT_SHARDING(p, "z", "{devices=[2,1,1,1,2]<=[4] last_tile_dim_replicate}");
  EXPECT_SHARDING(p, "u", "{devices=[1,1,1,2,2]<=[2,2]T(1,0) last_tile_dim_replicate}");
}

// A convolution whose spatial dims are all dot dims (a size-1 window: lhs
// non-contracting; one window over the whole dim: contracting; a size-1
// input under a reversed full window: rhs non-contracting) propagates as a
// dot, both ways; one with a true spatial dim split, or with groups, takes
// the input's sharding where the kernel is small and the input features
// whole, else the input's batch split only.
TEST(ShardingPropagationTest, ConvolutionAsDotAndTrueConvolution) {
  auto p = Propagate(Module(R"(
  a = f32[64,1,1,96] parameter(0), sharding={devices=[1,2,1,1]<=[2]}
  b = f32[1,1,48,96] parameter(1), sharding={devices=[1,2,1,1]<=[2]}
  rn = f32[64,1,1,48] convolution(a, b), window={size=1x1 rhs_reversal=1x1}, dim_labels=b01f_01oi->b01f
  c0 = f32[32,7,7,16] parameter(2)
  c = f32[32,7,7,16] exponential(c0)
  k0 = f32[7,7,16,24] parameter(3)
  k = f32[7,7,16,24] exponential(k0)
  ct = f32[32,1,1,24] convolution(c, k), window={size=7x7}, dim_labels=b01f_01io->b01f, sharding={devices=[1,2,1,1]<=[2]}
  x = f32[16,20,30,12] parameter(4), sharding={devices=[2,1,1,1]<=[2]}
  w = f32[9,13,12,8] parameter(5)
  big = f32[16,12,18,8] convolution(x, w), window={size=9x13}, dim_labels=b01f_01io->b01f
  y = f32[16,20,30,12] parameter(6), sharding={devices=[1,2,1,1]<=[2]}
  w3 = f32[3,3,12,8] parameter(7)
  small = f32[16,18,28,8] convolution(y, w3), window={size=3x3}, dim_labels=b01f_01io->b01f
  ROOT t = (f32[64,1,1,48], f32[32,1,1,24], f32[16,12,18,8], f32[16,18,28,8]) tuple(rn, ct, big, small)
)",
                            2));
  // a's spatial dim 0 is size 1 under a reversed window: an rhs
  // non-contracting dim, which a does not carry to the result; b's does.
  EXPECT_SHARDING(p, "rn", "{devices=[1,1,2,1]<=[2]}");
  // The result's size-1 dim of a contracting (7x7 over 7x7) dim ties to
  // nothing in the operands.
  EXPECT_SHARDING(p, "c", "{replicated}");
  EXPECT_SHARDING(p, "k", "{replicated}");
  // x's batch split; the kernel 9x13 is not small beside the 12x18 result:
  // the batch only (it is the only split here).
  EXPECT_SHARDING(p, "big", "{devices=[2,1,1,1]<=[2]}");
  // y splits a true spatial dim and the 3x3 kernel is small: as the input.
  EXPECT_SHARDING(p, "small", "{devices=[1,2,1,1]<=[2]}");
}

// With groups, a large kernel keeps only the input's batch split (XLA's
// ConvolutionDataParallelism).
TEST(ShardingPropagationTest, GroupedConvolutionWithALargeKernelKeepsTheBatchSplitOnly) {
  auto p = Propagate(Module(R"(
  x = f32[64,32,10,20] parameter(0), sharding={devices=[2,2,1,2]<=[8]}
  w = f32[32,1,6,16] parameter(1), sharding={replicated}
  c = f32[64,32,5,5] convolution(x, w), window={size=6x16}, dim_labels=bf01_oi01->bf01, feature_group_count=32
  ROOT r = f32[64,32,5,5] negate(c)
)",
                            8));
  EXPECT_SHARDING(p, "c", "{devices=[2,1,1,1,4]<=[8] last_tile_dim_replicate}");
}

TEST(ShardingPropagationTest, DynamicSliceAndUpdateSlice) {
  auto p = Propagate(Module(R"(
  p = f32[8,16] parameter(0), sharding={devices=[2,2]<=[4]}
  i = s32[] parameter(1)
  j = s32[] constant(0)
  ds = f32[1,16] dynamic-slice(p, i, j), dynamic_slice_sizes={1,16}
  q = f32[1,16] parameter(2)
  u = f32[1,16] exponential(q)
  dus = f32[8,16] dynamic-update-slice(p, u, i, j)
  ROOT t = (f32[1,16], f32[8,16]) tuple(ds, dus)
)"));
  EXPECT_SHARDING(p, "ds", "{devices=[1,2,2]0,2,1,3 last_tile_dim_replicate}");
  EXPECT_SHARDING(p, "dus", "{devices=[2,2]<=[4]}");
  EXPECT_SHARDING(p, "u", "{devices=[1,2,2]0,2,1,3 last_tile_dim_replicate}");
}

TEST(ShardingPropagationTest, ConcatenatePassesShardingBothWays) {
  auto p = Propagate(Module(R"(
  p0 = f32[4,8] parameter(0), sharding={devices=[1,4]<=[4]}
  a = f32[4,8] exponential(p0)
  p1 = f32[4,8] parameter(1)
  b = f32[4,8] exponential(p1)
  c = f32[8,8] concatenate(a, b), dimensions={0}
  ROOT n = f32[8,8] negate(c)
)"));
  EXPECT_SHARDING(p, "c", "{devices=[1,4]<=[4]}");
  EXPECT_SHARDING(p, "b", "{devices=[1,4]<=[4]}");
}

TEST(ShardingPropagationTest, PadAndSliceKeepOperandSharding) {
  auto p = Propagate(Module(R"(
  p = f32[8,16] parameter(0), sharding={devices=[4,1]<=[4]}
  zero = f32[] constant(0)
  pad = f32[10,16] pad(p, zero), padding=1_1x0_0
  s = f32[4,16] slice(p), slice={[0:4], [0:16]}
  ROOT t = (f32[10,16], f32[4,16]) tuple(pad, s)
)"));
  EXPECT_SHARDING(p, "pad", "{devices=[4,1]<=[4]}");
  EXPECT_SHARDING(p, "s", "{devices=[4,1]<=[4]}");
}

TEST(ShardingPropagationTest, WhileBodyConditionAndLoopAgree) {
  auto p = Propagate(R"(HloModule m, num_partitions=4

cond {
  c_state = (s32[], f32[8,16]) parameter(0)
  c_i = s32[] get-tuple-element(c_state), index=0
  c_n = s32[] constant(4)
  ROOT c_lt = pred[] compare(c_i, c_n), direction=LT
}

body {
  b_state = (s32[], f32[8,16]) parameter(0)
  b_i = s32[] get-tuple-element(b_state), index=0
  b_x = f32[8,16] get-tuple-element(b_state), index=1
  b_y = f32[8,16] tanh(b_x)
  b_one = s32[] constant(1)
  b_next = s32[] add(b_i, b_one)
  ROOT b_out = (s32[], f32[8,16]) tuple(b_next, b_y)
}

ENTRY main {
  x = f32[8,16] parameter(0), sharding={devices=[4,1]<=[4]}
  start = s32[] constant(0)
  init = (s32[], f32[8,16]) tuple(start, x)
  loop = (s32[], f32[8,16]) while(init), condition=cond, body=body
  h = f32[8,16] get-tuple-element(loop), index=1
  ROOT r = f32[8,16] negate(h)
}
)");
  const std::string want = "{{replicated}, {devices=[4,1]<=[4]}}";
  for (const char* name : {"loop", "b_state", "b_out", "c_state"}) EXPECT_SHARDING(p, name, want);
  EXPECT_SHARDING(p, "b_y", "{devices=[4,1]<=[4]}");
  EXPECT_SHARDING(p, "h", "{devices=[4,1]<=[4]}");
}

// conditional: a branch's parameter takes its argument's sharding (and an
// argument without one the branch parameter's), the result agrees with the
// branches' roots, also for a second conditional sharing the branches.
TEST(ShardingPropagationTest, ConditionalBranchesAgreeWithArgumentsAndResult) {
  auto p = Propagate(R"(HloModule m, num_partitions=4
on_true {
  t_x = f32[8,16] parameter(0)
  ROOT t_r = f32[8,16] tanh(t_x)
}
on_false {
  f_y = f32[8,16] parameter(0)
  ROOT f_r = f32[8,16] exponential(f_y)
}
other {
  o_x = f32[8,16] parameter(0), sharding={devices=[1,4]<=[4]}
  ROOT o_r = f32[8,16] negate(o_x)
}
ENTRY main {
  pred = pred[] parameter(0), sharding={replicated}
  x = f32[8,16] parameter(1), sharding={devices=[4,1]<=[4]}
  y = f32[8,16] parameter(2)
  yy = f32[8,16] negate(y)
  c = f32[8,16] conditional(pred, x, x), true_computation=on_true, false_computation=on_false
  d = f32[8,16] conditional(pred, x, x), true_computation=on_true, false_computation=on_false
  i = s32[] parameter(3), sharding={replicated}
  e = f32[8,16] conditional(i, yy), branch_computations={other}
  ROOT r = (f32[8,16], f32[8,16], f32[8,16]) tuple(c, d, e)
}
)");
  for (const char* name : {"t_x", "t_r", "f_y", "f_r", "c", "d"}) {
    EXPECT_SHARDING(p, name, "{devices=[4,1]<=[4]}");
  }
  // Backward into the argument from the branch's annotated parameter.
  EXPECT_SHARDING(p, "yy", "{devices=[1,4]<=[4]}");
  EXPECT_SHARDING(p, "e", "{devices=[1,4]<=[4]}");
}

// Backward into a reduce-window's operand: the result's split reaches the
// operand as it is, the dims the window moves along included (XLA's rule;
// the partitioner moves what the windows read across tiles).
TEST(ShardingPropagationTest, ReduceWindowOperandTakesTheResultsSplit) {
  auto p = Propagate(R"(HloModule m, num_partitions=4
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY main {
  x = f32[8,16] parameter(0)
  e = f32[8,16] exponential(x)
  z = f32[] constant(0)
  rw = f32[8,15] reduce-window(e, z), window={size=1x2}, to_apply=add, sharding={devices=[2,2]<=[4]}
  y = f32[8,16] parameter(1)
  f = f32[8,16] exponential(y)
  rv = f32[4,16] reduce-window(f, z), window={size=2x1 stride=2x1}, to_apply=add, sharding={devices=[1,4]<=[4]}
  ROOT t = (f32[8,15], f32[4,16]) tuple(rw, rv)
}
)");
  EXPECT_SHARDING(p, "e", "{devices=[2,2]<=[4]}");
  EXPECT_SHARDING(p, "f", "{devices=[1,4]<=[4]}");
}

// A variadic scatter's operand j and result leaf j correspond one to one,
// element by element as in XLA: a split operand splits its own result leaf
// (the other leaf, unsplit, is replicated), and a result leaf its operand.
TEST(ShardingPropagationTest, VariadicScatterOperandsAndResultsCorrespondByElement) {
  const std::string combiner = R"(argmax {
  v0 = f32[] parameter(0)
  i0 = s32[] parameter(1)
  v1 = f32[] parameter(2)
  i1 = s32[] parameter(3)
  gt = pred[] compare(v1, v0), direction=GT
  v = f32[] select(gt, v1, v0)
  i = s32[] select(gt, i1, i0)
  ROOT r = (f32[], s32[]) tuple(v, i)
}
)";
  auto text = [&](const std::string& pos_sharding, const std::string& out_sharding) {
    return "HloModule m, num_partitions=4\n\n" + combiner + R"(
ENTRY main {
  pv = f32[8,6] parameter(0)
  vals = f32[8,6] exponential(pv)
  pp = s32[8,6] parameter(1)
  pos = s32[8,6] negate(pp))" +
           pos_sharding + R"(
  idx = s32[5,1] parameter(2)
  uv = f32[5,6] parameter(3)
  up = s32[5,6] parameter(4)
  s = (f32[8,6], s32[8,6]) scatter(vals, pos, idx, uv, up), update_window_dims={1}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=argmax
  sv = f32[8,6] get-tuple-element(s), index=0
  ROOT n = f32[8,6] negate(sv))" +
           out_sharding + "\n}\n";
  };
  auto forward = Propagate(text(", sharding={devices=[4,1]<=[4]}", ""));
  EXPECT_SHARDING(forward, "s", "{{replicated}, {devices=[4,1]<=[4]}}");
  EXPECT_SHARDING(forward, "sv", "{replicated}");
  auto backward = Propagate(text("", ", sharding={devices=[1,4]<=[4]}"));
  EXPECT_SHARDING(backward, "s", "{{devices=[1,4]<=[4]}, {replicated}}");
  EXPECT_SHARDING(backward, "vals", "{devices=[1,4]<=[4]}");
  EXPECT_SHARDING(backward, "pos", "{replicated}");
  EXPECT_EQ(backward.ShardingOf("idx"), "(none)");
}

// XLA's pass-through custom calls (X64Combine, LayoutConstraint, the
// memory-space moves) carry operand 0's sharding unchanged forward, and
// their own back to their operands; a partial sharding of a user does not
// replace the operand's.
TEST(ShardingPropagationTest, PassThroughCustomCallsCarryTheirOperandsSharding) {
  auto forward = Propagate(Module(R"(
  lo = f32[8,6] parameter(0), sharding={devices=[2,2]<=[4]}
  hi = f32[8,6] parameter(1), sharding={devices=[2,2]<=[4]}
  x = f64[8,6] custom-call(lo, hi), custom_call_target="X64Combine"
  y = f64[8,6] custom-call(x), custom_call_target="LayoutConstraint"
  h = f64[8,6] custom-call(y), custom_call_target="MoveToHost"
  d = f64[8,6] custom-call(h), custom_call_target="MoveToDevice"
  ROOT r = f64[8,6] copy(d), sharding={devices=[2,1,2]<=[4] last_tile_dim_replicate}
)"));
  for (const char* name : {"x", "y", "h", "d"}) {
    EXPECT_SHARDING(forward, name, "{devices=[2,2]<=[4]}");
  }
  auto backward = Propagate(Module(R"(
  q = f32[8,6] parameter(0)
  a = f32[8,6] copy(q)
  h = f32[8,6] custom-call(a), custom_call_target="PinToDevice"
  ROOT r = f32[8,6] copy(h), sharding={devices=[4,1]<=[4]}
)"));
  EXPECT_SHARDING(backward, "h", "{devices=[4,1]<=[4]}");
  EXPECT_SHARDING(backward, "a", "{devices=[4,1]<=[4]}");
}

// rng and rng-bit-generator take their users' shardings (each device draws
// its tile of the unsharded numbers, spmd_partitioner_random.cc); the
// generator's state stays whole.
TEST(ShardingPropagationTest, RandomOpsTakeTheirUsersShardings) {
  auto p = Propagate(Module(R"(
  lo = f32[] constant(0)
  hi = f32[] constant(1)
  u = f32[8,6] rng(lo, hi), distribution=rng_uniform
  x = f32[8,6] parameter(0), sharding={devices=[2,2]<=[4]}
  a = f32[8,6] add(u, x)
  s = u64[2] parameter(1), sharding={replicated}
  g = (u64[2], u32[8,6]) rng-bit-generator(s), algorithm=rng_three_fry
  bits = u32[8,6] get-tuple-element(g), index=1
  f = f32[8,6] convert(bits), sharding={devices=[4,1]<=[4]}
  ROOT t = (f32[8,6], f32[8,6]) tuple(a, f)
)"));
  EXPECT_SHARDING(p, "u", "{devices=[2,2]<=[4]}");
  EXPECT_SHARDING(p, "g", "{{replicated}, {devices=[4,1]<=[4]}}");
}

TEST(ShardingPropagationTest, TupleAndGetTupleElement) {
  auto p = Propagate(Module(R"(
  a = f32[8] parameter(0), sharding={devices=[4]<=[4]}
  q = f32[8] parameter(1)
  b = f32[8] exponential(q)
  t = (f32[8], f32[8]) tuple(a, b)
  g0 = f32[8] get-tuple-element(t), index=0
  g1 = f32[8] get-tuple-element(t), index=1
  c = f32[8] copy(g1), sharding={devices=[2,2]<=[4] last_tile_dim_replicate}
  ROOT r = (f32[8], f32[8]) tuple(g0, c)
)"));
  EXPECT_SHARDING(p, "g0", "{devices=[4]<=[4]}");
  EXPECT_SHARDING(p, "t", "{{devices=[4]<=[4]}, {devices=[2,2]<=[4] last_tile_dim_replicate}}");
  EXPECT_SHARDING(p, "b", "{devices=[2,2]<=[4] last_tile_dim_replicate}");
}

TEST(ShardingPropagationTest, ShardingCustomCallRefinesUnspecifiedDims) {
  auto p = Propagate(Module(R"(
  p = f32[8,16] parameter(0), sharding={devices=[1,2,2]<=[2,2]T(1,0) last_tile_dim_replicate}
  x = f32[8,16] exponential(p)
  s = f32[8,16] custom-call(x), custom_call_target="Sharding", sharding={devices=[2,1,2]<=[4] last_tile_dim_replicate}, backend_config="unspecified_dims=[1]"
  ROOT n = f32[8,16] negate(s)
)"));
  EXPECT_SHARDING(p, "s", "{devices=[2,2]<=[4]}");
}

// An annotation whose only user is a manual conversion with the same
// unspecified dims is refined with it as a pair: the split of dim 1 from the
// operand enters the manual region (beside the manual axis), and the split
// of dim 2 the output asks for comes back through the exit and the entry.
TEST(ShardingPropagationTest, UnspecifiedDimsRefineThroughManualConversions) {
  auto p = Propagate(Module(R"(
  p = f32[4,6,8] parameter(0), sharding={devices=[1,2,1,4]0,2,4,6,1,3,5,7 last_tile_dim_replicate}
  x = f32[4,6,8] exponential(p)
  a = f32[4,6,8] custom-call(x), custom_call_target="Sharding", sharding={devices=[2,1,1,4]<=[8] last_tile_dim_replicate}, backend_config="unspecified_dims=[1,2]"
  m = f32[2,6,8] custom-call(a), custom_call_target="SPMDFullToShardShape", sharding={devices=[1,1,1,2,4]<=[8] last_tile_dims={manual, replicated}}, backend_config="unspecified_dims=[1,2]"
  n = f32[2,6,8] negate(m)
  b = f32[2,6,8] custom-call(n), custom_call_target="Sharding", sharding={devices=[1,1,1,2,4]<=[8] last_tile_dims={manual, replicated}}, backend_config="unspecified_dims=[1,2]"
  f = f32[4,6,8] custom-call(b), custom_call_target="SPMDShardToFullShape", sharding={devices=[2,1,1,4]<=[8] last_tile_dim_replicate}, backend_config="unspecified_dims=[1,2]"
  g = f32[4,6,8] exponential(f)
  ROOT r = f32[4,6,8] copy(g), sharding={devices=[1,1,2,4]0,1,4,5,2,3,6,7 last_tile_dim_replicate}
)",
                            8));
  // Device 4i + 2k + j holds tile (i, j, k); i is the manual axis inside.
  EXPECT_SHARDING(p, "a", "{devices=[2,2,2]0,2,1,3,4,6,5,7}");
  EXPECT_SHARDING(p, "m", "{devices=[1,2,2,2]0,4,2,6,1,5,3,7 last_tile_dims={manual}}");
  EXPECT_SHARDING(p, "b", "{devices=[1,2,2,2]0,4,2,6,1,5,3,7 last_tile_dims={manual}}");
  EXPECT_SHARDING(p, "f", "{devices=[2,2,2]0,2,1,3,4,6,5,7}");
}

// An asynchronous call of manual values is manual, start and done (XLA's
// AsyncInstructionManualSharding): its elements belong together.
TEST(ShardingPropagationTest, AsynchronousCallOfManualValuesIsManual) {
  auto p = Propagate(R"(HloModule m, num_partitions=4
pair {
  a = s32[8] parameter(0)
  b = s32[8] parameter(1)
  s = s32[8] add(a, b)
  d = s32[8] subtract(a, b)
  ROOT r = (s32[8], s32[8]) tuple(s, d)
}

ENTRY e {
  x = s32[8] parameter(0), sharding={manual}
  y = s32[8] parameter(1), sharding={manual}
  start = ((s32[8], s32[8]), (s32[8], s32[8]), u32[]) call-start(x, y), to_apply=pair
  ROOT done = (s32[8], s32[8]) call-done(start)
}
)",
                     {.allow_spmd_sharding_propagation_to_output = {true}});
  EXPECT_SHARDING(p, "start", "{{manual}, {manual}, {manual}, {manual}, {manual}}");
  EXPECT_SHARDING(p, "done", "{{manual}, {manual}}");
}

// An outfeed's (data, token) sharding: the data part reaches what it
// drains (through the tuple), the token part its token's users.
TEST(ShardingPropagationTest, OutfeedShardsItsDataAndItsToken) {
  auto p = Propagate(R"(HloModule m, num_partitions=2
ENTRY e {
  x = f32[6,4] parameter(0)
  c = f32[6,4] copy(x)
  t = (f32[6,4]) tuple(c)
  a = token[] after-all()
  o = token[] outfeed(t, a), outfeed_shape=(f32[6,4]), sharding={{devices=[2,1]0,1}, {manual}}
  y = f32[3] parameter(1)
  ROOT r = (f32[3], token[]) tuple(y, o)
}
)",
                     {.allow_spmd_sharding_propagation_to_output = {true}});
  EXPECT_SHARDING(p, "c", "{devices=[2,1]0,1}");
  EXPECT_SHARDING(p, "r", "{{replicated}, {manual}}");
}

TEST(ShardingPropagationTest, ShardingCustomCallAnnotatesItsOperand) {
  auto p = Propagate(Module(R"(
  p = f32[8,16] parameter(0)
  x = f32[8,16] exponential(p)
  s = f32[8,16] custom-call(x), custom_call_target="Sharding", sharding={devices=[4,1]<=[4]}
  ROOT n = f32[8,16] negate(s)
)"));
  EXPECT_SHARDING(p, "x", "{devices=[4,1]<=[4]}");
}

TEST(ShardingPropagationTest, ManualRegionBetweenConversions) {
  auto p = Propagate(Module(R"(
  p = f32[8,16] parameter(0), sharding={devices=[4,1]<=[4]}
  a = f32[8,16] custom-call(p), custom_call_target="Sharding", sharding={devices=[4,1]<=[4]}
  m = f32[2,16] custom-call(a), custom_call_target="SPMDFullToShardShape", sharding={manual}
  e = f32[2,16] exponential(m)
  s = f32[2,16] custom-call(e), custom_call_target="Sharding", sharding={manual}
  f = f32[8,16] custom-call(s), custom_call_target="SPMDShardToFullShape", sharding={devices=[4,1]<=[4]}
  n = f32[8,16] negate(f)
  ROOT t = (f32[8,16]) tuple(n)
)"));
  EXPECT_SHARDING(p, "e", "{manual}");
  EXPECT_SHARDING(p, "n", "{devices=[4,1]<=[4]}");
}

TEST(ShardingPropagationTest, PartialShardingsMergeInto2DTiling) {
  auto p = Propagate(Module(R"(
  p0 = f32[8,16] parameter(0), sharding={devices=[2,1,2]<=[4] last_tile_dim_replicate}
  p1 = f32[8,16] parameter(1), sharding={devices=[1,2,2]<=[2,2]T(1,0) last_tile_dim_replicate}
  a = f32[8,16] exponential(p0)
  b = f32[8,16] exponential(p1)
  x = f32[8,16] add(a, b)
  ROOT n = f32[8,16] negate(x)
)"));
  EXPECT_SHARDING(p, "x", "{devices=[2,2]<=[4]}");
}

TEST(ShardingPropagationTest, PassThroughOpsWinOverDotsByAggressiveness) {
  // At level 0 `e` reaches `x` and, backward, the dot `d`; the dot's own
  // operands only speak at level 1, and then cannot override.
  auto p = Propagate(Module(R"(
  p0 = f32[8,16] parameter(0), sharding={devices=[4,1]<=[4]}
  e = f32[8,16] exponential(p0)
  l = f32[8,8] parameter(1)
  r = f32[8,16] parameter(2), sharding={devices=[1,4]<=[4]}
  d = f32[8,16] dot(l, r), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  x = f32[8,16] add(e, d)
  ROOT n = f32[8,16] negate(x)
)"));
  EXPECT_SHARDING(p, "x", "{devices=[4,1]<=[4]}");
  EXPECT_SHARDING(p, "d", "{devices=[4,1]<=[4]}");
  const auto& decisions = p.result.decisions.at(p.Get("d"));
  ASSERT_FALSE(decisions.empty());
  EXPECT_EQ(decisions.front().level, 0);
  EXPECT_EQ(decisions.front().kind, DecisionKind::kBackward);
}

TEST(ShardingPropagationTest, UserShardingsAreNeverOverwritten) {
  auto p = Propagate(Module(R"(
  p = f32[8,16] parameter(0), sharding={devices=[4,1]<=[4]}
  x = f32[8,16] exponential(p), sharding={devices=[1,4]<=[4]}
  ROOT n = f32[8,16] negate(x)
)"));
  EXPECT_SHARDING(p, "x", "{devices=[1,4]<=[4]}");
}

constexpr const char* kTwoOutputs = R"(
  p0 = f32[8,16] parameter(0), sharding={devices=[4,1]<=[4]}
  p1 = f32[8,16] parameter(1)
  a = f32[8,16] exponential(p0)
  b = f32[8,16] exponential(p1)
  c = f32[8,16] copy(b), sharding={devices=[1,4]<=[4]}
  ROOT t = (f32[8,16], f32[8,16]) tuple(a, c)
)";

TEST(ShardingPropagationTest, AllowOutputPerElement) {
  PropagationOptions all;
  all.allow_spmd_sharding_propagation_to_output = {true};
  auto p = Propagate(Module(kTwoOutputs), all);
  EXPECT_SHARDING(p, "t", "{{devices=[4,1]<=[4]}, {devices=[1,4]<=[4]}}");

  PropagationOptions first_only;
  first_only.allow_spmd_sharding_propagation_to_output = {true, false};
  auto q = Propagate(Module(kTwoOutputs), first_only);
  EXPECT_SHARDING(q, "t", "{{devices=[4,1]<=[4]}, {replicated}}");

  auto none = Propagate(Module(kTwoOutputs));
  EXPECT_EQ(none.ShardingOf("t"), "(none)");
}

// An output split unevenly (6 rows on 4 devices) is replicated under its own
// flag, and kept under a single flag for the whole tuple, as XLA does.
TEST(ShardingPropagationTest, AnUnevenOutputIsReplicatedOnlyUnderItsOwnFlag) {
  const char* text = R"(
  p0 = f32[6,16] parameter(0), sharding={devices=[4,1]<=[4]}
  p1 = f32[8,16] parameter(1), sharding={devices=[4,1]<=[4]}
  a = f32[6,16] exponential(p0)
  b = f32[8,16] exponential(p1)
  ROOT t = (f32[6,16], f32[8,16]) tuple(a, b)
)";
  PropagationOptions each;
  each.allow_spmd_sharding_propagation_to_output = {true, true};
  auto p = Propagate(Module(text), each);
  EXPECT_SHARDING(p, "t", "{{replicated}, {devices=[4,1]<=[4]}}");
  PropagationOptions one;
  one.allow_spmd_sharding_propagation_to_output = {true};
  auto q = Propagate(Module(text), one);
  EXPECT_SHARDING(q, "t", "{{devices=[4,1]<=[4]}, {devices=[4,1]<=[4]}}");
}

TEST(ShardingPropagationTest, AllowParametersPerParameter) {
  PropagationOptions second_only;
  second_only.allow_spmd_sharding_propagation_to_parameters = {false, true};
  auto p = Propagate(Module(kTwoOutputs), second_only);
  EXPECT_SHARDING(p, "p1", "{devices=[1,4]<=[4]}");
  EXPECT_SHARDING(p, "p0", "{devices=[4,1]<=[4]}");  // the user's, kept

  // A count that is neither one per parameter nor one per element of a
  // single tuple parameter: XLA takes it and lets every parameter change.
  PropagationOptions three;
  three.allow_spmd_sharding_propagation_to_parameters = {false, true, false};
  auto q = Propagate(Module(kTwoOutputs), three);
  EXPECT_SHARDING(q, "p1", "{devices=[1,4]<=[4]}");
  EXPECT_SHARDING(q, "p0", "{devices=[4,1]<=[4]}");
}

// One flag per element of a single tuple parameter: the elements not
// allowed keep the user's sharding.
TEST(ShardingPropagationTest, AllowParametersPerElementOfOneTupleParameter) {
  const char* text = R"(
  p = (f32[8,16], f32[8,16]) parameter(0), sharding={{devices=[4,1]<=[4]}, {replicated}}
  a = f32[8,16] get-tuple-element(p), index=0
  b = f32[8,16] get-tuple-element(p), index=1
  e = f32[8,16] exponential(a)
  c = f32[8,16] copy(b), sharding={devices=[1,4]<=[4]}
  ROOT t = (f32[8,16], f32[8,16]) tuple(e, c)
)";
  PropagationOptions second;
  second.allow_spmd_sharding_propagation_to_parameters = {false, true};
  auto q = Propagate(Module(text), second);
  EXPECT_SHARDING(q, "p", "{{devices=[4,1]<=[4]}, {devices=[1,4]<=[4]}}");
  PropagationOptions first;
  first.allow_spmd_sharding_propagation_to_parameters = {true, false};
  auto r = Propagate(Module(text), first);
  EXPECT_SHARDING(r, "p", "{{devices=[4,1]<=[4]}, {replicated}}");
}

// A module with a less-than comparator `lt` on f32 and one `lt2` on
// (f32, s32) pairs for sorts.
std::string SortModule(const std::string& body) {
  return "HloModule m, num_partitions=4\n\nlt {\n  a = f32[] parameter(0)\n  b = f32[] "
         "parameter(1)\n  ROOT c = pred[] compare(a, b), direction=LT\n}\n\nlt2 {\n  a = f32[] "
         "parameter(0)\n  b = f32[] parameter(1)\n  i = s32[] parameter(2)\n  j = s32[] "
         "parameter(3)\n  ROOT c = pred[] compare(a, b), direction=LT\n}\n\nENTRY main {\n" +
         body + "}\n";
}

// As XLA: a sort takes its operand's sharding, the sort dim included when
// another dim could take the sort dim's tiles (8 % 4 == 0 here, 3 % 4 is
// not); its operands take its sharding from users, sort dim included; a
// sort of several operands gives every result the same sharding.
TEST(ShardingPropagationTest, SortKeepsItsSortDimSplitWhereAnotherDimCouldTakeTheTiles) {
  auto p = Propagate(SortModule(R"(
  p = f32[8,16] parameter(0), sharding={devices=[1,4]<=[4]}
  x = f32[8,16] copy(p)
  s = f32[8,16] sort(x), dimensions={1}, to_apply=lt
  ROOT n = f32[8,16] negate(s)
)"));
  EXPECT_SHARDING(p, "s", "{devices=[1,4]<=[4]}");

  auto q = Propagate(SortModule(R"(
  p = f32[3,16] parameter(0), sharding={devices=[1,4]<=[4]}
  x = f32[3,16] copy(p)
  s = f32[3,16] sort(x), dimensions={1}, to_apply=lt
  ROOT n = f32[3,16] negate(s)
)"));
  EXPECT_EQ(q.ShardingOf("s"), "(none)");

  auto r = Propagate(SortModule(R"(
  p = f32[8,16] parameter(0)
  x = f32[8,16] copy(p)
  s = f32[8,16] sort(x), dimensions={1}, to_apply=lt
  ROOT n = f32[8,16] negate(s), sharding={devices=[2,2]<=[4]}
)"));
  EXPECT_SHARDING(r, "s", "{devices=[2,2]<=[4]}");
  EXPECT_SHARDING(r, "x", "{devices=[2,2]<=[4]}");

  auto t = Propagate(SortModule(R"(
  p = f32[8,16] parameter(0), sharding={devices=[4,1]<=[4]}
  k = f32[8,16] copy(p)
  i = s32[8,16] iota(), iota_dimension=1
  s = (f32[8,16], s32[8,16]) sort(k, i), dimensions={1}, to_apply=lt2
  v = s32[8,16] get-tuple-element(s), index=1
  ROOT n = s32[8,16] negate(v)
)"));
  EXPECT_SHARDING(t, "s", "{{devices=[4,1]<=[4]}, {devices=[4,1]<=[4]}}");
  EXPECT_SHARDING(t, "v", "{devices=[4,1]<=[4]}");
}

// A sharding an earlier propagation marked as CSE prevention (XLA's
// metadata op_name) is decided afresh; an annotation is kept.
TEST(ShardingPropagationTest, ACsePreventionShardingIsDecidedAfresh) {
  auto p = Propagate(Module(R"(
  p = f32[8,16] parameter(0), sharding={devices=[4,1]<=[4]}
  b = f32[8,16] broadcast(p), dimensions={0,1}, sharding={replicated metadata={op_name="_sharding_propagation_cse_prevention"}}
  c = f32[8,16] broadcast(p), dimensions={0,1}, sharding={replicated metadata={op_name="user"}}
  ROOT t = (f32[8,16], f32[8,16]) tuple(b, c)
)"));
  EXPECT_SHARDING(p, "b", "{devices=[4,1]<=[4]}");
  EXPECT_SHARDING(p, "c", "{replicated}");
}

// A manual value spreads through tuple, get-tuple-element and a while's
// state, body included, as in XLA (manual counts as spatially partitioned).
TEST(ShardingPropagationTest, ManualShardingPassesThroughTuplesAndWhile) {
  auto p = Propagate(R"(HloModule m, num_partitions=2

cond {
  s = (s32[], f32[7,128]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  k = s32[] constant(3)
  ROOT lt = pred[] compare(i, k), direction=LT
}

body {
  s = (s32[], f32[7,128]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  one = s32[] constant(1)
  i2 = s32[] add(i, one)
  x = f32[7,128] get-tuple-element(s), index=1
  y = f32[7,128] negate(x)
  ROOT t = (s32[], f32[7,128]) tuple(i2, y)
}

ENTRY e {
  p = f32[14,128] parameter(0)
  a = f32[14,128] custom-call(p), custom_call_target="Sharding", sharding={devices=[2,1]0,1}
  m = f32[7,128] custom-call(a), custom_call_target="SPMDFullToShardShape", sharding={manual}
  one = (f32[7,128]) tuple(m)
  g = f32[7,128] get-tuple-element(one), index=0
  z = s32[] constant(0), sharding={manual}
  t0 = (s32[], f32[7,128]) tuple(z, g)
  w = (s32[], f32[7,128]) while(t0), condition=cond, body=body
  r = f32[7,128] get-tuple-element(w), index=1
  f = f32[14,128] custom-call(r), custom_call_target="SPMDShardToFullShape", sharding={devices=[2,1]0,1}
  ROOT o = f32[14,128] copy(f)
}
)");
  ASSERT_TRUE(p.Get("one")->has_sharding());
  EXPECT_TRUE(p.Get("one")->sharding()->IsManual()) << p.ShardingOf("one");
  EXPECT_SHARDING(p, "g", "{manual}");
  EXPECT_SHARDING(p, "w", "{{manual}, {manual}}");
  EXPECT_SHARDING(p, "r", "{manual}");
  EXPECT_SHARDING(p, "y", "{manual}");
}

TEST(ShardingPropagationTest, ReplicateUnshardedFillsEverything) {
  PropagationOptions options;
  options.replicate_unsharded = true;
  auto p = Propagate(Module(kTwoOutputs), options);
  for (const HloInstruction* i : p.module->entry_computation()->instructions()) {
    EXPECT_TRUE(i->has_sharding()) << i->name();
  }
  EXPECT_SHARDING(p, "p1", "{replicated}");
}

}  // namespace
}  // namespace weft
