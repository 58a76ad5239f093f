// The plan of a fused computation: what it refuses, by name, and what it
// decides (sources, convolutions numbered after the operands, reuse
// candidates, scratch slots by liveness, column bands).
#include "fusion_plan.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "executor_test_util.h"
#include "fusion_test_util.h"
#include "weft/base/error.h"

namespace weft::runtime {
namespace {

using fusion_testing::ExpectRefused;
using testing::Parse;

// The plan of the entry root of `text`, a fusion.
std::shared_ptr<exec::fusion::FusionPlan> PlanOf(const HloModule& module) {
  return exec::fusion::MakeFusionPlan(*module.entry_computation()->root_instruction());
}

// The node of the fused instruction named `name`.
const exec::fusion::Node& NodeNamed(const exec::fusion::FusionPlan& plan, const std::string& name) {
  for (const exec::fusion::Node& node : plan.nodes) {
    if (node.instr->name() == name) return node;
  }
  ADD_FAILURE() << "no node " << name;
  return plan.nodes.back();
}

TEST(FusionPlan, ConvolutionsAreSourcesNumberedAfterTheOperands) {
  const auto module = Parse(R"(HloModule conv
fc {
  x = f32[2,5,3] parameter(0)
  k = f32[3,3,4] parameter(1)
  bias = f32[4] parameter(2)
  c = f32[2,5,4] convolution(x, k), window={size=3 pad=1_1}, dim_labels=b0f_0io->b0f
  bb = f32[2,5,4] broadcast(bias), dimensions={2}
  ROOT a = f32[2,5,4] add(c, bb)
}
ENTRY main {
  x = f32[2,5,3] parameter(0)
  k = f32[3,3,4] parameter(1)
  bias = f32[4] parameter(2)
  ROOT f = f32[2,5,4] fusion(x, k, bias), kind=kOutput, calls=fc
})");
  const auto plan = PlanOf(*module);
  EXPECT_EQ(plan->num_operands, 3);
  ASSERT_EQ(plan->convolutions.size(), 1u);
  EXPECT_EQ(plan->convolutions[0]->name(), "c");
  const exec::fusion::Node& conv = NodeNamed(*plan, "c");
  EXPECT_EQ(conv.kind, exec::fusion::NodeKind::kSource);
  EXPECT_EQ(conv.fusion_operand, 3);
  EXPECT_TRUE(conv.in_place);
  EXPECT_TRUE(conv.operands.empty());
  // The convolution's operands are not planned: x and k have no nodes.
  for (const exec::fusion::Node& node : plan->nodes) {
    EXPECT_NE(node.instr->name(), "x");
    EXPECT_NE(node.instr->name(), "k");
  }
  // The output never takes over a convolution's result (not an operand).
  EXPECT_TRUE(plan->reuse_candidates.empty());
  EXPECT_TRUE(plan->root_to_output);
}

// A chain of five values needs two scratch tiles: each is freed after its
// last reader.
TEST(FusionPlan, SlotsAreReusedByLiveness) {
  const auto module = Parse(R"(HloModule chain
fc {
  p0 = f32[64] parameter(0)
  p1 = f32[64] parameter(1)
  a = f32[64] add(p0, p1)
  b = f32[64] exponential(a)
  c = f32[64] tanh(b)
  d = f32[64] negate(c)
  ROOT r = f32[64] add(d, p0)
}
ENTRY main {
  p0 = f32[64] parameter(0)
  p1 = f32[64] parameter(1)
  ROOT f = f32[64] fusion(p0, p1), kind=kLoop, calls=fc
})");
  const auto plan = PlanOf(*module);
  EXPECT_EQ(plan->num_slots, 2);
  EXPECT_NE(NodeNamed(*plan, "a").slot, NodeNamed(*plan, "b").slot);
  EXPECT_EQ(NodeNamed(*plan, "a").slot, NodeNamed(*plan, "c").slot);
  EXPECT_EQ(NodeNamed(*plan, "r").slot, -1);   // into the output
  EXPECT_EQ(NodeNamed(*plan, "p0").slot, -1);  // read in place
  EXPECT_EQ(plan->reuse_candidates, (std::vector<int64_t>{0, 1}));
}

// A pad of the innermost dim of a parameter is copied as a column band.
TEST(FusionPlan, Bf16SourcesReadOnlyByArithmeticStayBf16InTheTile) {
  const auto module = Parse(R"(HloModule raw
fc {
  a = bf16[4,6] parameter(0)
  b = bf16[24] parameter(1)
  c = bf16[4,6] parameter(2)
  d = bf16[4,6] parameter(3)
  rb = bf16[4,6] reshape(b)
  m = bf16[4,6] multiply(a, rb)
  n = bf16[4,6] negate(a)
  lt = pred[4,6] compare(c, m), direction=LT
  s = bf16[4,6] select(lt, n, c)
  ROOT r = bf16[4,6] add(s, d)
}
ENTRY main {
  a = bf16[4,6] parameter(0)
  b = bf16[24] parameter(1)
  c = bf16[4,6] parameter(2)
  d = bf16[4,6] parameter(3)
  ROOT f = bf16[4,6] fusion(a, b, c, d), kind=kLoop, calls=fc
})");
  const auto plan = PlanOf(*module);
  // a: read by multiply and negate; b: through a reshape by multiply; d: by
  // the root add. c is also read by compare and select, which need f32.
  for (const char* name : {"a", "b", "rb", "d"}) {
    const exec::fusion::Node& node = NodeNamed(*plan, name);
    EXPECT_TRUE(node.raw_bf16) << name;
    EXPECT_EQ(node.slot, -1) << name;
  }
  EXPECT_FALSE(NodeNamed(*plan, "c").raw_bf16);
  EXPECT_GE(NodeNamed(*plan, "c").slot, 0);
  EXPECT_FALSE(NodeNamed(*plan, "m").raw_bf16);  // computed: f32 values in the tile
}

TEST(FusionPlan, AffineMapsMergeContiguousDimsAndShortRowsArePeriodic) {
  // RoPE on the projection's layout: x [2,3,4,2] (pairs last) read as is,
  // through a reverse of the pairs, and a table broadcast over the heads.
  const auto module = Parse(R"(HloModule rope
fc {
  p0 = f32[2,3,4,2] parameter(0)
  p1 = f32[2,4,2] parameter(1)
  rv = f32[2,3,4,2] reverse(p0), dimensions={3}
  b = f32[2,3,4,2] broadcast(p1), dimensions={0,2,3}
  t = f32[3,2,4,2] transpose(p0), dimensions={1,0,2,3}
  m = f32[2,3,4,2] multiply(rv, b)
  tt = f32[2,3,4,2] transpose(t), dimensions={1,0,2,3}
  ROOT a = f32[2,3,4,2] add(m, tt)
}
ENTRY main {
  p0 = f32[2,3,4,2] parameter(0)
  p1 = f32[2,4,2] parameter(1)
  ROOT f = f32[2,3,4,2] fusion(p0, p1), kind=kLoop, calls=fc
})");
  const auto plan = PlanOf(*module);
  // The pairs reversed: the outer dims merge into the node's own index, the
  // pair is a period of 2 reading (1, 0).
  const exec::fusion::Node& rv = NodeNamed(*plan, "rv");
  EXPECT_EQ(rv.run_dims, (std::vector<int64_t>{24, 2}));
  EXPECT_EQ(rv.run_strides, (std::vector<int64_t>{2, -1}));
  EXPECT_EQ(rv.period, 2);
  EXPECT_EQ(rv.period_map, (std::vector<int64_t>{1, 0}));
  // The broadcast: heads repeated, each row of 8 (the pairs of 4) contiguous.
  const exec::fusion::Node& b = NodeNamed(*plan, "b");
  EXPECT_EQ(b.run_dims, (std::vector<int64_t>{2, 3, 8}));
  EXPECT_EQ(b.run_strides, (std::vector<int64_t>{8, 0, 1}));
  EXPECT_EQ(b.period, 0);
  // A transpose of the outer dims keeps rows of 8 and is not periodic.
  const exec::fusion::Node& t = NodeNamed(*plan, "t");
  EXPECT_EQ(t.run_dims, (std::vector<int64_t>{3, 2, 8}));
  EXPECT_EQ(t.run_strides, (std::vector<int64_t>{8, 24, 1}));
  EXPECT_EQ(t.period, 0);
}

TEST(FusionPlan, InnermostPadsOfParametersAreColumnBands) {
  const auto module = Parse(R"(HloModule pad
fc {
  p0 = f32[4,6] parameter(0)
  z = f32[] constant(0)
  ROOT q = f32[4,9] pad(p0, z), padding=0_0x2_1
}
ENTRY main {
  p0 = f32[4,6] parameter(0)
  ROOT f = f32[4,9] fusion(p0), kind=kLoop, calls=fc
})");
  const auto plan = PlanOf(*module);
  const exec::fusion::Node& pad = NodeNamed(*plan, "q");
  EXPECT_EQ(pad.row_width, 9);
  EXPECT_EQ(pad.column_start, (std::vector<int64_t>{2}));
  EXPECT_EQ(pad.column_width, (std::vector<int64_t>{6}));
  ASSERT_EQ(pad.column_source.size(), 1u);
  EXPECT_EQ(plan->nodes[pad.column_source[0]].instr->name(), "p0");
  EXPECT_EQ(plan->broadcast_sources, (std::vector<int64_t>{0}));
}

TEST(FusionPlan, InputFusionsFoldInnermostRows) {
  const auto module = Parse(R"(HloModule input
mx {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT m = f32[] maximum(a, b)
}
fc {
  p0 = f32[4,3,8] parameter(0)
  init = f32[] parameter(1)
  e = f32[4,3,8] exponential(p0)
  ROOT r = f32[4] reduce(e, init), dimensions={2,1}, to_apply=mx
}
ENTRY main {
  p0 = f32[4,3,8] parameter(0)
  init = f32[] parameter(1)
  ROOT f = f32[4] fusion(p0, init), kind=kInput, calls=fc
})");
  const auto plan = PlanOf(*module);
  EXPECT_TRUE(plan->input);
  EXPECT_EQ(plan->row, 24);
  EXPECT_EQ(plan->reducer, exec::ReducerKind::kMaximum);
  EXPECT_EQ(plan->init_operand, 1);
  EXPECT_EQ(plan->shape.ToString(), "f32[4,3,8]");
  EXPECT_TRUE(plan->reuse_candidates.empty());
}

TEST(FusionPlan, RefusesWhatItCannotRun) {
  // An elementwise op read through a transpose would have to be computed at
  // other indices than the tile's: the fusion pass never makes one.
  const std::string gathered = R"(HloModule bad
fc {
  a = f32[4,8] parameter(0)
  n = f32[4,8] negate(a)
  t = f32[8,4] transpose(n), dimensions={1,0}
  ROOT e = f32[8,4] exponential(t)
}
ENTRY main {
  x = f32[4,8] parameter(0)
  ROOT f = f32[8,4] fusion(x), kind=kLoop, calls=fc
})";
  try {
    Executor executor(*Parse(gathered));
    FAIL() << "an elementwise op under a transpose in a loop fusion ran";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("may feed an index map in a loop fusion"),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("'f' (fusion)"), std::string::npos) << e.what();
  }
  // kInput fusions: a reduce root of innermost f32 rows only.
  const auto refused = [](const std::string& root_lines, const std::string& result,
                          const std::string& why) {
    const std::string text = fmt::format(R"(HloModule input
add {{
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}}
fc {{
  a = f32[4,8] parameter(0)
  n = f32[4,8] negate(a)
  zero = f32[] constant(0)
  {0}
}}
ENTRY main {{
  x = f32[4,8] parameter(0)
  ROOT f = {1} fusion(x), kind=kInput, calls=fc
}})",
                                         root_lines, result);
    ExpectRefused(text, {why, "input fusion"});
  };
  refused("ROOT r = f32[4,8] negate(n)", "f32[4,8]", "must be a reduce");
  refused("ROOT r = f32[8] reduce(n, zero), dimensions={0}, to_apply=add", "f32[8]",
          "innermost dims");
}

TEST(FusionPlan, RefusesAConvolutionOfFusedValues) {
  ExpectRefused(R"(HloModule m
fc {
  x = f32[2,5,3] parameter(0)
  k = f32[3,3,4] parameter(1)
  n = f32[2,5,3] negate(x)
  ROOT c = f32[2,5,4] convolution(n, k), window={size=3 pad=1_1}, dim_labels=b0f_0io->b0f
}
ENTRY main {
  x = f32[2,5,3] parameter(0)
  k = f32[3,3,4] parameter(1)
  ROOT f = f32[2,5,4] fusion(x, k), kind=kOutput, calls=fc
})",
                {"a fused convolution must read fused parameters", "'n' (negate)"});
}

}  // namespace
}  // namespace weft::runtime
