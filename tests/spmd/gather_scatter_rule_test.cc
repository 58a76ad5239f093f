// Gather and scatter rules (src/spmd/gather_scatter_rule.h) as propagation
// uses them: the dim families XLA's propagation relates (index pass-through,
// operand pass-through, explicit batching dims, iota-parallel dims), each
// forward and backward, alone and merged, with partial replication, uneven
// splits and device orders other than iota. Expected shardings follow XLA's
// gather/scatter propagation rules (hlo_sharding_util and
// sharding_propagation in SPMD mode); the modules are this project's own.
#include "gather_scatter_rule.h"

#include <gtest/gtest.h>

#include "propagation_test_util.h"
#include "weft/hlo/parser.h"
#include "weft/spmd/sharding_propagation.h"

namespace weft {
namespace {

using testing::Propagate;
using testing::Propagated;

std::string Module(int devices, const std::string& body, const std::string& computations = "") {
  return "HloModule m, num_partitions=" + std::to_string(devices) + "\n\n" + computations +
         "add {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT sum = f32[] "
         "add(a, b)\n}\n\nENTRY main {\n" +
         body + "}\n";
}

// A lookup whose two index components are iotas along the indices' dims 1
// and 2: operand dims 0 and 1 are parallel to them (and to result dims 0
// and 1); operand dim 2 passes through to result dim 2. `operand` and `idx`
// lines may carry annotations.
std::string ParallelGather(const std::string& operand_sharding, const std::string& idx_sharding,
                           const std::string& gather_sharding) {
  return Module(8, R"(
  p = f32[6,4,3] parameter(0)
  operand = f32[6,4,3] copy(p))" +
                       operand_sharding + R"(
  rows = s32[1,6,4] iota(), iota_dimension=1)" +
                       idx_sharding + R"(
  cols = s32[1,6,4] iota(), iota_dimension=2
  idx = s32[2,6,4] concatenate(rows, cols), dimensions={0}
  g = f32[6,4,3] gather(operand, idx), offset_dims={2}, collapsed_slice_dims={0,1}, start_index_map={0,1}, index_vector_dim=0, slice_sizes={1,1,3})" +
                       gather_sharding + R"(
  ROOT r = f32[6,4,3] copy(g)
)");
}

const HloInstruction* FindOp(const HloModule& m, HloOpcode op) {
  for (const HloInstruction* i : m.entry_computation()->instructions()) {
    if (i->opcode() == op) return i;
  }
  return nullptr;
}

TEST(GatherScatterRuleTest, IotaComponentsMakeParallelDims) {
  auto m = ParseHloModule(ParallelGather("", "", ""));
  EXPECT_EQ(spmd::ParallelDims(*FindOp(*m, HloOpcode::kGather)),
            (std::vector<spmd::ParallelDim>{{0, 1}, {1, 2}}));
}

TEST(GatherScatterRuleTest, ParallelDimsSeeBroadcastsConstantsAndCopies) {
  // A broadcast iota, an s32 constant counting along its dim 1 and a
  // copied concatenate: both components are parallel.
  auto m = ParseHloModule(Module(4, R"(
  operand = f32[3,5,2] parameter(0)
  i = s32[3] iota(), iota_dimension=0
  rows = s32[1,3,5] broadcast(i), dimensions={1}
  cols = s32[1,3,5] constant({{{0,1,2,3,4},{0,1,2,3,4},{0,1,2,3,4}}})
  cat = s32[2,3,5] concatenate(rows, cols), dimensions={0}
  idx = s32[2,3,5] copy(cat)
  ROOT g = f32[3,5,2] gather(operand, idx), offset_dims={2}, collapsed_slice_dims={0,1}, start_index_map={0,1}, index_vector_dim=0, slice_sizes={1,1,2}
)"));
  EXPECT_EQ(spmd::ParallelDims(*FindOp(*m, HloOpcode::kGather)),
            (std::vector<spmd::ParallelDim>{{0, 1}, {1, 2}}));
}

TEST(GatherScatterRuleTest, ParallelDimsNeedMatchingSizesDistinctDimsAndSlicesOfOne) {
  auto parallel = [](const std::string& body) {
    auto m = ParseHloModule(Module(4, body));
    return spmd::ParallelDims(*FindOp(*m, HloOpcode::kGather));
  };
  // Operand dim 0 has 7 rows, the iota counts 6: no parallel dims at all.
  EXPECT_TRUE(parallel(R"(
  operand = f32[7,4] parameter(0)
  rows = s32[6,1] iota(), iota_dimension=0
  ROOT g = f32[6,4] gather(operand, rows), offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0}, index_vector_dim=1, slice_sizes={1,4}
)")
                  .empty());
  // Both components count along indices dim 1: the match fails.
  EXPECT_TRUE(parallel(R"(
  operand = f32[6,6] parameter(0)
  a = s32[1,6] iota(), iota_dimension=1
  b = s32[1,6] iota(), iota_dimension=1
  idx = s32[2,6] concatenate(a, b), dimensions={0}
  ROOT g = f32[6] gather(operand, idx), offset_dims={}, collapsed_slice_dims={0,1}, start_index_map={0,1}, index_vector_dim=0, slice_sizes={1,1}
)")
                  .empty());
  // A slice of 2 along the indexed dim: that component is not parallel.
  EXPECT_TRUE(parallel(R"(
  operand = f32[6,4] parameter(0)
  rows = s32[6,1] iota(), iota_dimension=0
  ROOT g = f32[6,2,4] gather(operand, rows), offset_dims={1,2}, collapsed_slice_dims={}, start_index_map={0}, index_vector_dim=1, slice_sizes={2,4}
)")
                  .empty());
  // Only the iota half of a concatenate with a parameter is parallel.
  EXPECT_EQ(parallel(R"(
  operand = f32[6,4] parameter(0)
  rows = s32[6,1] iota(), iota_dimension=0
  cols = s32[6,1] parameter(1)
  idx = s32[6,2] concatenate(rows, cols), dimensions={1}
  ROOT g = f32[6] gather(operand, idx), offset_dims={}, collapsed_slice_dims={0,1}, start_index_map={0,1}, index_vector_dim=1, slice_sizes={1,1}
)"),
            (std::vector<spmd::ParallelDim>{{0, 0}}));
}

TEST(GatherScatterRuleTest, ParallelGatherForwardFromTheOperand) {
  // Odd device order, uneven split of 6 rows 4 ways.
  auto p = Propagate(ParallelGather(", sharding={devices=[4,2,1]0,4,1,5,2,6,3,7}", "", ""));
  EXPECT_SHARDING(p, "g", "{devices=[4,2,1]0,4,1,5,2,6,3,7}");
  EXPECT_SHARDING(p, "idx", "{devices=[1,4,2]0,4,1,5,2,6,3,7}");
}

TEST(GatherScatterRuleTest, ParallelGatherForwardFromTheIndices) {
  auto p = Propagate(ParallelGather("", ", sharding={devices=[1,8,1]0,2,4,6,1,3,5,7}", ""));
  EXPECT_SHARDING(p, "g", "{devices=[8,1,1]0,2,4,6,1,3,5,7}");
  EXPECT_SHARDING(p, "operand", "{devices=[8,1,1]0,2,4,6,1,3,5,7}");
}

TEST(GatherScatterRuleTest, ParallelGatherBackwardWithPartialReplication) {
  auto p = Propagate(ParallelGather(
      "", "", ", sharding={devices=[2,1,2,2]0,1,2,3,4,5,6,7 last_tile_dim_replicate}"));
  // Result dim 0 is parallel to operand dim 0 and indices dim 1; result dim
  // 2 passes through to operand dim 2 and means nothing to the indices.
  EXPECT_SHARDING(p, "operand", "{devices=[2,1,2,2]0,1,2,3,4,5,6,7 last_tile_dim_replicate}");
  EXPECT_SHARDING(p, "idx", "{devices=[1,2,1,4]0,1,2,3,4,5,6,7 last_tile_dim_replicate}");
}

TEST(GatherScatterRuleTest, SwappedIndexMapLinksTheOtherOperandDims) {
  // start_index_map={1,0}: component 0 (rows, indices dim 1) indexes
  // operand dim 1, component 1 (cols, indices dim 2) operand dim 0.
  auto p = Propagate(Module(4, R"(
  p = f32[4,6,3] parameter(0)
  operand = f32[4,6,3] copy(p)
  rows = s32[1,6,4] iota(), iota_dimension=1
  cols = s32[1,6,4] iota(), iota_dimension=2
  idx = s32[2,6,4] concatenate(rows, cols), dimensions={0}
  g = f32[6,4,3] gather(operand, idx), offset_dims={2}, collapsed_slice_dims={0,1}, start_index_map={1,0}, index_vector_dim=0, slice_sizes={1,1,3}, sharding={devices=[1,4,1]<=[4]}
  ROOT r = f32[6,4,3] copy(g)
)"));
  EXPECT_SHARDING(p, "operand", "{devices=[4,1,1]<=[4]}");
  EXPECT_SHARDING(p, "idx", "{devices=[1,1,4]<=[4]}");
}

// Indices half iota along dim 1, half a parameter: operand dim 0 is
// parallel; operand dim 1 is indexed by data (trivially sliced, never
// propagated); operand dims 2 and 3 pass through.
std::string MergedGather(const std::string& operand_sharding, const std::string& data_sharding,
                         const std::string& gather_sharding) {
  return Module(4, R"(
  p = f32[6,5,2,3] parameter(0)
  operand = f32[6,5,2,3] copy(p))" +
                       operand_sharding + R"(
  rows = s32[1,6,4] iota(), iota_dimension=1
  q = s32[1,6,4] parameter(1)
  data = s32[1,6,4] copy(q))" +
                       data_sharding + R"(
  idx = s32[2,6,4] concatenate(rows, data), dimensions={0}
  g = f32[6,4,2,3] gather(operand, idx), offset_dims={2,3}, collapsed_slice_dims={0,1}, start_index_map={0,1}, index_vector_dim=0, slice_sizes={1,1,2,3})" +
                       gather_sharding + R"(
  ROOT r = f32[6,4,2,3] copy(g)
)");
}

TEST(GatherScatterRuleTest, ParallelAndOperandPassThroughMergeForward) {
  auto p = Propagate(MergedGather(", sharding={devices=[2,1,2,1]0,2,1,3}", "", ""));
  EXPECT_SHARDING(p, "g", "{devices=[2,1,2,1]0,2,1,3}");
  EXPECT_SHARDING(p, "idx", "{devices=[1,2,1,2]0,2,1,3 last_tile_dim_replicate}");
}

TEST(GatherScatterRuleTest, TriviallySlicedOperandDimIsDropped) {
  auto p = Propagate(MergedGather(", sharding={devices=[2,2,1,1]<=[4]}", "", ""));
  EXPECT_SHARDING(p, "g", "{devices=[2,1,1,1,2]<=[4] last_tile_dim_replicate}");
}

TEST(GatherScatterRuleTest, ParallelAndIndexPassThroughFromTheIndices) {
  auto p = Propagate(MergedGather("", ", sharding={devices=[1,2,2]<=[4]}", ""));
  // The data half carries the concatenate's split; the gather takes both
  // index dims, the operand only the parallel one.
  EXPECT_SHARDING(p, "g", "{devices=[2,2,1,1]<=[4]}");
  EXPECT_SHARDING(p, "operand", "{devices=[2,1,1,1,2]<=[4] last_tile_dim_replicate}");
}

TEST(GatherScatterRuleTest, AResultSplitOnlyAlongIndexDimsLeavesTheOperand) {
  // No parallel dim (the indices are data): the operand shares nothing with
  // result dims 0 and 1, and XLA offers it nothing; the indices take the split.
  auto p = Propagate(Module(4, R"(
  p = f32[6,5] parameter(0)
  operand = f32[6,5] copy(p)
  q = s32[4,1] parameter(1)
  idx = s32[4,1] copy(q)
  g = f32[4,5] gather(operand, idx), offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0}, index_vector_dim=1, slice_sizes={1,5}, sharding={devices=[4,1]<=[4]}
  ROOT r = f32[4,5] copy(g)
)"));
  EXPECT_EQ(p.ShardingOf("operand"), "(none)");
  EXPECT_SHARDING(p, "idx", "{devices=[4,1]<=[4]}");
}

TEST(GatherScatterRuleTest, ExplicitBatchDimsLinkOperandIndicesAndResult) {
  // operand_batching_dims={0} with start_indices_batching_dims={0}: operand
  // dim 0, indices dim 0 and result dim 0 are one dim.
  auto text = [](const std::string& operand_sharding, const std::string& gather_sharding) {
    return Module(4, R"(
  p = f32[4,8,6] parameter(0)
  operand = f32[4,8,6] copy(p))" +
                         operand_sharding + R"(
  q = s32[4,5,1] parameter(1)
  idx = s32[4,5,1] copy(q)
  g = f32[4,5,6] gather(operand, idx), offset_dims={2}, collapsed_slice_dims={1}, operand_batching_dims={0}, start_indices_batching_dims={0}, start_index_map={1}, index_vector_dim=2, slice_sizes={1,1,6})" +
                         gather_sharding + R"(
  ROOT r = f32[4,5,6] copy(g)
)");
  };
  auto forward = Propagate(text(", sharding={devices=[2,1,2]<=[4]}", ""));
  EXPECT_SHARDING(forward, "g", "{devices=[2,1,2]<=[4]}");
  EXPECT_SHARDING(forward, "idx", "{devices=[2,1,1,2]<=[4] last_tile_dim_replicate}");
  auto backward = Propagate(text("", ", sharding={devices=[2,2,1]<=[4]}"));
  EXPECT_SHARDING(backward, "operand", "{devices=[2,1,1,2]<=[4] last_tile_dim_replicate}");
  EXPECT_SHARDING(backward, "idx", "{devices=[2,2,1]<=[4]}");
}

// A scatter whose indices count along their dims 1 and 2 (parallel to
// operand dims 0 and 1 and to update dims 0 and 1), window dim 2 whole.
std::string ParallelScatter(const std::string& operand_sharding, const std::string& idx_sharding,
                            const std::string& update_sharding,
                            const std::string& scatter_sharding) {
  return Module(8, R"(
  p = f32[6,4,3] parameter(0)
  operand = f32[6,4,3] copy(p))" +
                       operand_sharding + R"(
  rows = s32[1,6,4] iota(), iota_dimension=1)" +
                       idx_sharding + R"(
  cols = s32[1,6,4] iota(), iota_dimension=2
  idx = s32[2,6,4] concatenate(rows, cols), dimensions={0}
  u = f32[6,4,3] parameter(1)
  update = f32[6,4,3] copy(u))" +
                       update_sharding + R"(
  s = f32[6,4,3] scatter(operand, idx, update), update_window_dims={2}, inserted_window_dims={0,1}, scatter_dims_to_operand_dims={0,1}, index_vector_dim=0, to_apply=add)" +
                       scatter_sharding + R"(
  ROOT r = f32[6,4,3] copy(s)
)");
}

TEST(GatherScatterRuleTest, ParallelScatterForwardFromEachInput) {
  const std::string split = "{devices=[4,1,2]0,1,4,5,2,3,6,7}";
  auto from_operand = Propagate(ParallelScatter(", sharding=" + split, "", "", ""));
  EXPECT_SHARDING(from_operand, "s", split);
  auto from_update = Propagate(ParallelScatter("", "", ", sharding=" + split, ""));
  EXPECT_SHARDING(from_update, "s", split);
  EXPECT_SHARDING(from_update, "operand", split);
  auto from_indices =
      Propagate(ParallelScatter("", ", sharding={devices=[1,8,1]0,1,4,5,2,3,6,7}", "", ""));
  EXPECT_SHARDING(from_indices, "s", "{devices=[8,1,1]0,1,4,5,2,3,6,7}");
  EXPECT_SHARDING(from_indices, "update", "{devices=[8,1,1]0,1,4,5,2,3,6,7}");
}

TEST(GatherScatterRuleTest, ParallelScatterBackward) {
  auto p = Propagate(ParallelScatter("", "", "", ", sharding={devices=[2,2,2]<=[8]}"));
  EXPECT_SHARDING(p, "operand", "{devices=[2,2,2]<=[8]}");
  EXPECT_SHARDING(p, "update", "{devices=[2,2,2]<=[8]}");
  // The indices learn from the update (dims 0 and 1 -> indices dims 1 and 2).
  EXPECT_SHARDING(p, "idx", "{devices=[1,2,2,2]<=[8] last_tile_dim_replicate}");
}

// The single-operand lookup-table update: row indices are data, updates
// [n, 5] rows of a [6, 5] table.
std::string RowScatter(const std::string& operand_sharding, const std::string& idx_sharding,
                       const std::string& update_sharding, const std::string& scatter_sharding) {
  return Module(4, R"(
  p = f32[6,5] parameter(0)
  operand = f32[6,5] copy(p))" +
                       operand_sharding + R"(
  q = s32[4] parameter(1)
  idx = s32[4] copy(q))" +
                       idx_sharding + R"(
  u = f32[4,5] parameter(2)
  update = f32[4,5] copy(u))" +
                       update_sharding + R"(
  s = f32[6,5] scatter(operand, idx, update), update_window_dims={1}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=add)" +
                       scatter_sharding + R"(
  ROOT r = f32[6,5] copy(s)
)");
}

TEST(GatherScatterRuleTest, ScatterUpdatesAndIndicesShareTheirScatterDims) {
  auto from_update = Propagate(
      RowScatter("", "", ", sharding={devices=[2,1,2]<=[4] last_tile_dim_replicate}", ""));
  EXPECT_SHARDING(from_update, "idx", "{devices=[2,2]<=[4] last_tile_dim_replicate}");
  auto from_indices = Propagate(RowScatter("", ", sharding={devices=[4]<=[4]}", "", ""));
  EXPECT_SHARDING(from_indices, "update", "{devices=[4,1]<=[4]}");
}

TEST(GatherScatterRuleTest, ScatterUpdateWindowDimsPassThroughBothWays) {
  // Update window dim 1 is operand dim 1 (whole): result <-> update.
  auto forward = Propagate(RowScatter("", "", ", sharding={devices=[1,4]<=[4]}", ""));
  EXPECT_SHARDING(forward, "s", "{devices=[1,4]<=[4]}");
  auto backward = Propagate(RowScatter("", "", "", ", sharding={devices=[1,4]<=[4]}"));
  EXPECT_SHARDING(backward, "update", "{devices=[1,4]<=[4]}");
  EXPECT_SHARDING(backward, "operand", "{devices=[1,4]<=[4]}");
  // The result's rows (trivially indexed) mean nothing to the updates, and
  // the indices learn only from the updates.
  auto rows = Propagate(RowScatter("", "", "", ", sharding={devices=[4,1]<=[4]}"));
  EXPECT_EQ(rows.ShardingOf("idx"), "(none)");
  EXPECT_SHARDING(rows, "operand", "{devices=[4,1]<=[4]}");
}

TEST(GatherScatterRuleTest, ScatterUpdateTakesResultAndIndicesMerged) {
  // The result splits the window dim, the indices the scatter dim: the
  // update (unsharded) takes both.
  auto p = Propagate(RowScatter("", ", sharding={devices=[2,2]<=[4] last_tile_dim_replicate}", "",
                                ", sharding={devices=[1,2,2]0,2,1,3 last_tile_dim_replicate}"));
  EXPECT_SHARDING(p, "update", "{devices=[2,2]<=[4]}");
}

TEST(GatherScatterRuleTest, VariadicScatterElementsKeepTheirOwnShardings) {
  auto p = Propagate(Module(4, R"(
  p0 = f32[6,8] parameter(0)
  a = f32[6,8] copy(p0), sharding={devices=[1,4]<=[4]}
  p1 = f32[6,8] parameter(1)
  b = f32[6,8] copy(p1), sharding={devices=[1,2,2]<=[4] last_tile_dim_replicate}
  q = s32[3] parameter(2)
  idx = s32[3] copy(q)
  u0 = f32[3,8] parameter(3)
  u1 = f32[3,8] parameter(4)
  s = (f32[6,8], f32[6,8]) scatter(a, b, idx, u0, u1), update_window_dims={1}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=pair
  ROOT r = f32[6,8] get-tuple-element(s), index=1
)",
                            R"(pair {
  x0 = f32[] parameter(0)
  x1 = f32[] parameter(1)
  y0 = f32[] parameter(2)
  y1 = f32[] parameter(3)
  s0 = f32[] add(x0, y0)
  s1 = f32[] add(x1, y1)
  ROOT t = (f32[], f32[]) tuple(s0, s1)
}

)"));
  EXPECT_SHARDING(p, "s", "{{devices=[1,4]<=[4]}, {devices=[1,2,2]<=[4] last_tile_dim_replicate}}");
}

TEST(GatherScatterRuleTest, ExplainNamesTheGatherRule) {
  auto p = Propagate(ParallelGather(", sharding={devices=[8,1,1]<=[8]}", "", ""));
  const std::string why = ExplainSharding(*p.module, p.result, "g");
  EXPECT_NE(why.find("gather"), std::string::npos) << why;
}

}  // namespace
}  // namespace weft
