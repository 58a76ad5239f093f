#include "weft/spmd/op_sharding_rule.h"

#include <gtest/gtest.h>

#include "weft/hlo/parser.h"
#include "weft/spmd/sharding_propagation.h"

namespace weft {
namespace {

std::unique_ptr<HloModule> Parse(const std::string& body) {
  return ParseHloModule("HloModule m\n\nENTRY main {\n" + body + "}\n");
}

// An entry computation beside an f32 `add` reducer.
std::unique_ptr<HloModule> ParseWithAdd(const std::string& body) {
  return ParseHloModule(R"(HloModule m
add {
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  ROOT s = f32[] add(x, y)
}
ENTRY main {)" + body + "}\n");
}

TEST(OpShardingRuleTest, DotHasBatchFreeAndReductionFactors) {
  auto m = Parse(R"(
  a = f32[2,8,16] parameter(0)
  b = f32[2,16,4] parameter(1)
  ROOT d = f32[2,8,4] dot(a, b), lhs_batch_dims={0}, rhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_contracting_dims={1}
)");
  auto rule = GetOpShardingRule(*m->entry_computation()->root_instruction());
  ASSERT_TRUE(rule);
  EXPECT_EQ(rule->ToString(),
            "dot: ([f0, f2, f1], [f0, f1, f3]) -> ([f0, f2, f3]) {f1: reduction}");
}

// ragged-dot: the dot's factors, what must stay whole never propagated:
// the ragged dim and the rhs group dim (non-contracting), the result's
// groups (contracting); group_sizes shares the lhs batch factor.
TEST(OpShardingRuleTest, RaggedDotKeepsItsGroupsWhole) {
  auto m = Parse(R"(
  a = f32[2,6,4] parameter(0)
  w = f32[3,2,4,5] parameter(1)
  s = u32[2,3] parameter(2)
  n = f32[2,6,5] ragged-dot(a, w, s), lhs_batch_dims={0}, rhs_batch_dims={1}, lhs_contracting_dims={2}, rhs_contracting_dims={2}, lhs_ragged_dims={1}, rhs_group_dims={0}
  v = f32[2,4,5] parameter(3)
  c = f32[3,2,6,5] ragged-dot(a, v, s), lhs_batch_dims={0}, rhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_contracting_dims={1}, lhs_ragged_dims={2}
  ROOT t = (f32[2,6,5], f32[3,2,6,5]) tuple(n, c)
)");
  const HloComputation* entry = m->entry_computation();
  auto n = GetOpShardingRule(*entry->GetInstruction("n"));
  ASSERT_TRUE(n);
  EXPECT_EQ(n->ToString(),
            "ragged-dot: ([f0, f2, f1], [f3, f0, f1, f4], [f0, f5]) -> ([f0, f2, f4]) "
            "{f1: reduction, f2: need-replication, f3: need-replication, f5: need-replication}");
  auto c = GetOpShardingRule(*entry->GetInstruction("c"));
  ASSERT_TRUE(c);
  EXPECT_EQ(c->ToString(),
            "ragged-dot: ([f0, f2, f1], [f0, f1, f3], [f0, f5]) -> ([f4, f0, f2, f3]) "
            "{f1: need-replication, f4: need-replication, f5: need-replication}");
}

// XLA's block-scaled dot: the dot it computes, each scale with its
// operand's factors; K is the scale count (shared with the scales, split
// like a contraction) times the block (never split); the lhs scaled alone
// adds one scale; padded scales share nothing on K.
TEST(OpShardingRuleTest, BlockScaledDotScalesShareTheirOperandsFactors) {
  auto m = Parse(R"(
  a = f8e4m3fn[2,8,64] parameter(0)
  b = f8e4m3fn[2,4,64] parameter(1)
  as = f8e8m0fnu[2,8,2] parameter(2)
  bs = f8e8m0fnu[2,4,2] parameter(3)
  d = f32[2,8,4] custom-call(a, b, as, bs), custom_call_target="__op$block_scaled_dot"
  x = f8e4m3fn[8,40] parameter(4)
  y = bf16[4,40] parameter(5)
  xs = f8e8m0fnu[8,2] parameter(6)
  e = f32[8,4] custom-call(x, y, xs), custom_call_target="__op$block_scaled_dot", backend_config={"block_scaled_dot_backend_config":{block_size:32}}
  ROOT t = (f32[2,8,4], f32[8,4]) tuple(d, e)
)");
  const HloComputation* entry = m->entry_computation();
  auto d = GetOpShardingRule(*entry->GetInstruction("d"));
  ASSERT_TRUE(d);
  EXPECT_EQ(d->ToString(),
            "__op$block_scaled_dot: ([f0, f2, f1*f4], [f0, f3, f1*f4], [f0, f2, f1], [f0, f3, f1]) "
            "-> ([f0, f2, f3]) {f1: reduction, f4: need-replication}");
  auto e = GetOpShardingRule(*entry->GetInstruction("e"));
  ASSERT_TRUE(e);
  EXPECT_EQ(e->ToString(),
            "__op$block_scaled_dot: ([f1, f0], [f2, f0], [f1, f3]) -> ([f1, f2]) "
            "{f0: reduction, f3: need-replication}");
}

// convolution: batch with the result's batch, the input features contracted
// with the kernel's, the kernel's output features with the result's, a
// moving window's spatial dims a permutation, a still one's a pass-through;
// the kernel's window dims whole. Groups are a major factor shared by the
// input's features (batch) and the output features.
TEST(OpShardingRuleTest, ConvolutionFactors) {
  auto m = Parse(R"(
  x = f32[8,32,32,16] parameter(0)
  w = f32[3,1,16,64] parameter(1)
  c = f32[8,32,32,64] convolution(x, w), window={size=3x1 pad=1_1x0_0}, dim_labels=b01f_01io->b01f
  y = f32[16,5,12] parameter(2)
  v = f32[12,4,3] parameter(3)
  g = f32[5,12,10] convolution(y, v), window={size=3}, dim_labels=fb0_oi0->bf0, feature_group_count=4
  k = f32[3,5,8] parameter(4)
  bg = f32[4,8,10] convolution(y, k), window={size=3}, dim_labels=bf0_0io->bf0, batch_group_count=4
  ROOT t = (f32[8,32,32,64], f32[5,12,10], f32[4,8,10]) tuple(c, g, bg)
)");
  const HloComputation* e = m->entry_computation();
  auto c = GetOpShardingRule(*e->GetInstruction("c"));
  ASSERT_TRUE(c);
  EXPECT_EQ(c->ToString(),
            "convolution: ([f0, f3, f5, f1], [f4, f6, f1, f2]) -> ([f0, f3, f5, f2]) "
            "{f1: reduction, f3: permutation, f4: need-replication}");
  auto g = GetOpShardingRule(*e->GetInstruction("g"));
  ASSERT_TRUE(g);
  EXPECT_EQ(g->ToString(),
            "convolution: ([f2*f1, f0, f4], [f2*f3, f1, f5]) -> ([f0, f2*f3, f4]) "
            "{f1: reduction, f4: permutation, f5: need-replication}");
  auto bg = GetOpShardingRule(*e->GetInstruction("bg"));
  ASSERT_TRUE(bg);
  EXPECT_EQ(bg->ToString(),
            "convolution: ([f2*f0, f1, f4], [f5, f1, f2*f3]) -> ([f0, f2*f3, f4]) "
            "{f1: reduction, f4: permutation, f5: need-replication}");
  EXPECT_EQ(bg->factor_sizes[bg->operands[0][0][0]], 4);
  EXPECT_EQ(bg->factor_sizes[bg->operands[0][0][1]], 4);
}

TEST(OpShardingRuleTest, ReshapeRefinesSplitsAndMerges) {
  OpShardingRule split = ReshapeRule({6, 4}, {2, 3, 4});
  EXPECT_EQ(split.ToString(), "reshape: ([f0*f1, f2]) -> ([f0, f1, f2])");
  OpShardingRule merge = ReshapeRule({4, 8}, {32});
  EXPECT_EQ(merge.ToString(), "reshape: ([f0, f1]) -> ([f0*f1])");
  // No common refinement: every dim gets a factor of its own.
  OpShardingRule odd = ReshapeRule({2, 3}, {3, 2});
  EXPECT_EQ(odd.ToString(), "reshape: ([f0, f2]) -> ([f1, f3])");
  OpShardingRule ones = ReshapeRule({1, 8}, {8, 1});
  EXPECT_EQ(ones.num_factors(), 3);
}

TEST(OpShardingRuleTest, KindsForSliceLikeOps) {
  auto m = Parse(R"(
  p = f32[8,16] parameter(0)
  i = s32[] parameter(1)
  ds = f32[1,16] dynamic-slice(p, i, i), dynamic_slice_sizes={1,16}
  c = f32[16,16] concatenate(p, p), dimensions={0}
  ROOT t = (f32[1,16], f32[16,16]) tuple(ds, c)
)");
  auto ds = GetOpShardingRule(*m->entry_computation()->GetInstruction("ds"));
  ASSERT_TRUE(ds);
  EXPECT_EQ(ds->factor_kinds[ds->operands[0][0][0]], FactorKind::kNeedReplication);
  EXPECT_EQ(ds->factor_kinds[ds->operands[0][1][0]], FactorKind::kPassThrough);
  EXPECT_TRUE(ds->operands[1].empty());  // the scalar index
  auto c = GetOpShardingRule(*m->entry_computation()->GetInstruction("c"));
  ASSERT_TRUE(c);
  EXPECT_EQ(c->factor_kinds[c->results[0][0][0]], FactorKind::kPermutation);
}

// The opcode registry: every elementwise op (and compare, all-reduce,
// collective-permute) shares one set of factors among its same-shape
// operands and result; pad, slice and reverse move elements along the dims
// they change; iota and constants have a result only; structural ops have
// no rule.
TEST(OpShardingRuleTest, RegistryCoversOpsByOpcode) {
  auto m = ParseWithAdd(R"(
  p = f32[8,16] parameter(0)
  q = f32[8,16] parameter(1)
  z = f32[] constant(0)
  cp = f32[8,16] copy(p)
  cv = s32[8,16] convert(p)
  cmp = pred[8,16] compare(p, q), direction=LT
  sel = f32[8,16] select(cmp, p, q)
  ar = f32[8,16] all-reduce(p), replica_groups={}, to_apply=add
  io = s32[8,16] iota(), iota_dimension=0
  pd = f32[10,16] pad(p, z), padding=1_1x0_0
  sl = f32[4,16] slice(p), slice={[0:4], [0:16]}
  rv = f32[8,16] reverse(p), dimensions={1}
  t = (f32[8,16], f32[8,16]) tuple(p, q)
  g = f32[8,16] get-tuple-element(t), index=0
  ROOT r = (f32[8,16], s32[8,16], pred[8,16], f32[8,16], f32[8,16], s32[8,16], f32[10,16], f32[4,16], f32[8,16], f32[8,16]) tuple(cp, cv, cmp, sel, ar, io, pd, sl, rv, g)
)");
  auto text = [&](const char* name) {
    auto rule = GetOpShardingRule(*m->entry_computation()->GetInstruction(name));
    return rule ? rule->ToString() : std::string("none");
  };
  EXPECT_EQ(text("cp"), "copy: ([f0, f1]) -> ([f0, f1])");
  EXPECT_EQ(text("cv"), "convert: ([f0, f1]) -> ([f0, f1])");
  EXPECT_EQ(text("cmp"), "compare: ([f0, f1], [f0, f1]) -> ([f0, f1])");
  EXPECT_EQ(text("sel"), "select: ([f0, f1], [f0, f1], [f0, f1]) -> ([f0, f1])");
  EXPECT_EQ(text("ar"), "all-reduce: ([f0, f1]) -> ([f0, f1])");
  EXPECT_EQ(text("io"), "iota: () -> ([f0, f1])");
  EXPECT_EQ(text("z"), "constant: () -> ([])");
  EXPECT_EQ(text("pd"), "pad: ([f0, f1], []) -> ([f0, f1]) {f0: permutation}");
  EXPECT_EQ(text("sl"), "slice: ([f0, f1]) -> ([f0, f1]) {f0: permutation}");
  EXPECT_EQ(text("rv"), "reverse: ([f0, f1]) -> ([f0, f1]) {f1: permutation}");
  EXPECT_EQ(text("p"), "none");
  EXPECT_EQ(text("t"), "none");
  EXPECT_EQ(text("g"), "none");
}

TEST(OpShardingRuleTest, BroadcastAndReduce) {
  auto m = ParseWithAdd(R"(
  p = f32[8] parameter(0)
  b = f32[4,8] broadcast(p), dimensions={1}
  z = f32[] constant(0)
  ROOT r = f32[8] reduce(b, z), dimensions={0}, to_apply=add
)");
  auto b = GetOpShardingRule(*m->entry_computation()->GetInstruction("b"));
  EXPECT_EQ(b->ToString(), "broadcast: ([f1]) -> ([f0, f1])");
  auto r = GetOpShardingRule(*m->entry_computation()->GetInstruction("r"));
  EXPECT_EQ(r->ToString(), "reduce: ([f0, f1], []) -> ([f1]) {f0: reduction}");
}

TEST(OpShardingRuleTest, SortTopKAndWindowsKeepTheirComputedDimsWhole) {
  auto m = ParseHloModule(R"(HloModule m
lt {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  c = s32[] parameter(2)
  d = s32[] parameter(3)
  ROOT r = pred[] compare(a, b), direction=LT
}
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT r = f32[] add(a, b)
}
lt2 {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT r = pred[] compare(a, b), direction=GE
}
ENTRY e {
  x = f32[8,16] parameter(0), sharding={devices=[2,2]<=[4]}
  i = s32[8,16] parameter(1)
  srt = (f32[8,16], s32[8,16]) sort(x, i), dimensions={1}, to_apply=lt
  top = (f32[8,3], s32[8,3]) topk(x), k=3
  z = f32[] constant(0)
  rw = f32[8,8] reduce-window(x, z), window={size=1x3 stride=1x2 pad=0_0x1_0}, to_apply=add
  sas = f32[8,16] select-and-scatter(x, rw, z), window={size=1x3 stride=1x2 pad=0_0x1_0}, select=lt2, scatter=add
  bc = u16[8,16,2] bitcast-convert(x)
  ROOT out = tuple(srt, top, rw, sas, bc)
}
)");
  HloComputation* e = m->entry_computation();
  auto rule = [&](const char* name) {
    const HloInstruction* instr = e->GetInstruction(name);
    if (instr == nullptr) return std::string("no ") + name;
    std::optional<OpShardingRule> r = GetOpShardingRule(*instr);
    return r ? r->ToString() : std::string("no rule");
  };
  EXPECT_EQ(rule("srt"),
            "sort: ([f0, f1], [f0, f2]) -> ([f0, f3], [f0, f4]) {f1: need-replication, f2: "
            "need-replication, f3: need-replication, f4: need-replication}");
  EXPECT_EQ(rule("top"),
            "topk: ([f0, f1]) -> ([f0, f2], [f0, f3]) {f1: need-replication, f2: "
            "need-replication, f3: need-replication}");
  // A reduce-window's moving dim passes its split (XLA's rule), as a
  // permutation: the partitioner moves what the windows read.
  EXPECT_EQ(rule("rw"), "reduce-window: ([f0, f1], []) -> ([f0, f1]) {f1: permutation}");
  EXPECT_EQ(rule("bc"), "bitcast-convert: ([f0, f1]) -> ([f0, f1, f2]) {f2: need-replication}");
  // Propagation: the split rows reach every op, the computed dim stays
  // whole; a sort, as in XLA, keeps its sort dim split too (the partitioner
  // gathers it whole to sort it, by the rule above).
  PropagateShardings(*m);
  const std::string rows = "{devices=[2,1,2]<=[4] last_tile_dim_replicate}";
  EXPECT_EQ(e->GetInstruction("srt")->sharding()->ToString(),
            "{{devices=[2,2]<=[4]}, {devices=[2,2]<=[4]}}");
  EXPECT_EQ(e->GetInstruction("top")->sharding()->ToString(), "{" + rows + ", " + rows + "}");
  EXPECT_EQ(e->GetInstruction("rw")->sharding()->ToString(), "{devices=[2,2]<=[4]}");
  EXPECT_EQ(e->GetInstruction("sas")->sharding()->ToString(), rows);
  EXPECT_EQ(e->GetInstruction("bc")->sharding()->ToString(), "{devices=[2,2,1]<=[4]}");
}

// cholesky and triangular-solve keep each matrix whole and share the batch
// dims; propagation carries a batch split through, never a matrix split.
TEST(OpShardingRuleTest, CholeskyAndTriangularSolveKeepTheirMatricesWhole) {
  auto m = ParseHloModule(R"(HloModule m
ENTRY e {
  a = f32[6,4,4] parameter(0), sharding={devices=[2,2,1]<=[4]}
  b = f32[6,4,3] parameter(1)
  c = f32[6,4,4] cholesky(a), lower=true
  t = f32[6,4,3] triangular-solve(c, b), left_side=true, lower=true
  ROOT out = (f32[6,4,3]) tuple(t)
}
)");
  HloComputation* e = m->entry_computation();
  EXPECT_EQ(GetOpShardingRule(*e->GetInstruction("c"))->ToString(),
            "cholesky: ([f0, f1, f2]) -> ([f0, f3, f4]) {f1: need-replication, f2: "
            "need-replication, f3: need-replication, f4: need-replication}");
  EXPECT_EQ(GetOpShardingRule(*e->GetInstruction("t"))->ToString(),
            "triangular-solve: ([f0, f1, f2], [f0, f3, f4]) -> ([f0, f5, f6]) {f1: "
            "need-replication, f2: need-replication, f3: need-replication, f4: need-replication, "
            "f5: need-replication, f6: need-replication}");
  PropagateShardings(*m);
  const std::string batch = "{devices=[2,1,1,2]<=[4] last_tile_dim_replicate}";
  EXPECT_EQ(e->GetInstruction("c")->sharding()->ToString(), batch);
  EXPECT_EQ(e->GetInstruction("t")->sharding()->ToString(), batch);
}

TEST(OpShardingRuleTest, CustomCallsRegisterTheirRule) {
  auto m = Parse(R"(
  p = f32[8,16] parameter(0)
  ROOT c = f32[16,8] custom-call(p), custom_call_target="test.transpose_like"
)");
  const HloInstruction* c = m->entry_computation()->root_instruction();
  EXPECT_FALSE(GetOpShardingRule(*c).has_value());
  RegisterCustomCallRule("test.transpose_like", [](const HloInstruction& instr) {
    OpShardingRule rule;
    rule.name = "test.transpose_like";
    const int64_t a = rule.AddFactor(8), b = rule.AddFactor(16);
    rule.operands = {{{a}, {b}}};
    rule.results = {{{b}, {a}}};
    return std::optional<OpShardingRule>(rule);
  });
  EXPECT_TRUE(HasCustomCallRule("test.transpose_like"));
  auto rule = GetOpShardingRule(*c);
  ASSERT_TRUE(rule);
  EXPECT_EQ(rule->ToString(), "test.transpose_like: ([f0, f1]) -> ([f1, f0])");
}

}  // namespace
}  // namespace weft
