#include "weft/spmd/spmd_partitioner.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "partitioner_test_util.h"
#include "sharded_run_test_util.h"

namespace weft::spmd_test {
namespace {

const char* kAdd = R"(
add {
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  ROOT s = f32[] add(x, y)
}
)";

std::string WithAdd(const std::string& body) { return std::string("HloModule m\n") + kAdd + body; }

TEST(SpmdPartitionerTest, ElementwiseReshardsOperandsToTheResult) {
  auto m = ExpectShardedEqualsUnsharded(WithAdd(R"(
ENTRY main {
  a = f32[8,6] parameter(0), sharding={devices=[4,1]<=[4]}
  b = f32[8,6] parameter(1), sharding={replicated}
  m = f32[8,6] multiply(a, b), sharding={devices=[4,1]<=[4]}
  e = f32[8,6] exponential(m), sharding={devices=[4,1]<=[4]}
  c = pred[8,6] compare(e, b), direction=LT, sharding={devices=[4,1]<=[4]}
  ROOT s = f32[8,6] select(c, e, m), sharding={devices=[4,1]<=[4]}
}
)"),
                                        4);
  EXPECT_EQ(CountCollectives(*m), 0);
  EXPECT_EQ(FindNamed(*m, "m")->shape(), ParseShape("f32[2,6]"));
  EXPECT_EQ(m->num_partitions(), 4);
}

TEST(SpmdPartitionerTest, EntryKeepsParameterAndRootShardings) {
  auto m = ExpectShardedEqualsUnsharded(WithAdd(R"(
ENTRY main {
  a = f32[8] parameter(0), sharding={devices=[2]0,1}
  ROOT n = f32[8] negate(a), sharding={replicated}
}
)"),
                                        2);
  EXPECT_EQ(FindNamed(*m, "a")->sharding()->ToString(), "{devices=[2]0,1}");
  EXPECT_TRUE(m->entry_computation()->root_instruction()->sharding()->IsReplicated());
  EXPECT_EQ(FindAll(*m, HloOpcode::kAllGather).size(), 1u);
}

TEST(SpmdPartitionerTest, BroadcastTransposeReshapeStayLocal) {
  auto m = ExpectShardedEqualsUnsharded(WithAdd(R"(
ENTRY main {
  a = f32[8,6] parameter(0), sharding={devices=[2,2]<=[4]}
  b = f32[3,8,6] broadcast(a), dimensions={1,2}, sharding={devices=[1,2,2]<=[4]}
  t = f32[6,3,8] transpose(b), dimensions={2,0,1}, sharding={devices=[2,1,2]<=[2,2]T(1,0)}
  ROOT r = f32[6,24] reshape(t), sharding={devices=[2,1,2]<=[2,2]T(1,0) last_tile_dim_replicate}
}
)"),
                                        4);
  EXPECT_EQ(FindNamed(*m, "b")->shape(), ParseShape("f32[3,4,3]"));
  EXPECT_EQ(FindNamed(*m, "t")->shape(), ParseShape("f32[3,3,4]"));
}

// XLA's host offloading moves each device's piece (its
// PartitionOffloading): the move to the host takes the parameter's tile as
// it is, and each move runs on the tile of its sharding.
TEST(SpmdPartitionerTest, MemorySpaceMovesArePartitionedElementwise) {
  auto m = ExpectShardedEqualsUnsharded(WithAdd(R"(
ENTRY main {
  a = f32[8,6] parameter(0), sharding={devices=[4,1]<=[4]}
  h = f32[8,6] custom-call(a), custom_call_target="MoveToHost", sharding={devices=[4,1]<=[4]}
  n = f32[8,6] negate(h), sharding={devices=[4,1]<=[4]}
  ROOT d = f32[8,6] custom-call(n), custom_call_target="MoveToDevice", sharding={devices=[1,2,2]<=[4] last_tile_dim_replicate}
}
)"),
                                        4);
  EXPECT_EQ(FindNamed(*m, "h")->shape(), ParseShape("f32[2,6]"));
  EXPECT_EQ(FindNamed(*m, "d")->shape(), ParseShape("f32[8,3]"));
  EXPECT_EQ(FindNamed(*m, "h")->operand(0)->opcode(), HloOpcode::kParameter);
}

TEST(SpmdPartitionerTest, ReshapeSplittingAShardedDim) {
  auto m = ExpectShardedEqualsUnsharded(WithAdd(R"(
ENTRY main {
  a = f32[16,3] parameter(0), sharding={devices=[4,1]<=[4]}
  ROOT r = f32[4,4,3] reshape(a), sharding={devices=[4,1,1]<=[4]}
}
)"),
                                        4);
  EXPECT_EQ(CountCollectives(*m), 0);
  EXPECT_EQ(FindNamed(*m, "r")->shape(), ParseShape("f32[1,4,3]"));
  // Incompatible: the minor dim is split but the reshape merges it.
  ExpectShardedEqualsUnsharded(WithAdd(R"(
ENTRY main {
  a = f32[4,6] parameter(0), sharding={devices=[1,2]<=[2]}
  ROOT r = f32[24] reshape(a), sharding={devices=[2]<=[2]}
}
)"),
                               2);
}

TEST(SpmdPartitionerTest, ReduceOverAShardedDimAllReduces) {
  auto m = ExpectShardedEqualsUnsharded(WithAdd(R"(
ENTRY main {
  a = f32[8,6] parameter(0), sharding={devices=[2,2]<=[4]}
  z = f32[] constant(0)
  ROOT r = f32[6] reduce(a, z), dimensions={0}, to_apply=add, sharding={devices=[2,2]<=[4] last_tile_dim_replicate}
}
)"),
                                        4);
  auto reduces = FindAll(*m, HloOpcode::kAllReduce);
  ASSERT_EQ(reduces.size(), 1u);
  EXPECT_EQ(reduces[0]->attrs().replica_groups,
            (std::vector<std::vector<int64_t>>{{0, 2}, {1, 3}}));
}

TEST(SpmdPartitionerTest, UnevenReduceMasksPaddingWithTheInit) {
  // max over 7 rows split 4 ways: padded rows must not win (init -inf).
  auto m = ExpectShardedEqualsUnsharded(R"(
HloModule m
max {
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  ROOT s = f32[] maximum(x, y)
}
ENTRY main {
  a = f32[7,5] parameter(0), sharding={devices=[4,1]<=[4]}
  z = f32[] constant(-inf)
  ROOT r = f32[5] reduce(a, z), dimensions={0}, to_apply=max, sharding={replicated}
}
)",
                                        4);
  EXPECT_EQ(FindAll(*m, HloOpcode::kSelect).size(), 1u);
  ASSERT_EQ(FindAll(*m, HloOpcode::kAllReduce).size(), 1u);
  EXPECT_EQ(FindAll(*m, HloOpcode::kAllReduce)[0]->to_apply()->root_instruction()->opcode(),
            HloOpcode::kMaximum);
}

TEST(SpmdPartitionerTest, SlicePadConcatenateReverseOnShardedDims) {
  ExpectShardedEqualsUnsharded(WithAdd(R"(
ENTRY main {
  a = f32[8,6] parameter(0), sharding={devices=[2,2]<=[4]}
  s = f32[5,6] slice(a), slice={[1:6], [0:6]}, sharding={devices=[2,2]<=[4]}
  z = f32[] constant(0.5)
  p = f32[7,9] pad(s, z), padding=1_1x2_1, sharding={devices=[2,2]<=[4]}
  c = f32[21,9] concatenate(p, p, p), dimensions={0}, sharding={devices=[4,1]<=[4]}
  ROOT r = f32[21,9] reverse(c), dimensions={0}, sharding={devices=[1,4]<=[4]}
}
)"),
                               4);
}

TEST(SpmdPartitionerTest, SliceOfAnUnshardedDimStaysLocal) {
  auto m = ExpectShardedEqualsUnsharded(WithAdd(R"(
ENTRY main {
  a = f32[8,6] parameter(0), sharding={devices=[4,1]<=[4]}
  ROOT s = f32[8,3] slice(a), slice={[0:8], [1:6:2]}, sharding={devices=[4,1]<=[4]}
}
)"),
                                        4);
  EXPECT_EQ(CountCollectives(*m), 0);
}

TEST(SpmdPartitionerTest, IotaAndConstantTakeTheDevicesPiece) {
  auto m = ExpectShardedEqualsUnsharded(WithAdd(R"(
ENTRY main {
  i = f32[7,3] iota(), iota_dimension=0, sharding={devices=[4,1]<=[4]}
  c = f32[7,3] constant({{1,2,3},{4,5,6},{7,8,9},{10,11,12},{13,14,15},{16,17,18},{19,20,21}}), sharding={devices=[4,1]<=[4]}
  ROOT a = f32[7,3] add(i, c), sharding={devices=[4,1]<=[4]}
}
)"),
                                        4);
  EXPECT_EQ(CountCollectives(*m), 0);
  EXPECT_EQ(FindNamed(*m, "i")->shape(), ParseShape("f32[2,3]"));
}

TEST(SpmdPartitionerTest, DynamicSliceOfAStackedBufferKeepsOtherDimsSharded) {
  // The scan case: layer i of weights [L, H, E] split on H and E.
  auto m = ExpectShardedEqualsUnsharded(WithAdd(R"(
ENTRY main {
  w = f32[3,8,6] parameter(0), sharding={devices=[1,2,2]<=[4]}
  i = s32[] constant(2)
  z = s32[] constant(0)
  ROOT l = f32[1,8,6] dynamic-slice(w, i, z, z), dynamic_slice_sizes={1,8,6}, sharding={devices=[1,2,2]<=[4]}
}
)"),
                                        4);
  EXPECT_EQ(CountCollectives(*m), 0);
  EXPECT_EQ(FindNamed(*m, "l")->shape(), ParseShape("f32[1,4,3]"));
}

TEST(SpmdPartitionerTest, DynamicSliceOnAShardedDimGathersIt) {
  ExpectShardedEqualsUnsharded(WithAdd(R"(
ENTRY main {
  w = f32[8,6] parameter(0), sharding={devices=[4,1]<=[4]}
  i = s32[] constant(3)
  z = s32[] constant(0)
  ROOT l = f32[2,6] dynamic-slice(w, i, z), dynamic_slice_sizes={2,6}, sharding={devices=[2,1,2]<=[4] last_tile_dim_replicate}
}
)"),
                               4);
}

TEST(SpmdPartitionerTest, DynamicUpdateSliceIntoAStackedBuffer) {
  auto m = ExpectShardedEqualsUnsharded(WithAdd(R"(
ENTRY main {
  w = f32[3,8,6] parameter(0), sharding={devices=[1,2,2]<=[4]}
  u = f32[1,8,6] parameter(1), sharding={devices=[1,2,2]<=[4]}
  i = s32[] constant(1)
  z = s32[] constant(0)
  ROOT l = f32[3,8,6] dynamic-update-slice(w, u, i, z, z), sharding={devices=[1,2,2]<=[4]}
}
)"),
                                        4);
  EXPECT_EQ(CountCollectives(*m), 0);
}

TEST(SpmdPartitionerTest, WhileLoopIsPartitionedInsideItsBody) {
  // A scan: carry (i, x, stacked weights); x = x * w[i] each step.
  const std::string text = WithAdd(R"(
cond {
  c = (s32[], f32[8,6], f32[3,8,6]) parameter(0), sharding={{replicated}, {devices=[4,1]<=[4]}, {devices=[1,4,1]<=[4]}}
  i = s32[] get-tuple-element(c), index=0, sharding={replicated}
  n = s32[] constant(3), sharding={replicated}
  ROOT lt = pred[] compare(i, n), direction=LT, sharding={replicated}
}
body {
  c = (s32[], f32[8,6], f32[3,8,6]) parameter(0), sharding={{replicated}, {devices=[4,1]<=[4]}, {devices=[1,4,1]<=[4]}}
  i = s32[] get-tuple-element(c), index=0, sharding={replicated}
  x = f32[8,6] get-tuple-element(c), index=1, sharding={devices=[4,1]<=[4]}
  w = f32[3,8,6] get-tuple-element(c), index=2, sharding={devices=[1,4,1]<=[4]}
  z = s32[] constant(0), sharding={replicated}
  l = f32[1,8,6] dynamic-slice(w, i, z, z), dynamic_slice_sizes={1,8,6}, sharding={devices=[1,4,1]<=[4]}
  r = f32[8,6] reshape(l), sharding={devices=[4,1]<=[4]}
  y = f32[8,6] multiply(x, r), sharding={devices=[4,1]<=[4]}
  one = s32[] constant(1), sharding={replicated}
  j = s32[] add(i, one), sharding={replicated}
  ROOT t = (s32[], f32[8,6], f32[3,8,6]) tuple(j, y, w), sharding={{replicated}, {devices=[4,1]<=[4]}, {devices=[1,4,1]<=[4]}}
}
ENTRY main {
  x = f32[8,6] parameter(0), sharding={devices=[4,1]<=[4]}
  w = f32[3,8,6] parameter(1), sharding={devices=[1,4,1]<=[4]}
  z = s32[] constant(0), sharding={replicated}
  t = (s32[], f32[8,6], f32[3,8,6]) tuple(z, x, w), sharding={{replicated}, {devices=[4,1]<=[4]}, {devices=[1,4,1]<=[4]}}
  loop = (s32[], f32[8,6], f32[3,8,6]) while(t), condition=cond, body=body, sharding={{replicated}, {devices=[4,1]<=[4]}, {devices=[1,4,1]<=[4]}}
  ROOT out = f32[8,6] get-tuple-element(loop), index=1, sharding={devices=[4,1]<=[4]}
}
)");
  auto m = ExpectShardedEqualsUnsharded(text, 4);
  EXPECT_EQ(CountCollectives(*m), 0);
  EXPECT_EQ(FindNamed(*m, "loop")->shape(), ParseShape("(s32[], f32[2,6], f32[3,2,6])"));
}

// conditional: each branch is partitioned as its own computation (its
// parameter as propagation shards it, its root to the conditional's
// sharding), the selector replicated. Both branches run (two conditionals
// on p and not p), on 2-8 devices with uneven rows, partial replication and
// an odd device order; the per-device program keeps the rows split.
TEST(SpmdPartitionerTest, ConditionalBranchesArePartitionedAndAgreeWithTheUnshardedRun) {
  struct Case {
    int64_t n;
    std::string sharding;  // of x and y, f32[10, .]
    int64_t rows, cols;    // of y per device
  };
  const std::vector<Case> cases = {
      {2, "{devices=[2,1]<=[2]}", 5, 4},
      {3, "{devices=[3,1]<=[3]}", 4, 4},
      {4, "{devices=[2,2]0,2,1,3}", 5, 2},
      {8, "{devices=[4,1,2]<=[8] last_tile_dim_replicate}", 3, 4},
  };
  for (const Case& c : cases) {
    for (uint64_t seed : {1, 2, 3}) {
      SCOPED_TRACE(fmt::format("n={} {} seed {}", c.n, c.sharding, seed));
      const std::string text = fmt::format(R"(HloModule cond
add {{
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}}
on_true {{
  t = (f32[10,6], f32[6,4]) parameter(0)
  x = f32[10,6] get-tuple-element(t), index=0
  w = f32[6,4] get-tuple-element(t), index=1
  d = f32[10,4] dot(x, w), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
  ROOT r = f32[10,4] tanh(d)
}}
on_false {{
  y = f32[10,4] parameter(0)
  z = f32[] constant(0)
  s = f32[10] reduce(y, z), dimensions={{1}}, to_apply=add
  sb = f32[10,4] broadcast(s), dimensions={{0}}
  ROOT r = f32[10,4] subtract(y, sb)
}}
ENTRY e {{
  x = f32[10,6] parameter(0), sharding={0}
  w = f32[6,4] parameter(1), sharding={{replicated}}
  y = f32[10,4] parameter(2), sharding={0}
  p = pred[] parameter(3)
  t = (f32[10,6], f32[6,4]) tuple(x, w)
  c1 = f32[10,4] conditional(p, t, y), true_computation=on_true, false_computation=on_false
  q = pred[] not(p)
  c2 = f32[10,4] conditional(q, t, y), true_computation=on_true, false_computation=on_false
  ROOT r = (f32[10,4], f32[10,4]) tuple(c1, c2)
}}
)",
                                           c.sharding);
      const compiler::CompiledProgram program =
          testing::ExpectShardedMatches(text, c.n, seed, 1e-6);
      int conditionals = 0;
      for (const HloInstruction* i : program.program->entry_computation()->instructions()) {
        if (i->opcode() != HloOpcode::kConditional) continue;
        ++conditionals;
        EXPECT_EQ(i->operand(2)->shape().dimensions(), (std::vector<int64_t>{c.rows, c.cols}));
        EXPECT_EQ(i->shape().dimensions(0), c.rows) << "the result stays split";
      }
      EXPECT_EQ(conditionals, 2);
    }
  }
}

// branch_computations with the index drawn over [-2, N+1] (out of range
// runs the last branch); a branch whose parameter is annotated otherwise
// than its argument gets the argument resharded, and a branch that
// reduces over the split dim all-reduces inside the branch.
TEST(SpmdPartitionerTest, ConditionalOnABranchIndexReshardsArgumentsToTheBranches) {
  for (int64_t n : {2, 4, 8}) {
    for (uint64_t seed : {1, 2, 3, 4}) {
      SCOPED_TRACE(fmt::format("n={} seed {}", n, seed));
      const std::string text = fmt::format(R"(HloModule cond_index
add {{
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}}
b0 {{
  x = f32[12,5] parameter(0), sharding={{devices=[1,{0}]<=[{0}]}}
  ROOT e = f32[12,5] exponential(x)
}}
b1 {{
  x = f32[12,5] parameter(0)
  z = f32[] constant(0)
  s = f32[5] reduce(x, z), dimensions={{0}}, to_apply=add
  ROOT b = f32[12,5] broadcast(s), dimensions={{1}}
}}
b2 {{
  ROOT x = f32[12,5] parameter(0)
}}
ENTRY e {{
  i = s32[] parameter(0)
  x = f32[12,5] parameter(1), sharding={{devices=[{0},1]<=[{0}]}}
  c = f32[12,5] conditional(i, x, x, x), branch_computations={{b0, b1, b2}}, sharding={{devices=[{0},1]<=[{0}]}}
  one = s32[] constant(1)
  d = f32[12,5] conditional(one, x, x, x), branch_computations={{b0, b1, b2}}
  ROOT r = (f32[12,5], f32[12,5]) tuple(c, d)
}}
)",
                                           n);
      testing::ExpectShardedMatches(text, n, seed, 1e-6);
    }
  }
}

// rng-bit-generator and rng run replicated (every device draws the whole
// value from the same state or key and keeps its piece), so a sharded run
// gives the unsharded bits; the results feed sharded elementwise ops.
TEST(SpmdPartitionerTest, RandomNumbersAreTheUnshardedOnesOnEveryMesh) {
  for (int64_t n : {2, 3, 4, 8}) {
    for (const char* algorithm : {"rng_philox", "rng_three_fry", "rng_default"}) {
      SCOPED_TRACE(fmt::format("n={} {}", n, algorithm));
      const std::string text = fmt::format(R"(HloModule rng
ENTRY e {{
  s = u64[2] parameter(0)
  x = f32[12,5] parameter(1), sharding={{devices=[{0},1]<=[{0}]}}
  g = (u64[2], u32[12,5]) rng-bit-generator(s), algorithm={1}, sharding={{{{replicated}}, {{devices=[{0},1]<=[{0}]}}}}
  bits = u32[12,5] get-tuple-element(g), index=1
  f = f32[12,5] convert(bits)
  y = f32[12,5] add(f, x), sharding={{devices=[{0},1]<=[{0}]}}
  lo = f32[] constant(-1)
  hi = f32[] constant(1)
  u = f32[12,5] rng(lo, hi), distribution=rng_uniform, sharding={{devices=[1,{0}]<=[{0}]}}
  z = f32[12,5] multiply(u, x)
  ns = u64[2] get-tuple-element(g), index=0
  ROOT r = (u32[12,5], f32[12,5], f32[12,5], u64[2]) tuple(bits, y, z, ns)
}}
)",
                                           n, algorithm);
      testing::ExpectShardedMatches(text, n, 7);
    }
  }
}

TEST(SpmdPartitionerTest, ErrorsNameTheInstruction) {
  auto module = ParseHloModule(R"(
HloModule m
ENTRY main {
  a = f32[8] parameter(0), sharding={devices=[2]0,1}
  ROOT n = f32[8] negate(a), sharding={devices=[4]<=[4]}
}
)");
  try {
    PartitionModule(*module);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'a'"), std::string::npos) << e.what();
  }
}

TEST(SpmdPartitionerTest, AlreadyPartitionedModulesAreRejected) {
  auto module = ParseHloModule(R"(
HloModule m
ENTRY main {
  a = f32[8] parameter(0)
  ROOT r = f32[16] all-gather(a), dimensions={0}, replica_groups={{0,1}}, channel_id=1
}
)");
  EXPECT_THROW(PartitionModule(*module), Error);
}

// XLA's rules for an all-reduce outside manual regions (its TiledAllReduce
// and AllReduceNoSharding): without a channel_id it sums across replicas,
// the identity in a module of one replica, so each device keeps its tile;
// with one it sums whole values across partitions, so only a replicated
// value may enter it, and a tiled one is refused by name.
// An outfeed drains each device's tile of its data, as XLA's does, under a
// sharding of the data alone or of (data, token); an unevenly tiled leaf is
// refused by name (XLA outfeeds its unpadded pieces).
TEST(SpmdPartitionerTest, OutfeedsEachDevicesTile) {
  auto outfeed = [](const std::string& data, const std::string& sharding,
                    const std::string& data_sharding) {
    return ParseHloModule(R"(HloModule m
ENTRY main {
  p = )" + data + R"( parameter(0), sharding=)" +
                          data_sharding + R"(
  a = token[] after-all()
  ROOT o = token[] outfeed(p, a), outfeed_shape=)" +
                          data + R"(, sharding=)" + sharding + R"(
}
)");
  };
  PartitionOptions options;
  options.num_partitions = 2;
  for (const char* sharding :
       {"{{devices=[2,1]0,1}, {replicated}}", "{{devices=[2,1]0,1}, {replicated}, {replicated}}"}) {
    SCOPED_TRACE(sharding);
    auto m = PartitionModule(
        *outfeed("(f32[8,2], f32[3])", sharding, "{{devices=[2,1]0,1}, {replicated}}"), options);
    const HloInstruction* root = m->entry_computation()->root_instruction();
    ASSERT_EQ(root->opcode(), HloOpcode::kOutfeed);
    EXPECT_EQ(root->operand(0)->opcode(), HloOpcode::kParameter);
    EXPECT_EQ(root->operand(0)->shape(), ParseShape("(f32[4,2], f32[3])"));
    EXPECT_EQ(CountCollectives(*m), 0);
    EXPECT_NE(PrintModule(*m).find("outfeed_shape=(f32[4,2], f32[3])"), std::string::npos);
  }
  auto array = PartitionModule(*outfeed("f32[8]", "{devices=[2]0,1}", "{devices=[2]0,1}"), options);
  EXPECT_EQ(array->entry_computation()->root_instruction()->operand(0)->shape(),
            ParseShape("f32[4]"));
  // An uneven tile: each device outfeeds its unpadded piece, through a
  // conditional on partition-id with a branch per extent (4 and 3).
  auto uneven =
      PartitionModule(*outfeed("f32[7]", "{devices=[2]0,1}", "{devices=[2]0,1}"), options);
  const HloInstruction* cond = uneven->entry_computation()->root_instruction();
  ASSERT_EQ(cond->opcode(), HloOpcode::kConditional);
  ASSERT_EQ(cond->called_computations().size(), 2u);
  for (int k = 0; k < 2; ++k) {
    const HloInstruction* out = cond->called_computations()[k]->root_instruction();
    ASSERT_EQ(out->opcode(), HloOpcode::kOutfeed);
    EXPECT_EQ(out->operand(0)->shape(), ParseShape(k == 0 ? "f32[4]" : "f32[3]"));
  }
}

// infeed: each device infeeds its own tile, as XLA does; an uneven tile its
// unpadded piece, padded (a branch per extent); a manual leaf as written.
TEST(SpmdPartitionerTest, InfeedsEachDevicesTile) {
  auto infeed = [](const std::string& data, const std::string& sharding) {
    return ParseHloModule(R"(HloModule m
ENTRY main {
  t = token[] after-all()
  i = ()" + data + R"(, token[]) infeed(t), sharding=)" +
                          sharding + R"(
  ROOT d = )" + data + R"( get-tuple-element(i), index=0, sharding=)" +
                          sharding.substr(1, sharding.find('}')) + R"(
}
)");
  };
  PartitionOptions options;
  options.num_partitions = 2;
  auto even =
      PartitionModule(*infeed("f32[8,2]", "{{devices=[2,1]0,1}, {maximal device=0}}"), options);
  EXPECT_EQ(CountCollectives(*even), 0);
  const std::vector<const HloInstruction*> fed = FindAll(*even, HloOpcode::kInfeed);
  ASSERT_EQ(fed.size(), 1u);
  EXPECT_EQ(fed[0]->shape(), ParseShape("(f32[4,2], token[])"));

  auto uneven =
      PartitionModule(*infeed("f32[9,2]", "{{devices=[2,1]0,1}, {maximal device=0}}"), options);
  const HloInstruction* root = uneven->entry_computation()->root_instruction();
  EXPECT_EQ(root->shape(), ParseShape("f32[5,2]"));
  ASSERT_EQ(root->operand(0)->opcode(), HloOpcode::kConditional);
  std::vector<std::string> pieces;
  for (const HloComputation* branch : root->operand(0)->called_computations()) {
    EXPECT_EQ(branch->root_instruction()->shape(), ParseShape("(f32[5,2], token[])"));
    for (const HloInstruction* i : branch->instructions()) {
      if (i->opcode() == HloOpcode::kInfeed) pieces.push_back(i->shape().ToString());
    }
  }
  EXPECT_EQ(pieces, (std::vector<std::string>{"(f32[5,2], token[])", "(f32[4,2], token[])"}));

  auto manual = PartitionModule(*infeed("f32[6]", "{{manual}, {maximal device=0}}"), options);
  EXPECT_EQ(FindAll(*manual, HloOpcode::kInfeed).at(0)->shape(), ParseShape("(f32[6], token[])"));
}

// Unreduced axes: devices hold addends of a value (XLA's and Shardy's
// unreduced shardings). Parameters and results keep them; linear
// elementwise ops work on the addends; other ops get the sum first; a value
// wanted as addends stays on the first device of each group.
TEST(SpmdPartitionerTest, UnreducedValuesAreAddends) {
  const char* kLinear = R"(
HloModule linear
ENTRY main {
  a = f32[4,6] parameter(0), sharding={unreduced}
  b = f32[4,6] parameter(1), sharding={unreduced}
  s = f32[4,6] subtract(a, b), sharding={unreduced}
  n = f32[4,6] negate(s), sharding={unreduced}
  ROOT c = f32[4,6] add(n, a), sharding={unreduced}
}
)";
  auto linear = ExpectShardedEqualsUnsharded(kLinear, 4);
  EXPECT_EQ(CountCollectives(*linear), 0);
  for (const HloInstruction* param : linear->entry_computation()->parameter_instructions()) {
    EXPECT_EQ(param->sharding()->ToString(), "{unreduced}");
  }
  EXPECT_EQ(linear->entry_computation()->root_instruction()->sharding()->ToString(), "{unreduced}");

  // A product is not linear in both: the addends are summed first (over
  // each pair of the subgroup), then the result made addends again.
  auto product = ExpectShardedEqualsUnsharded(R"(
HloModule product
ENTRY main {
  a = f32[4,6] parameter(0), sharding={devices=[2,1,2]<=[4] last_tile_dims={unreduced}}
  b = f32[4,6] parameter(1), sharding={devices=[2,1,2]<=[4] last_tile_dims={unreduced}}
  ROOT m = f32[4,6] multiply(a, b), sharding={devices=[2,1,2]<=[4] last_tile_dims={unreduced}}
}
)",
                                              4);
  EXPECT_EQ(FindAll(*product, HloOpcode::kAllReduce).size(), 2u);

  // Used where no addends are wanted: summed. Integers split in quotients.
  auto summed = ExpectShardedEqualsUnsharded(R"(
HloModule summed
ENTRY main {
  a = s32[5,4] parameter(0), sharding={devices=[1,2,2]<=[4] last_tile_dims={unreduced}}
  b = s32[5,4] parameter(1), sharding={devices=[2,1,2]<=[4] last_tile_dim_replicate}
  ROOT e = s32[5,4] multiply(a, b), sharding={devices=[2,1,2]<=[4] last_tile_dim_replicate}
}
)",
                                             4);
  EXPECT_FALSE(FindAll(*summed, HloOpcode::kAllReduce).empty());

  // A whole value (a constant on one device, a tiled parameter) made into
  // addends, then a non-linear op wanted as addends.
  ExpectShardedEqualsUnsharded(R"(
HloModule populate
ENTRY main {
  k = f32[2,4] constant({{1,2,3,4},{5,6,7,8}}), sharding={maximal device=1}
  a = f32[2,4] parameter(0), sharding={devices=[1,2]0,1}
  s = f32[2,4] add(k, a), sharding={unreduced}
  ROOT x = f32[2,4] exponential(s), sharding={unreduced}
}
)",
                               2);

  // An add-reduce over a split dim: its local sums are the addends.
  auto reduce = ExpectShardedEqualsUnsharded(WithAdd(R"(
ENTRY main {
  p = f32[6,10] parameter(0), sharding={devices=[1,2]0,1}
  z = f32[] constant(0)
  ROOT r = f32[6] reduce(p, z), dimensions={1}, to_apply=add, sharding={unreduced}
}
)"),
                                             2);
  EXPECT_EQ(CountCollectives(*reduce), 0);
}

TEST(SpmdPartitionerTest, UnreducedAndManualAxesTogetherAreRefused) {
  auto m = ParseHloModule(R"(HloModule m
ENTRY main {
  p = f32[4,4] parameter(0), sharding={devices=[1,1,2,2]<=[4] last_tile_dims={manual, unreduced}}
  ROOT c = f32[4,4] copy(p), sharding={devices=[1,1,2,2]<=[4] last_tile_dims={manual, unreduced}}
}
)");
  PartitionOptions options;
  options.num_partitions = 4;
  try {
    PartitionModule(*m, options);
    ADD_FAILURE() << "manual and unreduced axes together were accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("both manual and unreduced"), std::string::npos)
        << e.what();
  }
}

TEST(SpmdPartitionerTest, AllReducesOutsideManualRegionsFollowXlasRules) {
  auto cross_replica = ExpectShardedEqualsUnsharded(WithAdd(R"(
ENTRY main {
  a = f32[6,4] parameter(0), sharding={devices=[2,1]0,1}
  r = f32[6,4] all-reduce(a), to_apply=add, replica_groups={}, sharding={devices=[2,1]0,1}
  ROOT n = f32[6,4] negate(r), sharding={devices=[2,1]0,1}
}
)"),
                                                    2);
  EXPECT_EQ(CountCollectives(*cross_replica), 0);
  EXPECT_EQ(FindNamed(*cross_replica, "n")->shape(), ParseShape("f32[3,4]"));

  auto module = ParseHloModule(WithAdd(R"(
ENTRY main {
  a = f32[4,4] parameter(0), sharding={devices=[2,2]<=[4]}
  ROOT r = f32[4,4] all-reduce(a), to_apply=add, replica_groups={{0,1,2,3}}, use_global_device_ids=true, channel_id=1, sharding={replicated}
}
)"));
  auto partitioned = PartitionModule(*module);
  const HloInstruction* root = partitioned->entry_computation()->root_instruction();
  EXPECT_EQ(root->opcode(), HloOpcode::kAllReduce);
  EXPECT_EQ(root->shape(), ParseShape("f32[4,4]"));
  EXPECT_EQ(root->attrs().replica_groups, (std::vector<std::vector<int64_t>>{{0, 1, 2, 3}}));

  auto tiled = ParseHloModule(WithAdd(R"(
ENTRY main {
  a = f32[4,4] parameter(0), sharding={devices=[2,2]<=[4]}
  ROOT r = f32[4,4] all-reduce(a), to_apply=add, replica_groups={{0,1,2,3}}, use_global_device_ids=true, channel_id=1, sharding={devices=[2,2]<=[4]}
}
)"));
  try {
    PartitionModule(*tiled);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("must be replicated"), std::string::npos) << e.what();
  }
}

// Asynchronous calls are parsed and propagated, not partitioned: refused by
// name, with what to give instead.
TEST(SpmdPartitionerTest, AsynchronousCallsAreRefusedByName) {
  auto module = ParseHloModule(R"(
HloModule m
neg {
  p = f32[8] parameter(0)
  ROOT n = f32[8] negate(p)
}

ENTRY main {
  a = f32[8] parameter(0), sharding={devices=[2]0,1}
  start = ((f32[8]), f32[8], u32[]) call-start(a), to_apply=neg
  ROOT done = f32[8] call-done(start)
}
)");
  try {
    PartitionModule(*module);
    FAIL() << "partitioned an asynchronous call";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'start' (call-start)"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("plain call"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace weft::spmd_test
