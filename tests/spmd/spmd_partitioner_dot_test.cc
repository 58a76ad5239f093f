#include <fmt/format.h>
#include <gtest/gtest.h>

#include "partitioner_random.h"
#include "partitioner_test_util.h"

namespace weft::spmd_test {
namespace {

std::unique_ptr<HloModule> Dot(const std::string& lhs, const std::string& rhs,
                               const std::string& out, const std::string& dnums,
                               const std::string& ls, const std::string& rs, const std::string& os,
                               int64_t n) {
  return ExpectShardedEqualsUnsharded(fmt::format(R"(
HloModule dot
ENTRY main {{
  a = {} parameter(0), sharding={}
  b = {} parameter(1), sharding={}
  ROOT d = {} dot(a, b), {}, sharding={}
}}
)",
                                                  lhs, ls, rhs, rs, out, dnums, os),
                                      n);
}

const char* kMatmul = "lhs_contracting_dims={1}, rhs_contracting_dims={0}";
const char* kBatched =
    "lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={1}";

TEST(SpmdDotTest, BatchDimsShardedAlikeRunLocally) {
  auto m = Dot("f32[4,8,6]", "f32[4,6,5]", "f32[4,8,5]", kBatched, "{devices=[4,1,1]<=[4]}",
               "{devices=[4,1,1]<=[4]}", "{devices=[4,1,1]<=[4]}", 4);
  EXPECT_EQ(CountCollectives(*m), 0);
  EXPECT_EQ(FindNamed(*m, "d")->shape(), ParseShape("f32[1,8,5]"));
}

TEST(SpmdDotTest, ContractingDimShardedOnBothAllReduces) {
  auto m = Dot("f32[8,12]", "f32[12,6]", "f32[8,6]", kMatmul, "{devices=[1,4]<=[4]}",
               "{devices=[4,1]<=[4]}", "{replicated}", 4);
  auto reduces = FindAll(*m, HloOpcode::kAllReduce);
  ASSERT_EQ(reduces.size(), 1u);
  EXPECT_EQ(reduces[0]->attrs().replica_groups, (std::vector<std::vector<int64_t>>{{0, 1, 2, 3}}));
  EXPECT_EQ(reduces[0]->to_apply()->root_instruction()->opcode(), HloOpcode::kAdd);
  EXPECT_EQ(CountCollectives(*m), 1);
}

TEST(SpmdDotTest, PartialSumsReduceScatterWhenTheResultIsSharded) {
  auto m = Dot("f32[8,12]", "f32[12,6]", "f32[8,6]", kMatmul, "{devices=[1,4]<=[4]}",
               "{devices=[4,1]<=[4]}", "{devices=[4,1]<=[4]}", 4);
  auto scatters = FindAll(*m, HloOpcode::kReduceScatter);
  ASSERT_EQ(scatters.size(), 1u);
  EXPECT_EQ(scatters[0]->dimensions(), std::vector<int64_t>{0});
  EXPECT_EQ(CountCollectives(*m), 1);
  EXPECT_EQ(m->entry_computation()->root_instruction()->shape(), ParseShape("f32[2,6]"));
}

TEST(SpmdDotTest, ReduceScatterOverAnUnevenResultDim) {
  Dot("f32[7,12]", "f32[12,6]", "f32[7,6]", kMatmul, "{devices=[1,4]<=[4]}", "{devices=[4,1]<=[4]}",
      "{devices=[4,1]<=[4]}", 4);
}

TEST(SpmdDotTest, NonContractingShardingFlowsToTheResult) {
  auto m = Dot("f32[8,12]", "f32[12,6]", "f32[8,6]", kMatmul, "{devices=[4,1]<=[4]}",
               "{replicated}", "{devices=[4,1]<=[4]}", 4);
  EXPECT_EQ(CountCollectives(*m), 0);
  m = Dot("f32[8,12]", "f32[12,6]", "f32[8,6]", kMatmul,
          "{devices=[2,1,2]<=[4] last_tile_dim_replicate}",
          "{devices=[1,2,2]<=[2,2]T(1,0) last_tile_dim_replicate}", "{devices=[2,2]<=[4]}", 4);
  EXPECT_EQ(CountCollectives(*m), 0);
}

TEST(SpmdDotTest, MismatchedOperandsAreReshardedFirst) {
  Dot("f32[8,12]", "f32[12,6]", "f32[8,6]", kMatmul, "{devices=[4,1]<=[4]}", "{devices=[1,4]<=[4]}",
      "{devices=[2,2]<=[4]}", 4);
  Dot("f32[8,12]", "f32[12,6]", "f32[8,6]", kMatmul, "{devices=[1,4]<=[4]}", "{devices=[1,4]<=[4]}",
      "{devices=[1,4]<=[4]}", 4);
  Dot("f32[2,8,12]", "f32[2,12,6]", "f32[2,8,6]", kBatched, "{devices=[2,1,2]<=[4]}",
      "{devices=[1,1,4]<=[4]}", "{devices=[2,2,1]<=[4]}", 4);
}

// Column-parallel projections of one sequence-split activation h [1, 64, 8]
// (seq split 2 ways), each result wanted split on its columns. One dot alone
// is cheapest with its small weight gathered and the result moved from
// sequence-split to column-split (all-to-all); three dots of the same h
// share the gather of the whole sequence (the collective CSE merges them),
// so each pays a third of it and none needs an all-to-all.
std::unique_ptr<HloModule> Projections(int64_t count) {
  std::string params, dots, shapes, shardings, names;
  for (int64_t i = 0; i < count; ++i) {
    params += fmt::format("  w{0} = f32[8,8] parameter({1}), sharding={{devices=[1,2]<=[2]}}\n", i,
                          i + 1);
    dots += fmt::format(
        "  d{0} = f32[1,64,8] dot(h, w{0}), lhs_contracting_dims={{2}}, "
        "rhs_contracting_dims={{0}}, sharding={{devices=[1,1,2]<=[2]}}\n",
        i);
    const char* sep = i == 0 ? "" : ", ";
    shapes += fmt::format("{}f32[1,64,8]", sep);
    shardings += fmt::format("{}{{devices=[1,1,2]<=[2]}}", sep);
    names += fmt::format("{}d{}", sep, i);
  }
  return ExpectShardedEqualsUnsharded(fmt::format(R"(
HloModule projections
ENTRY main {{
  h = f32[1,64,8] parameter(0), sharding={{devices=[1,2,1]<=[2]}}
{}{}  ROOT t = ({}) tuple({}), sharding={{{}}}
}}
)",
                                                  params, dots, shapes, names, shardings),
                                      2);
}

TEST(SpmdDotTest, ProjectionsOfOneActivationShareItsGather) {
  auto one = Projections(1);
  EXPECT_EQ(FindAll(*one, HloOpcode::kAllToAll).size(), 1u) << PrintModule(*one);
  auto three = Projections(3);
  EXPECT_TRUE(FindAll(*three, HloOpcode::kAllToAll).empty()) << PrintModule(*three);
  const auto gathers = FindAll(*three, HloOpcode::kAllGather);
  ASSERT_EQ(gathers.size(), 3u) << PrintModule(*three);
  for (const HloInstruction* g : gathers) {
    EXPECT_EQ(g->operand(0)->name(), "h");
    EXPECT_EQ(g->shape(), ParseShape("f32[1,64,8]"));
  }
}

TEST(SpmdDotTest, UnevenContractingDimIsMasked) {
  auto m = Dot("f32[5,7]", "f32[7,3]", "f32[5,3]", kMatmul, "{devices=[1,4]<=[4]}",
               "{devices=[4,1]<=[4]}", "{replicated}", 4);
  EXPECT_EQ(FindAll(*m, HloOpcode::kSelect).size(), 2u);
}

TEST(SpmdDotTest, HybridShardedGradientReduceScattersThenAllReducesAShard) {
  // A weight gradient: activations [B, K] and cotangents [B, N] split along
  // the batch over (data=2, fsdp=4); the gradient [K, N] wanted split along
  // K over fsdp, replicated over data (HSDP). A reduce-scatter over each
  // fsdp group, then an all-reduce of the shard over data; never an
  // all-reduce of the whole [K, N] over all 8 devices.
  auto m = Dot("f32[16,24]", "f32[16,10]", "f32[24,10]",
               "lhs_contracting_dims={0}, rhs_contracting_dims={0}", "{devices=[8,1]<=[8]}",
               "{devices=[8,1]<=[8]}", "{devices=[4,1,2]<=[2,4]T(1,0) last_tile_dim_replicate}", 8);
  auto scatters = FindAll(*m, HloOpcode::kReduceScatter);
  auto reduces = FindAll(*m, HloOpcode::kAllReduce);
  ASSERT_EQ(scatters.size(), 1u);
  ASSERT_EQ(reduces.size(), 1u);
  EXPECT_EQ(scatters[0]->attrs().replica_groups,
            (std::vector<std::vector<int64_t>>{{0, 1, 2, 3}, {4, 5, 6, 7}}));
  EXPECT_EQ(reduces[0]->attrs().replica_groups,
            (std::vector<std::vector<int64_t>>{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  EXPECT_EQ(reduces[0]->shape(), ParseShape("f32[6,10]"));
  EXPECT_EQ(CountCollectives(*m), 2);
}

TEST(SpmdDotTest, GradientWantedSplitOnTwoDimsReduceScattersAlongEach) {
  // The batch split over (data=2, fsdp=2, tensor=2); the gradient [K, N]
  // wanted split K over fsdp, N over tensor, replicated over data (a wk/wv
  // gradient under FSDP x TP beside a data axis): a reduce-scatter along
  // each dim, then an all-reduce of the [K/2, N/2] shard over data only.
  auto m =
      Dot("f32[16,12]", "f32[16,10]", "f32[12,10]",
          "lhs_contracting_dims={0}, rhs_contracting_dims={0}", "{devices=[8,1]<=[8]}",
          "{devices=[8,1]<=[8]}", "{devices=[2,2,2]<=[2,2,2]T(1,2,0) last_tile_dim_replicate}", 8);
  auto scatters = FindAll(*m, HloOpcode::kReduceScatter);
  auto reduces = FindAll(*m, HloOpcode::kAllReduce);
  ASSERT_EQ(scatters.size(), 2u);
  ASSERT_EQ(reduces.size(), 1u);
  EXPECT_EQ(reduces[0]->shape(), ParseShape("f32[6,5]"));
  EXPECT_EQ(reduces[0]->attrs().replica_groups,
            (std::vector<std::vector<int64_t>>{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  EXPECT_EQ(CountCollectives(*m), 3);
}

// XLA's block-scaled dot: out = dot(lhs * lhs_scale, rhs * rhs_scale), each
// scale repeated over its block of the minor (contracting) dim, batch dim 0
// at rank 3; computed here in double, independently of the compiler's
// expansion.
Value BlockScaledDotReference(const HloInstruction& instr, const std::vector<Value>& ops) {
  const std::vector<int64_t> ld(ops[0].shape.dimensions().begin(), ops[0].shape.dimensions().end());
  const std::vector<int64_t> rd(ops[1].shape.dimensions().begin(), ops[1].shape.dimensions().end());
  const bool batched = ld.size() == 3;
  const int64_t batch = batched ? ld[0] : 1, m = ld[ld.size() - 2], n = rd[rd.size() - 2];
  const int64_t k = ld.back();
  auto scaled = [&](int s, int64_t b, int64_t row, int64_t j) {
    const Value& x = ops[s];
    const int64_t rows = x.shape.dimensions(x.shape.rank() - 2);
    double v = x.data[(b * rows + row) * k + j];
    if (ops.size() > static_cast<size_t>(2 + s)) {
      const Value& scale = ops[2 + s];
      const int64_t ks = scale.shape.dimensions().back();
      v *= scale.data[(b * rows + row) * ks + j / (k / ks)];
    }
    return v;
  };
  Value r = MakeArray(instr.shape());
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double acc = 0;
        for (int64_t c = 0; c < k; ++c) acc += scaled(0, b, i, c) * scaled(1, b, j, c);
        r.data[(b * m + i) * n + j] = acc;
      }
    }
  }
  return r;
}

std::unique_ptr<HloModule> BlockScaledDot(const std::string& lhs, const std::string& rhs,
                                          const std::string& ls, const std::string& rs,
                                          const std::string& out, const std::string& lsh,
                                          const std::string& rsh, const std::string& osh,
                                          int64_t n) {
  return ExpectShardedEqualsUnsharded(fmt::format(R"(
HloModule block_scaled
ENTRY main {{
  a = {} parameter(0), sharding={}
  b = {} parameter(1), sharding={}
  as = {} parameter(2), sharding={}
  bs = {} parameter(3), sharding={}
  ROOT d = {} custom-call(a, b, as, bs), custom_call_target="__op$block_scaled_dot", sharding={}
}}
)",
                                                  lhs, lsh, rhs, rsh, ls, lsh, rs, rsh, out, osh),
                                      n, 3, BlockScaledDotReference);
}

TEST(SpmdDotTest, BlockScaledDotSplitOnTheContractionSumsWholeBlocks) {
  // K = 64 in 8 blocks of 8, split 4 ways: 2 blocks a device, partial sums
  // reduce-scattered to the result's split; the scales travel with their
  // operands, and the local call keeps the target.
  auto m = BlockScaledDot("f8e4m3fn[12,64]", "f8e4m3fn[16,64]", "f8e8m0fnu[12,8]",
                          "f8e8m0fnu[16,8]", "f32[12,16]", "{devices=[1,4]<=[4]}",
                          "{devices=[1,4]<=[4]}", "{devices=[4,1]<=[4]}", 4);
  const HloInstruction* local = FindNamed(*m, "d");
  ASSERT_NE(local, nullptr);
  const HloInstruction* call =
      local->opcode() == HloOpcode::kCustomCall ? local : local->operand(0);
  ASSERT_EQ(call->opcode(), HloOpcode::kCustomCall);
  EXPECT_EQ(call->attrs().custom_call_target, "__op$block_scaled_dot");
  EXPECT_EQ(call->operand(0)->shape(), ParseShape("f8e4m3fn[12,16]"));
  EXPECT_EQ(call->operand(2)->shape(), ParseShape("f8e8m0fnu[12,2]"));
  EXPECT_EQ(FindAll(*m, HloOpcode::kReduceScatter).size(), 1u);
}

TEST(SpmdDotTest, BlockScaledDotBatchAndNonContractingSplits) {
  const char* l = "f8e4m3fn[4,6,32]";
  const char* r = "f8e4m3fn[4,10,32]";
  const char* lsc = "f8e8m0fnu[4,6,4]";
  const char* rsc = "f8e8m0fnu[4,10,4]";
  // Batch split alike: local, no collective.
  auto m = BlockScaledDot(l, r, lsc, rsc, "f32[4,6,10]", "{devices=[4,1,1]<=[4]}",
                          "{devices=[4,1,1]<=[4]}", "{devices=[4,1,1]<=[4]}", 4);
  EXPECT_EQ(CountCollectives(*m), 0);
  // Batch on the lhs, rows of rhs, the result split on rhs rows: resharded.
  BlockScaledDot(l, r, lsc, rsc, "f32[4,6,10]", "{devices=[4,1,1]<=[4]}", "{devices=[1,4,1]<=[4]}",
                 "{devices=[1,1,4]<=[4]}", 4);
  // 2D: contraction over one axis, rows over the other, uneven rows.
  BlockScaledDot("f8e4m3fn[7,32]", "f8e4m3fn[5,32]", "f8e8m0fnu[7,4]", "f8e8m0fnu[5,4]", "f32[7,5]",
                 "{devices=[2,2]<=[4]}", "{devices=[2,2]<=[2,2]T(1,0)}", "{devices=[2,2]<=[4]}", 4);
}

TEST(SpmdDotTest, BlockScaledDotNeverSplitsABlock) {
  // 3 blocks of 8 split 2 ways would cut a block: the contraction is
  // gathered instead, and the numbers still agree.
  auto m = BlockScaledDot("f8e4m3fn[6,24]", "f8e4m3fn[4,24]", "f8e8m0fnu[6,3]", "f8e8m0fnu[4,3]",
                          "f32[6,4]", "{devices=[1,2]<=[2]}", "{devices=[1,2]<=[2]}",
                          "{devices=[2,1]<=[2]}", 2);
  EXPECT_TRUE(FindAll(*m, HloOpcode::kAllReduce).empty());
  EXPECT_TRUE(FindAll(*m, HloOpcode::kReduceScatter).empty());
}

TEST(SpmdDotTest, BlockScaledDotWithTheLhsScaledOnly) {
  ExpectShardedEqualsUnsharded(R"(
HloModule lhs_scaled
ENTRY main {
  a = f8e4m3fn[8,32] parameter(0), sharding={devices=[2,2]<=[4]}
  b = bf16[6,32] parameter(1), sharding={devices=[1,2,2]<=[4] last_tile_dim_replicate}
  as = f8e8m0fnu[8,2] parameter(2), sharding={devices=[2,2]<=[4]}
  ROOT d = f32[8,6] custom-call(a, b, as), custom_call_target="__op$block_scaled_dot", sharding={devices=[4,1]<=[4]}
}
)",
                               4, 5, BlockScaledDotReference);
}

// ragged-dot: modules of each mode, with shardings of every operand drawn at
// random on 1 to 8 devices (the ragged dim and the groups split included:
// the partitioner must gather them), against the unsharded module.
struct RaggedCase {
  std::string lhs, rhs, sizes, out, dnums;
};

void ExpectRaggedDotPartitions(const RaggedCase& c, int trials, uint64_t seed) {
  std::mt19937_64 rng(seed);
  for (int trial = 0; trial < trials; ++trial) {
    const int64_t n = std::uniform_int_distribution<int64_t>(1, 8)(rng);
    auto sharding = [&](const std::string& shape) {
      return RandomSharding(n, ParseShape(shape).rank(), rng).ToString();
    };
    const std::string ls = sharding(c.lhs), rs = sharding(c.rhs), ss = sharding(c.sizes),
                      os = sharding(c.out);
    const std::string hlo = fmt::format(R"(
HloModule ragged
ENTRY main {{
  a = {} parameter(0), sharding={}
  b = {} parameter(1), sharding={}
  s = {} parameter(2), sharding={}
  ROOT d = {} ragged-dot(a, b, s), {}, sharding={}
}}
)",
                                        c.lhs, ls, c.rhs, rs, c.sizes, ss, c.out, c.dnums, os);
    SCOPED_TRACE(hlo);
    ExpectShardedEqualsUnsharded(hlo, n, seed + trial);
    if (::testing::Test::HasFailure()) return;
  }
}

TEST(SpmdDotTest, RaggedDotNonContractingModeKeepsEachRowsGroup) {
  // [b,m,k] x [g,b,k,n], sizes [b,g] -> [b,m,n].
  ExpectRaggedDotPartitions({"f32[2,6,4]", "f32[3,2,4,5]", "u32[2,3]", "f32[2,6,5]",
                             "lhs_batch_dims={0}, rhs_batch_dims={1}, lhs_contracting_dims={2}, "
                             "rhs_contracting_dims={2}, lhs_ragged_dims={1}, rhs_group_dims={0}"},
                            40, 21);
  // MoE's shape: tokens [m,k] x experts [g,k,n], sizes [g].
  ExpectRaggedDotPartitions({"f32[8,6]", "f32[4,6,5]", "u32[4]", "f32[8,5]",
                             "lhs_contracting_dims={1}, rhs_contracting_dims={1}, "
                             "lhs_ragged_dims={0}, rhs_group_dims={0}"},
                            40, 22);
}

TEST(SpmdDotTest, RaggedDotContractingModeKeepsTheGroupsWhole) {
  // [b,m,k] x [b,k,n], sizes [b,g] -> [g,b,m,n] (a MoE weight gradient).
  ExpectRaggedDotPartitions({"f32[2,3,8]", "f32[2,8,5]", "u32[2,4]", "f32[4,2,3,5]",
                             "lhs_batch_dims={0}, rhs_batch_dims={0}, lhs_contracting_dims={2}, "
                             "rhs_contracting_dims={1}, lhs_ragged_dims={2}"},
                            40, 23);
}

TEST(SpmdDotTest, RaggedDotBatchModeIsTheDot) {
  ExpectRaggedDotPartitions({"f32[5,3,4]", "f32[5,4,6]", "u32[3]", "f32[5,3,6]",
                             "lhs_batch_dims={0}, rhs_batch_dims={0}, lhs_contracting_dims={2}, "
                             "rhs_contracting_dims={1}, lhs_ragged_dims={0}"},
                            30, 24);
}

TEST(SpmdDotTest, RaggedDotSplitOnItsRaggedDimIsComputedWhole) {
  auto m = ExpectShardedEqualsUnsharded(R"(
HloModule ragged
ENTRY main {
  a = f32[8,6] parameter(0), sharding={devices=[4,1]<=[4]}
  b = f32[4,6,5] parameter(1), sharding={devices=[4,1,1]<=[4]}
  s = u32[4] parameter(2), sharding={replicated}
  ROOT d = f32[8,5] ragged-dot(a, b, s), lhs_contracting_dims={1}, rhs_contracting_dims={1}, lhs_ragged_dims={0}, rhs_group_dims={0}, sharding={devices=[4,1]<=[4]}
}
)",
                                        4);
  const std::vector<const HloInstruction*> dots = FindAll(*m, HloOpcode::kRaggedDot);
  ASSERT_EQ(dots.size(), 1u);
  EXPECT_EQ(dots[0]->operand(0)->shape(), ParseShape("f32[8,6]"));
  EXPECT_EQ(dots[0]->operand(1)->shape(), ParseShape("f32[4,6,5]"));
}

// A result with unreduced axes (devices holding addends of it, the sum of
// which is the value): the local sums over a split contraction are those
// addends, and no all-reduce is made (XLA's UnreducedDot and
// SubgroupUnreducedDot, in modules of this file's own).
TEST(SpmdDotTest, UnreducedResultKeepsTheLocalSums) {
  auto whole = ExpectShardedEqualsUnsharded(R"(
HloModule unreduced
ENTRY main {
  a = f32[6,10] parameter(0), sharding={devices=[1,2]0,1}
  b = f32[10,4] parameter(1), sharding={devices=[2,1]0,1}
  d = f32[6,4] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}, sharding={unreduced}
  ROOT c = f32[6,4] copy(d), sharding={unreduced}
}
)",
                                            2);
  EXPECT_EQ(CountCollectives(*whole), 0);
  const HloInstruction* root = whole->entry_computation()->root_instruction();
  EXPECT_EQ(root->opcode(), HloOpcode::kCopy);
  EXPECT_EQ(root->operand(0)->opcode(), HloOpcode::kDot);

  // lhs [M/x, K/y], rhs [K/y, N/z] (each replicated over the other's free
  // axis) into [M/x, N/z] unreduced over y; K = 11 is padded on y's
  // second piece, which the dot must not add.
  auto sub = ExpectShardedEqualsUnsharded(R"(
HloModule subgroup
ENTRY main {
  a = f32[6,11] parameter(0), sharding={devices=[2,2,2]<=[8] last_tile_dim_replicate}
  b = f32[11,10] parameter(1), sharding={devices=[2,2,2]<=[2,2,2]T(1,2,0) last_tile_dim_replicate}
  ROOT d = f32[6,10] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}, sharding={devices=[2,2,2]<=[2,2,2]T(0,2,1) last_tile_dims={unreduced}}
}
)",
                                          8);
  EXPECT_EQ(CountCollectives(*sub), 0);
  EXPECT_EQ(FindAll(*sub, HloOpcode::kDot).size(), 1u);
  // Unreduced and replicated axes together (16 devices, XLA's
  // SubgroupUnreducedAndReplicated).
  auto both = ExpectShardedEqualsUnsharded(R"(
HloModule both
ENTRY main {
  a = f32[8,12] parameter(0), sharding={devices=[2,2,4]<=[2,2,4]T(0,1,2) last_tile_dim_replicate}
  b = f32[12,6] parameter(1), sharding={devices=[2,2,4]<=[2,2,4]T(1,2,0) last_tile_dim_replicate}
  ROOT d = f32[8,6] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}, sharding={devices=[2,2,2,2]<=[2,2,2,2]T(0,2,1,3) last_tile_dims={unreduced,replicated}}
}
)",
                                           16);
  EXPECT_EQ(CountCollectives(*both), 0);
}

// Where the local sums are not the wanted addends (another grouping, or no
// split contraction), the dot is summed as usual and its value made into
// addends: the first device of each group keeps it, the others hold zeros.
TEST(SpmdDotTest, UnreducedResultOtherwiseComesFromTheSum) {
  ExpectShardedEqualsUnsharded(R"(
HloModule nosplit
ENTRY main {
  a = f32[6,10] parameter(0), sharding={devices=[2,1]0,1}
  b = f32[10,4] parameter(1), sharding={replicated}
  ROOT d = f32[6,4] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}, sharding={unreduced}
}
)",
                               2);
  // Contraction split over all four devices, addends wanted over pairs.
  auto m = ExpectShardedEqualsUnsharded(R"(
HloModule regroup
ENTRY main {
  a = f32[6,8] parameter(0), sharding={devices=[1,4]<=[4]}
  b = f32[8,4] parameter(1), sharding={devices=[4,1]<=[4]}
  ROOT d = f32[6,4] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}, sharding={devices=[2,1,2]<=[4] last_tile_dims={unreduced}}
}
)",
                                        4);
  EXPECT_FALSE(FindAll(*m, HloOpcode::kAllReduce).empty());
}

TEST(SpmdDotTest, RandomShardingsOnOneToEightDevices) {
  std::mt19937_64 rng(11);
  for (int trial = 0; trial < 60; ++trial) {
    const int64_t n = std::uniform_int_distribution<int64_t>(1, 8)(rng);
    auto dim = [&] { return std::uniform_int_distribution<int64_t>(1, 7)(rng); };
    const int64_t b = dim(), m = dim(), k = dim(), c = dim();
    const std::string ls = RandomSharding(n, 3, rng).ToString();
    const std::string rs = RandomSharding(n, 3, rng).ToString();
    const std::string os = RandomSharding(n, 3, rng).ToString();
    SCOPED_TRACE(fmt::format("n={} b={} m={} k={} c={} {} {} {}", n, b, m, k, c, ls, rs, os));
    Dot(fmt::format("f32[{},{},{}]", b, m, k), fmt::format("f32[{},{},{}]", b, k, c),
        fmt::format("f32[{},{},{}]", b, m, c), kBatched, ls, rs, os, n);
    if (::testing::Test::HasFailure()) return;
  }
}

}  // namespace
}  // namespace weft::spmd_test
