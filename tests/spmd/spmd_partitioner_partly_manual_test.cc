// Partly manual regions (`last_tile_dims={manual}`, what jax.shard_map over
// some mesh axes emits): a shard_map over x of an X x Y mesh whose dot and
// reduce are sharded over y inside the region, with a psum over x, agrees
// with the same computation written without a region and run unsharded;
// the collectives the partitioner adds stay within the manual groups; what
// a region cannot hold is refused by name.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <limits>
#include <set>

#include "sharded_run_test_util.h"
#include "weft/base/error.h"
#include "weft/spmd/sharding_propagation.h"
#include "weft/spmd/spmd_partitioner.h"

namespace weft {
namespace {

using testing::kAdd;

// Devices x * Y + y. Rows of p split over x (manual), w whole in every
// group and split by columns over y inside the region; the row sums are
// summed over y within each group and psum'd over x across groups.
// `annotated`: every region instruction carries its sharding; otherwise
// only the edges and the Sharding constraint do and propagation fills in.
std::string ShardMap(int64_t X, int64_t Y, bool annotated) {
  const int64_t n = X * Y;
  std::string psum_groups;
  for (int64_t y = 0; y < Y; ++y) {
    std::string group;
    for (int64_t x = 0; x < X; ++x) group += fmt::format("{}{}", x ? "," : "", x * Y + y);
    psum_groups += fmt::format("{}{{{}}}", y ? "," : "", group);
  }
  // Region shardings: rank 2 whole in the group, rank 2 columns over y,
  // rank 1 whole in the group.
  const std::string whole2 =
      fmt::format("{{devices=[1,1,{},{}]<=[{}] last_tile_dims={{manual, replicated}}}}", X, Y, n);
  const std::string cols =
      fmt::format("{{devices=[1,{1},{0}]<=[{0},{1}]T(1,0) last_tile_dims={{manual}}}}", X, Y);
  const std::string whole1 =
      fmt::format("{{devices=[1,{},{}]<=[{}] last_tile_dims={{manual, replicated}}}}", X, Y, n);
  const std::string whole0 =
      fmt::format("{{devices=[{},{}]<=[{}] last_tile_dims={{manual, replicated}}}}", X, Y, n);
  const auto mark = [&](const std::string& s) { return annotated ? ", sharding=" + s : ""; };
  return fmt::format(
      R"(HloModule partly_manual, num_partitions={n}
{add}
ENTRY main {{
  p = f32[8,16] parameter(0), sharding={{devices=[{X},1,{Y}]<=[{n}] last_tile_dim_replicate}}
  w = f32[16,12] parameter(1), sharding={{replicated}}
  m = f32[{rows},16] custom-call(p), custom_call_target="SPMDFullToShardShape", sharding={whole2}
  wm = f32[16,12] custom-call(w), custom_call_target="SPMDFullToShardShape", sharding={whole2}
  c = f32[16,12] custom-call(wm), custom_call_target="Sharding", sharding={cols}
  d = f32[{rows},12] dot(m, c), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}{d}
  e = f32[{rows},12] exponential(d){d}
  z = f32[] constant(0){z}
  r = f32[{rows}] reduce(e, z), dimensions={{1}}, to_apply=add{r}
  ps = f32[{rows}] all-reduce(r), channel_id=1, replica_groups={{{groups}}}, use_global_device_ids=true, to_apply=add{r}
  b = f32[{rows},12] broadcast(ps), dimensions={{0}}{d}
  q = f32[{rows},12] divide(e, b){d}
  o = f32[{rows},12] custom-call(q), custom_call_target="Sharding", sharding={whole2}
  f = f32[8,12] custom-call(o), custom_call_target="SPMDShardToFullShape", sharding={{devices=[{X},1,{Y}]<=[{n}] last_tile_dim_replicate}}
  s = f32[{rows}] custom-call(ps), custom_call_target="Sharding", sharding={whole1}
  fs = f32[{rows}] custom-call(s), custom_call_target="SPMDShardToFullShape", sharding={{replicated}}
  nf = f32[8,12] negate(f), sharding={{devices=[{X},1,{Y}]<=[{n}] last_tile_dim_replicate}}
  ROOT t = (f32[8,12], f32[{rows}]) tuple(nf, fs)
}}
)",
      fmt::arg("n", n), fmt::arg("add", kAdd), fmt::arg("X", X), fmt::arg("Y", Y),
      fmt::arg("rows", 8 / X), fmt::arg("whole2", whole2), fmt::arg("whole1", whole1),
      fmt::arg("cols", cols), fmt::arg("groups", psum_groups), fmt::arg("d", mark(cols)),
      fmt::arg("z", mark(whole0)), fmt::arg("r", mark(whole1)));
}

// The same values without a region: group x's rows are rows
// [x * 8/X, (x+1) * 8/X); the psum adds row i of every group.
std::string Plain(int64_t X) {
  return fmt::format(R"(HloModule plain
{add}
ENTRY main {{
  p = f32[8,16] parameter(0)
  w = f32[16,12] parameter(1)
  d = f32[8,12] dot(p, w), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
  e = f32[8,12] exponential(d)
  z = f32[] constant(0)
  rs = f32[8] reduce(e, z), dimensions={{1}}, to_apply=add
  r2 = f32[{X},{rows}] reshape(rs)
  ps = f32[{rows}] reduce(r2, z), dimensions={{0}}, to_apply=add
  b2 = f32[{X},{rows},12] broadcast(ps), dimensions={{1}}
  b = f32[8,12] reshape(b2)
  q = f32[8,12] divide(e, b)
  nf = f32[8,12] negate(q)
  ROOT t = (f32[8,12], f32[{rows}]) tuple(nf, ps)
}}
)",
                     fmt::arg("add", kAdd), fmt::arg("X", X), fmt::arg("rows", 8 / X));
}

TEST(SpmdPartlyManualTest, AShardMapOverXWithAutoYAgreesWithThePlainModule) {
  for (auto [X, Y] : {std::pair<int64_t, int64_t>{2, 2}, {2, 4}, {4, 2}}) {
    for (uint64_t seed : {1, 2}) {
      const int64_t n = X * Y;
      SCOPED_TRACE(fmt::format("mesh {}x{} seed {}", X, Y, seed));
      const std::unique_ptr<HloModule> module = ParseHloModule(ShardMap(X, Y, seed == 2));
      const compiler::CompiledProgram program =
          compiler::CompileForDevices(*module, {.num_devices = n});
      const std::vector<runtime::HostTensor> inputs =
          runtime::RandomInputs(program.input_shapes, seed, {});
      runtime::LocalCluster cluster(n);
      const std::vector<runtime::HostTensor> sharded = runtime::RunSharded(
          program, inputs, cluster, nullptr, {}, std::numeric_limits<double>::quiet_NaN());
      const std::unique_ptr<HloModule> plain_module = ParseHloModule(Plain(X));
      runtime::Executor plain(*plain_module);
      const std::vector<runtime::HostTensor> want =
          plain.Run(std::vector<runtime::HostTensor>(inputs.begin(), inputs.end()));
      ASSERT_EQ(sharded.size(), 2u);
      EXPECT_LE(runtime::MaxRelativeError(sharded[0], want[0]), 1e-5);
      EXPECT_LE(runtime::MaxRelativeError(sharded[1], want[1]), 1e-5);
      if (::testing::Test::HasFailure()) FAIL() << PrintModule(*program.program);
    }
  }
}

const HloInstruction* Named(const HloComputation& c, const std::string& name) {
  for (const HloInstruction* i : c.instructions()) {
    if (i->name() == name) return i;
  }
  ADD_FAILURE() << "no instruction " << name;
  return nullptr;
}

TEST(SpmdPartlyManualTest, PropagationFillsTheAutoDimsAndCollectivesStayInTheGroups) {
  const std::unique_ptr<HloModule> module = ParseHloModule(ShardMap(2, 2, false));
  PropagateShardings(*module);
  const HloComputation& entry = *module->entry_computation();
  const HloSharding cols = HloSharding::Parse("{devices=[1,2,2]0,2,1,3 last_tile_dims={manual}}");
  const HloSharding whole1 =
      HloSharding::Parse("{devices=[1,2,2]0,1,2,3 last_tile_dims={manual, replicated}}");
  const HloSharding whole2 =
      HloSharding::Parse("{devices=[1,1,2,2]0,1,2,3 last_tile_dims={manual, replicated}}");
  for (const char* name : {"d", "e"}) {
    EXPECT_EQ(*Named(entry, name)->sharding(), cols) << name;
  }
  // q starts from the Sharding constraint on its value and propagation still
  // improves it from e's columns (XLA's current pass: a constraint seeds its
  // operand, it does not fix it); the constraint itself stays whole.
  EXPECT_EQ(*Named(entry, "q")->sharding(), cols);
  EXPECT_EQ(*Named(entry, "o")->sharding(), whole2);
  // Propagation stops at the region's edges.
  EXPECT_EQ(*Named(entry, "p")->sharding(),
            HloSharding::Parse("{devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}"));
  EXPECT_TRUE(Named(entry, "w")->sharding()->IsReplicated());
  for (const char* name : {"r", "ps"}) {
    EXPECT_EQ(*Named(entry, name)->sharding(), whole1) << name;
  }

  const std::unique_ptr<HloModule> partitioned = PartitionModule(*module);
  const HloComputation& out = *partitioned->entry_computation();
  // Each device: its group's 4 rows, its 6 columns of w.
  EXPECT_EQ(Named(out, "d")->shape().ToString(), "f32[4,6]");
  EXPECT_EQ(Named(out, "d")->operand(1)->shape().ToString(), "f32[16,6]");
  // The row sums over y: an all-reduce within each x group.
  const HloInstruction* r = Named(out, "r");
  EXPECT_EQ(r->opcode(), HloOpcode::kAllReduce);
  EXPECT_EQ(r->attrs().replica_groups, (std::vector<std::vector<int64_t>>{{0, 1}, {2, 3}}));
  // The psum over x is copied as written.
  const HloInstruction* ps = Named(out, "ps");
  EXPECT_EQ(ps->opcode(), HloOpcode::kAllReduce);
  EXPECT_EQ(ps->attrs().replica_groups, (std::vector<std::vector<int64_t>>{{0, 2}, {1, 3}}));
  // Every other collective of the region's instructions (named after them)
  // joins devices of one group only (x = device / 2).
  const std::set<std::string> region = {"m", "wm", "c", "d", "e", "z", "r", "b", "q", "o", "s"};
  int collectives = 0;
  for (const HloInstruction* i : out.instructions()) {
    const HloOpcode op = i->opcode();
    if (op != HloOpcode::kAllReduce && op != HloOpcode::kAllGather && op != HloOpcode::kAllToAll &&
        op != HloOpcode::kReduceScatter && op != HloOpcode::kCollectivePermute) {
      continue;
    }
    if (i == ps || !region.count(i->name().substr(0, i->name().find('.')))) continue;
    ++collectives;
    ASSERT_FALSE(i->attrs().replica_groups.empty()) << i->ToString();
    for (const std::vector<int64_t>& group : i->attrs().replica_groups) {
      std::set<int64_t> xs;
      for (int64_t d : group) xs.insert(d / 2);
      EXPECT_EQ(xs.size(), 1u) << i->ToString();
    }
    EXPECT_NE(op, HloOpcode::kCollectivePermute) << i->ToString();  // none needed here
  }
  // r's all-reduce and o's all-gather of the columns.
  EXPECT_GE(collectives, 2);
  // w's columns are cut by each device's id within its group.
  EXPECT_NE(Named(out, "manual-group-local-id"), nullptr);
}

TEST(SpmdPartlyManualTest, TheReplicatedReferenceKeepsTheManualGroups) {
  const std::unique_ptr<HloModule> module = ParseHloModule(ShardMap(2, 2, true));
  runtime::ReplicateOutsideManualRegions(*module);
  const HloComputation& entry = *module->entry_computation();
  const HloSharding whole2 =
      HloSharding::Parse("{devices=[1,1,2,2]0,1,2,3 last_tile_dims={manual, replicated}}");
  for (const char* name : {"m", "c", "d", "q"}) {
    EXPECT_EQ(*Named(entry, name)->sharding(), whole2) << name;
  }
  EXPECT_TRUE(Named(entry, "nf")->sharding()->IsReplicated());
  // Its partitioned program computes each group's piece whole: the only
  // collective inside the region is the psum.
  const std::unique_ptr<HloModule> partitioned = PartitionModule(*module);
  for (const HloInstruction* i : partitioned->entry_computation()->instructions()) {
    if (i->opcode() == HloOpcode::kAllReduce) {
      EXPECT_EQ(i->name(), "ps") << i->ToString();
    }
  }
}

// An entry parameter or result may be each manual group's own value, tiled
// within the group (XLA's SubgroupManual* tests): the program takes and
// gives the group-local tiles.
TEST(SpmdPartlyManualTest, EntryParametersAndResultsMayBeInARegion) {
  std::unique_ptr<HloModule> program =
      PartitionModule(*ParseHloModule(R"(HloModule m, num_partitions=4
ENTRY main {
  p = f32[4,6] parameter(0), sharding={devices=[2,1,2]<=[4] last_tile_dims={manual}}
  ROOT n = f32[4,6] negate(p), sharding={devices=[2,1,2]<=[4] last_tile_dims={manual}}
}
)"));
  const HloComputation* entry = program->entry_computation();
  EXPECT_EQ(entry->parameter_instruction(0)->shape().ToString(), "f32[2,6]");
  EXPECT_EQ(entry->root_instruction()->shape().ToString(), "f32[2,6]");
  EXPECT_EQ(entry->root_instruction()->sharding()->ToString(),
            "{devices=[2,1,2]<=[4] last_tile_dims={manual}}");
}

// Runs `program` on its devices on seeded inputs and expects its one output
// to be `plain`'s (a module without regions, run unsharded).
void ExpectRunMatchesPlain(const compiler::CompiledProgram& program, const std::string& plain,
                           uint64_t seed) {
  const std::vector<runtime::HostTensor> inputs =
      runtime::RandomInputs(program.input_shapes, seed, {});
  runtime::LocalCluster cluster(program.num_devices);
  const std::vector<runtime::HostTensor> sharded = runtime::RunSharded(
      program, inputs, cluster, nullptr, {}, std::numeric_limits<double>::quiet_NaN());
  const std::unique_ptr<HloModule> plain_module = ParseHloModule(plain);
  runtime::Executor reference(*plain_module);
  const std::vector<runtime::HostTensor> want =
      reference.Run(std::vector<runtime::HostTensor>(inputs.begin(), inputs.end()));
  ASSERT_EQ(sharded.size(), 1u);
  EXPECT_LE(runtime::MaxRelativeError(sharded[0], want[0]), 1e-6);
}

// A loop and a conditional inside a region (XLA's WhilePartialManual and
// ConditionalPartialManual): their computations are partitioned within the
// manual groups too, the columns split over y within each group.
TEST(SpmdPartlyManualTest, LoopsAndConditionalsRunInsideARegion) {
  const std::string whole0 = "{devices=[2,2]<=[4] last_tile_dims={manual, replicated}}";
  const std::string cols = "{devices=[1,2,2]<=[2,2]T(1,0) last_tile_dims={manual}}";
  const std::string pair = "{" + whole0 + ", " + cols + "}";
  const std::string text =
      fmt::format(R"(HloModule m, num_partitions=4
again {{
  t = (s32[], f32[2,6]) parameter(0), sharding={pair}
  i = s32[] get-tuple-element(t), index=0, sharding={whole0}
  k = s32[] constant(3), sharding={whole0}
  ROOT lt = pred[] compare(i, k), direction=LT, sharding={whole0}
}}
step {{
  t = (s32[], f32[2,6]) parameter(0), sharding={pair}
  i = s32[] get-tuple-element(t), index=0, sharding={whole0}
  x = f32[2,6] get-tuple-element(t), index=1, sharding={cols}
  one = s32[] constant(1), sharding={whole0}
  i1 = s32[] add(i, one), sharding={whole0}
  sx = f32[2,6] sine(x), sharding={cols}
  x1 = f32[2,6] add(sx, x), sharding={cols}
  ROOT u = (s32[], f32[2,6]) tuple(i1, x1), sharding={pair}
}}
flip {{
  a = f32[2,6] parameter(0), sharding={cols}
  ROOT n = f32[2,6] negate(a), sharding={cols}
}}
keep {{
  a = f32[2,6] parameter(0), sharding={cols}
  ROOT c = f32[2,6] copy(a), sharding={cols}
}}
ENTRY main {{
  p = f32[4,6] parameter(0), sharding={{devices=[2,1,2]<=[4] last_tile_dim_replicate}}
  m = f32[2,6] custom-call(p), custom_call_target="SPMDFullToShardShape", sharding={{devices=[1,1,2,2]<=[4] last_tile_dims={{manual, replicated}}}}
  c = f32[2,6] custom-call(m), custom_call_target="Sharding", sharding={cols}
  zero = s32[] constant(0), sharding={whole0}
  t = (s32[], f32[2,6]) tuple(zero, c), sharding={pair}
  w = (s32[], f32[2,6]) while(t), condition=again, body=step, sharding={pair}
  x = f32[2,6] get-tuple-element(w), index=1, sharding={cols}
  yes = pred[] constant(true), sharding={whole0}
  no = pred[] constant(false), sharding={whole0}
  n = f32[2,6] conditional(yes, x, x), true_computation=flip, false_computation=keep, sharding={cols}
  k = f32[2,6] conditional(no, n, n), true_computation=flip, false_computation=keep, sharding={cols}
  o = f32[2,6] custom-call(k), custom_call_target="Sharding", sharding={{devices=[1,1,2,2]<=[4] last_tile_dims={{manual, replicated}}}}
  ROOT f = f32[4,6] custom-call(o), custom_call_target="SPMDShardToFullShape", sharding={{devices=[2,1,2]<=[4] last_tile_dim_replicate}}
}}
)",
                  fmt::arg("pair", pair), fmt::arg("whole0", whole0), fmt::arg("cols", cols));
  const std::unique_ptr<HloModule> module = ParseHloModule(text);
  const compiler::CompiledProgram program =
      compiler::CompileForDevices(*module, {.num_devices = 4});
  // The loop's value stays split by columns within each group.
  int64_t loops = 0;
  for (const HloComputation* c : program.program->computations()) {
    for (const HloInstruction* i : c->instructions()) {
      if (i->opcode() != HloOpcode::kWhile) continue;
      ++loops;
      EXPECT_EQ(i->while_body()->parameter_instruction(0)->shape().ToString(), "(s32[], f32[2,3])");
    }
  }
  EXPECT_EQ(loops, 1);
  ExpectRunMatchesPlain(program, R"(HloModule plain
ENTRY main {
  p = f32[4,6] parameter(0)
  s1 = f32[4,6] sine(p)
  x1 = f32[4,6] add(s1, p)
  s2 = f32[4,6] sine(x1)
  x2 = f32[4,6] add(s2, x1)
  s3 = f32[4,6] sine(x2)
  x3 = f32[4,6] add(s3, x2)
  ROOT n = f32[4,6] negate(x3)
}
)",
                        5);
}

// A ppermute across the manual groups (XLA's PartitionCollectivePermute):
// copied as written on each device's tile; here it swaps the groups' rows,
// each group's columns split over y.
TEST(SpmdPartlyManualTest, ACollectivePermuteMovesTilesBetweenGroups) {
  const std::unique_ptr<HloModule> module = ParseHloModule(R"(HloModule m, num_partitions=4
ENTRY main {
  p = f32[4,6] parameter(0), sharding={devices=[2,1,2]<=[4] last_tile_dim_replicate}
  m = f32[2,6] custom-call(p), custom_call_target="SPMDFullToShardShape", sharding={devices=[1,1,2,2]<=[4] last_tile_dims={manual, replicated}}
  c = f32[2,6] exponential(m), sharding={devices=[1,2,2]<=[2,2]T(1,0) last_tile_dims={manual}}
  x = f32[2,6] collective-permute(c), channel_id=1, source_target_pairs={{0,2},{2,0},{1,3},{3,1}}, sharding={devices=[1,2,2]<=[2,2]T(1,0) last_tile_dims={manual}}
  o = f32[2,6] custom-call(x), custom_call_target="Sharding", sharding={devices=[1,1,2,2]<=[4] last_tile_dims={manual, replicated}}
  ROOT f = f32[4,6] custom-call(o), custom_call_target="SPMDShardToFullShape", sharding={devices=[2,1,2]<=[4] last_tile_dim_replicate}
}
)");
  const compiler::CompiledProgram program =
      compiler::CompileForDevices(*module, {.num_devices = 4});
  int64_t permutes = 0;
  for (const HloInstruction* i : program.program->entry_computation()->instructions()) {
    if (i->opcode() != HloOpcode::kCollectivePermute) continue;
    ++permutes;
    EXPECT_EQ(i->shape().ToString(), "f32[2,3]");
  }
  EXPECT_EQ(permutes, 1);
  ExpectRunMatchesPlain(program, R"(HloModule plain
ENTRY main {
  p = f32[4,6] parameter(0)
  e = f32[4,6] exponential(p)
  lo = f32[2,6] slice(e), slice={[0:2], [0:6]}
  hi = f32[2,6] slice(e), slice={[2:4], [0:6]}
  ROOT s = f32[4,6] concatenate(hi, lo), dimensions={0}
}
)",
                        6);
}

TEST(SpmdPartlyManualTest, WhatARegionCannotHoldIsRefusedByName) {
  auto refused = [](const std::string& text, const std::vector<std::string>& parts) {
    try {
      PartitionModule(*ParseHloModule(text));
      ADD_FAILURE() << "partitioned:\n" << text;
    } catch (const Error& e) {
      for (const std::string& part : parts) {
        EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
      }
    }
  };
  const std::string head = R"(HloModule m, num_partitions=4
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY main {
  p = f32[4,6] parameter(0), sharding={devices=[2,1,2]<=[4] last_tile_dim_replicate}
  q = f32[2,6] parameter(1), sharding={devices=[1,2,2]<=[4] last_tile_dim_replicate}
  m = f32[2,6] custom-call(p), custom_call_target="SPMDFullToShardShape", sharding={devices=[1,1,2,2]<=[4] last_tile_dims={manual, replicated}}
)";
  const std::string cols = "sharding={devices=[1,2,2]<=[2,2]T(1,0) last_tile_dims={manual}}";
  const std::string tail =
      R"(  ROOT f = f32[4,6] custom-call(x), custom_call_target="SPMDShardToFullShape", sharding={devices=[2,1,2]<=[4] last_tile_dim_replicate}
}
)";
  // A tiled value read inside the region without SPMDFullToShardShape.
  refused(head + "  x = f32[2,6] add(m, q), " + cols + "\n" + tail,
          {"'x'", "from outside the region", "SPMDFullToShardShape"});
  // A region value read outside without SPMDShardToFullShape.
  refused(head + "  x = f32[2,6] negate(m), " + cols +
              "\n  ROOT y = f32[2,6] negate(x), sharding={replicated}\n}\n",
          {"'y'", "a value of a partly manual region", "SPMDShardToFullShape"});
  // A psum over devices that hold different columns.
  refused(head + "  c = f32[2,6] negate(m), " + cols +
              "\n  x = f32[2,6] all-reduce(c), channel_id=1, replica_groups={{0,3},{1,2}}, "
              "use_global_device_ids=true, to_apply=add, " +
              cols + "\n" + tail,
          {"'x'", "devices 0 and 3", "different tiles"});
  // A ppermute between devices that hold different columns.
  refused(head + "  c = f32[2,6] negate(m), " + cols +
              "\n  x = f32[2,6] collective-permute(c), channel_id=1, "
              "source_target_pairs={{0,3},{3,0}}, " +
              cols + "\n" + tail,
          {"'x'", "devices 0 and 3", "source-target pair", "different tiles"});
  // Collectives other than all-reduce and collective-permute.
  refused(head +
              "  x = f32[4,6] all-gather(m), channel_id=1, replica_groups={{0,2},{1,3}}, "
              "dimensions={0}, use_global_device_ids=true, sharding={devices=[1,1,2,2]<=[4] "
              "last_tile_dims={manual, replicated}}\n" +
              tail,
          {"'x'", "all-gather inside a partly manual region"});
  // Groups that lay their tiles out differently.
  refused(
      head +
          "  x = f32[2,6] negate(m), sharding={devices=[1,2,2]0,3,1,2 last_tile_dims={manual}}\n" +
          tail,
      {"'x'", "manual group 1 lays its tiles out differently"});
  // Pieces that do not cut the full value.
  refused(R"(HloModule m, num_partitions=4
ENTRY main {
  p = f32[4,6] parameter(0), sharding={devices=[2,1,2]<=[4] last_tile_dim_replicate}
  pieces_of_p = f32[3,6] custom-call(p), custom_call_target="SPMDFullToShardShape", sharding={devices=[1,1,2,2]<=[4] last_tile_dims={manual, replicated}}
  ROOT f = f32[4,6] custom-call(pieces_of_p), custom_call_target="SPMDShardToFullShape", sharding={devices=[2,1,2]<=[4] last_tile_dim_replicate}
}
)",
          {"'pieces_of_p'", "f32[3,6]", "not a multiple"});
}

}  // namespace
}  // namespace weft
