// Hierarchical collectives: per-device programs with one all-reduce,
// all-gather or reduce-scatter over groups spanning slices, run flat and
// decomposed on device threads with the same inputs. Integer-valued inputs
// make every sum exact, so the two must agree bit for bit whatever order the
// levels add in; random inputs are checked against a float64 reference.
// After the rewrite a collective's group lies inside one slice or holds one
// device per slice.
#include "weft/compiler/hierarchical_collectives.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <set>

#include "weft/hlo/parser.h"
#include "weft/hlo/printer.h"
#include "weft/hlo/verifier.h"
#include "weft/runtime/executor.h"

namespace weft::compiler {
namespace {

using runtime::HostTensor;
using Groups = std::vector<std::vector<int64_t>>;

std::string GroupsText(const Groups& groups) {
  std::string out;
  for (size_t g = 0; g < groups.size(); ++g) {
    out += fmt::format("{}{{{}}}", g ? "," : "", fmt::join(groups[g], ","));
  }
  return "{" + out + "}";
}

// One collective of `op` ("all-reduce", "all-gather", "reduce-scatter") on
// x = in_shape, the result out_shape, over `groups`.
std::string Module(int64_t n, const std::string& op, const std::string& in_shape,
                   const std::string& out_shape, const Groups& groups, int64_t dim = 0) {
  const std::string dims = op == "all-reduce" ? "" : fmt::format(", dimensions={{{}}}", dim);
  const std::string reducer = op == "all-gather" ? "" : ", to_apply=sum";
  return fmt::format(R"(HloModule m, num_partitions={}
sum {{
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}}
ENTRY e {{
  x = {} parameter(0)
  ROOT c = {} {}(x), channel_id=1, replica_groups={}{}, use_global_device_ids=true{}
}}
)",
                     n, in_shape, out_shape, op, GroupsText(groups), dims, reducer);
}

std::vector<std::vector<HostTensor>> Inputs(int64_t n, const std::string& shape, bool integers,
                                            std::mt19937_64& rng) {
  const Shape s = ParseShape(shape);
  std::vector<std::vector<HostTensor>> inputs;
  for (int64_t d = 0; d < n; ++d) {
    std::vector<double> v(s.ElementsCount());
    for (double& x : v) {
      x = integers ? static_cast<double>(static_cast<int64_t>(rng() % 17) - 8)
                   : std::uniform_real_distribution<double>(-1, 1)(rng);
    }
    inputs.push_back({HostTensor::FromDoubles(s, v)});
  }
  return inputs;
}

// Every collective's groups lie inside one slice or hold one device per slice.
void ExpectTwoLevels(const HloModule& m, int64_t per_slice, int64_t slices) {
  for (const HloComputation* c : m.computations()) {
    for (const HloInstruction* i : c->instructions()) {
      for (const std::vector<int64_t>& g : i->attrs().replica_groups) {
        std::set<int64_t> in;
        for (int64_t d : g) in.insert(d / per_slice);
        EXPECT_TRUE(in.size() == 1 ||
                    (in.size() == g.size() && static_cast<int64_t>(in.size()) <= slices))
            << i->name() << " " << GroupsText({g});
      }
    }
  }
}

struct Case {
  int64_t n, slices;
  std::string op, in, out;
  Groups groups;
  int64_t dim = 0;
};

// Runs the flat and the decomposed program on the same inputs and compares.
void ExpectSameResults(const Case& c, bool integers, std::mt19937_64& rng) {
  SCOPED_TRACE(fmt::format("{} {} -> {} over {} on {} devices in {} slices ({})", c.op, c.in, c.out,
                           GroupsText(c.groups), c.n, c.slices, integers ? "integers" : "random"));
  const std::string text = Module(c.n, c.op, c.in, c.out, c.groups, c.dim);
  std::unique_ptr<HloModule> flat = ParseHloModule(text);
  std::unique_ptr<HloModule> split = ParseHloModule(text);
  const HierarchyStats stats = DecomposeCrossSliceCollectives(*split, c.n, c.slices);
  EXPECT_EQ(stats.total(), 1) << PrintModule(*split);
  VerifyHloModule(*split);
  ExpectTwoLevels(*split, c.n / c.slices, c.slices);
  // The text round-trips.
  EXPECT_EQ(PrintModule(*ParseHloModule(PrintModule(*split))), PrintModule(*split));

  const auto inputs = Inputs(c.n, c.in, integers, rng);
  runtime::LocalCluster cluster(c.n);
  const auto want = runtime::RunOnDevices(*flat, inputs, cluster);
  const auto got = runtime::RunOnDevices(*split, inputs, cluster);
  for (int64_t d = 0; d < c.n; ++d) {
    const std::vector<double> w = want[d][0].ToDoubles(), g = got[d][0].ToDoubles();
    ASSERT_EQ(w.size(), g.size());
    for (size_t i = 0; i < w.size(); ++i) {
      if (integers || c.op == "all-gather") {
        ASSERT_EQ(g[i], w[i]) << "device " << d << " element " << i;
      } else {
        ASSERT_NEAR(g[i], w[i], 1e-6 * (1 + std::abs(w[i]))) << "device " << d << " element " << i;
      }
    }
  }
}

Groups Iota(int64_t n) {
  std::vector<int64_t> g(n);
  for (int64_t i = 0; i < n; ++i) g[i] = i;
  return {g};
}

TEST(HierarchicalCollectivesTest, DecomposedCollectivesGiveTheFlatResults) {
  std::mt19937_64 rng(11);
  const Groups pairs8 = {{0, 1, 4, 5}, {2, 3, 6, 7}};                 // 2 slices x 2
  const Groups pairs12 = {{0, 1, 4, 5, 8, 9}, {2, 3, 6, 7, 10, 11}};  // 3 slices x 2
  const std::vector<Case> cases = {
      // all-reduce: split along the largest dim (6 padded to 8), or, when
      // smaller than the slice's members, reduced in two levels.
      {8, 2, "all-reduce", "f32[6,5]", "f32[6,5]", Iota(8)},
      {8, 2, "all-reduce", "f32[3]", "f32[3]", Iota(8)},
      {8, 2, "all-reduce", "f32[]", "f32[]", Iota(8)},
      {8, 2, "all-reduce", "f32[4,7]", "f32[4,7]", pairs8},
      {12, 3, "all-reduce", "f32[5,2]", "f32[5,2]", Iota(12)},
      {8, 4, "all-reduce", "f32[9]", "f32[9]", Iota(8)},
      // members in mesh order over a hybrid mesh, slices interleaved
      {8, 2, "all-reduce", "f32[4,3]", "f32[4,3]", {{0, 4, 1, 5, 2, 6, 3, 7}}},
      // all-gather along either dim: chunks back in group order
      {8, 2, "all-gather", "f32[2,3]", "f32[16,3]", Iota(8), 0},
      {8, 2, "all-gather", "f32[2,3]", "f32[2,24]", Iota(8), 1},
      {12, 3, "all-gather", "f32[2,3]", "f32[12,3]", pairs12, 0},
      {8, 2, "all-gather", "f32[1,2]", "f32[4,2]", pairs8, 0},
      // reduce-scatter: member k keeps chunk k of the sum
      {8, 2, "reduce-scatter", "f32[16,3]", "f32[2,3]", Iota(8), 0},
      {8, 2, "reduce-scatter", "f32[3,8]", "f32[3,1]", Iota(8), 1},
      {12, 3, "reduce-scatter", "f32[12,5]", "f32[2,5]", pairs12, 0},
      {8, 4, "reduce-scatter", "f32[8,2]", "f32[1,2]", Iota(8), 0},
  };
  for (const Case& c : cases) {
    ExpectSameResults(c, /*integers=*/true, rng);
    ExpectSameResults(c, /*integers=*/false, rng);
  }
}

TEST(HierarchicalCollectivesTest, GroupsThatDoNotSpanSlicesStayFlat) {
  const std::vector<Groups> flat = {
      {{0, 1, 2, 3}, {4, 5, 6, 7}},      // inside a slice each
      {{0, 4}, {1, 5}, {2, 6}, {3, 7}},  // one device per slice already
      {{0, 1, 2, 4}, {3, 5, 6, 7}},      // 3 + 1 and 1 + 3 members per slice
  };
  for (const Groups& groups : flat) {
    std::unique_ptr<HloModule> m =
        ParseHloModule(Module(8, "all-reduce", "f32[4]", "f32[4]", groups));
    const std::string before = PrintModule(*m);
    EXPECT_EQ(DecomposeCrossSliceCollectives(*m, 8, 2).total(), 0) << GroupsText(groups);
    EXPECT_EQ(PrintModule(*m), before);
  }
  // A group visiting a slice twice (0,1 | 4,5 | 2,3) is not two levels.
  std::unique_ptr<HloModule> m = ParseHloModule(
      Module(12, "all-gather", "f32[1]", "f32[6]", {{0, 1, 4, 5, 2, 3}, {6, 7, 8, 9, 10, 11}}));
  EXPECT_EQ(DecomposeCrossSliceCollectives(*m, 12, 3).total(), 0);
  // One slice: nothing to do.
  m = ParseHloModule(Module(8, "all-reduce", "f32[4]", "f32[4]", Iota(8)));
  EXPECT_EQ(DecomposeCrossSliceCollectives(*m, 8, 1).total(), 0);
}

}  // namespace
}  // namespace weft::compiler
