// convolution partitioned: batch and output-feature splits run locally with
// no communication; whole feature (batch) groups split locally; a split of
// the contracted input features sums partial results; spatial splits
// exchange halos with the neighbouring devices (collective-permute) and
// gather the dim only where the halo would come from farther away. Each
// module is compiled for 2-8 devices (uneven dims, partial replication, odd
// device orders), run on device threads with NaN padding and compared with
// the unsharded module on one device (eval_convolution_test.cc checks that
// against float64 references), for several seeds.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <iostream>
#include <map>
#include <random>
#include <tuple>

#include "partitioner_random.h"
#include "sharded_run_test_util.h"
#include "weft/hlo/parser.h"

namespace weft {
namespace {

using testing::ExpectShardedMatches;

// Instructions of each opcode in the per-device program.
std::map<HloOpcode, int64_t> Opcodes(const compiler::CompiledProgram& program) {
  std::map<HloOpcode, int64_t> count;
  for (const HloComputation* c : program.program->computations()) {
    for (const HloInstruction* i : c->instructions()) ++count[i->opcode()];
  }
  return count;
}

int64_t Collectives(const compiler::CompiledProgram& program) {
  int64_t n = 0;
  for (const auto& [op, count] : Opcodes(program)) {
    if (IsCollective(op)) n += count;
  }
  return n;
}

// The local convolution's operand `k` dims.
std::vector<int64_t> LocalConvOperand(const compiler::CompiledProgram& program, int64_t k) {
  for (const HloComputation* c : program.program->computations()) {
    for (const HloInstruction* i : c->instructions()) {
      if (i->opcode() == HloOpcode::kConvolution) return i->operand(k)->shape().dimensions();
    }
  }
  ADD_FAILURE() << "no convolution in the per-device program";
  return {};
}

struct ConvCase {
  int64_t n;
  std::string lhs, rhs, attrs;      // shapes and the convolution's attributes
  std::string lhs_s, rhs_s, out_s;  // shardings ("" for none)
  double tolerance = 0;
};

std::string Text(const ConvCase& c) {
  auto sharded = [](const std::string& s) { return s.empty() ? "" : ", sharding=" + s; };
  return fmt::format(
      "HloModule conv\nENTRY e {{\n  x = {} parameter(0){}\n  w = {} "
      "parameter(1){}\n  ROOT c = convolution(x, w), {}{}\n}}\n",
      c.lhs, sharded(c.lhs_s), c.rhs, sharded(c.rhs_s), c.attrs, sharded(c.out_s));
}

compiler::CompiledProgram Check(const ConvCase& c, std::vector<uint64_t> seeds = {1, 2, 3}) {
  compiler::CompiledProgram program;
  for (uint64_t seed : seeds) {
    SCOPED_TRACE(fmt::format("{} devices, seed {}\n{}", c.n, seed, Text(c)));
    program = ExpectShardedMatches(Text(c), c.n, seed, c.tolerance);
  }
  return program;
}

const std::string kSame = "window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f";

TEST(SpmdConvolutionTest, BatchSplitsRunLocally) {
  for (const auto& [n, s, rows] : std::vector<std::tuple<int64_t, std::string, int64_t>>{
           {2, "{devices=[2,1,1,1]<=[2]}", 5},
           {4, "{devices=[4,1,1,1]<=[4]}", 3},                            // 9 over 4: uneven
           {4, "{devices=[4,1,1,1]3,1,0,2}", 3},                          // odd device order
           {8, "{devices=[4,1,1,1,2]<=[8] last_tile_dim_replicate}", 3},  // partial replication
       }) {
    const auto program = Check({n, "f32[9,6,5,4]", "f32[3,3,4,8]", kSame, s, "", s});
    EXPECT_EQ(Collectives(program), 0) << s;
    EXPECT_EQ(LocalConvOperand(program, 0), (std::vector<int64_t>{rows, 6, 5, 4})) << s;
  }
}

TEST(SpmdConvolutionTest, OutputFeatureSplitsRunLocally) {
  // The kernel split along its output features, the result alike; batch
  // split too on a 2x2 mesh.
  const auto one = Check({4, "f32[4,6,5,3]", "f32[3,3,3,10]", kSame, "{replicated}",
                          "{devices=[1,1,1,4]<=[4]}", "{devices=[1,1,1,4]<=[4]}"});
  EXPECT_EQ(Collectives(one), 0);
  EXPECT_EQ(LocalConvOperand(one, 1), (std::vector<int64_t>{3, 3, 3, 3}));
  const auto two = Check({4, "f32[4,6,5,3]", "f32[3,3,3,8]", kSame,
                          "{devices=[2,1,1,1,2]<=[4] last_tile_dim_replicate}",
                          "{devices=[1,1,1,2,2]<=[2,2]T(1,0) last_tile_dim_replicate}",
                          "{devices=[2,1,1,2]<=[4]}"});
  EXPECT_EQ(Collectives(two), 0);
  // NCHW / OIHW with an odd device order.
  Check({8, "f32[3,4,6,6]", "f32[16,4,3,3]",
         "window={size=3x3 stride=2x2 pad=1_1x1_1}, dim_labels=bf01_oi01->bf01", "",
         "{devices=[8,1,1,1]0,2,4,6,1,3,5,7}", "{devices=[1,8,1,1]0,2,4,6,1,3,5,7}"});
}

TEST(SpmdConvolutionTest, ContractedFeatureSplitsSumPartialResults) {
  // Input features split on both operands: local convolutions, then a sum.
  const auto program =
      Check({4, "f32[2,6,6,12]", "f32[3,3,12,5]", kSame, "{devices=[1,1,1,4]<=[4]}",
             "{devices=[1,1,4,1]<=[4]}", "{replicated}", 1e-5});
  EXPECT_GE(Opcodes(program)[HloOpcode::kAllReduce] + Opcodes(program)[HloOpcode::kReduceScatter],
            1);
  EXPECT_EQ(LocalConvOperand(program, 0), (std::vector<int64_t>{2, 6, 6, 3}));
  // Uneven (10 features over 4, padding zeroed), the result wanted split
  // along its batch (a reduce-scatter), and partial replication.
  Check({4, "f32[4,5,5,10]", "f32[3,3,10,6]", kSame, "{devices=[1,1,1,4]<=[4]}",
         "{devices=[1,1,4,1]<=[4]}", "{devices=[4,1,1,1]<=[4]}", 1e-5});
  Check({8, "f32[4,5,5,10]", "f32[3,3,10,6]", kSame,
         "{devices=[2,1,1,2,2]<=[8] last_tile_dim_replicate}",
         "{devices=[1,1,2,1,4]<=[8] "
         "last_tile_dim_replicate}",
         "{devices=[2,1,1,1,4]<=[8] last_tile_dim_replicate}", 1e-5});
}

// A result wanted replicated from an input split along its batch: each
// device convolves its rows of the batch and the (4x smaller) result is
// gathered, rather than gathering the input and repeating the work.
TEST(SpmdConvolutionTest, InputDrivenWhenTheResultIsWantedReplicated) {
  const auto program =
      Check({4, "f32[8,16,16,8]", "f32[3,3,8,8]",
             "window={size=3x3 stride=2x2 pad=1_1x1_1}, dim_labels=b01f_01io->b01f",
             "{devices=[4,1,1,1]<=[4]}", "", "{replicated}"});
  EXPECT_EQ(LocalConvOperand(program, 0), (std::vector<int64_t>{2, 16, 16, 8}));
  EXPECT_EQ(Opcodes(program)[HloOpcode::kAllGather], 1);
}

TEST(SpmdConvolutionTest, SpatialSplitsExchangeHalos) {
  const std::vector<ConvCase> cases = {
      // "same" 3x3: one row from each neighbour.
      {4, "f32[2,16,6,3]", "f32[3,3,3,4]", kSame, "{devices=[1,4,1,1]<=[4]}", "",
       "{devices=[1,4,1,1]<=[4]}"},
      // Uneven rows (13 over 4), odd device order.
      {4, "f32[2,13,6,3]", "f32[3,3,3,4]", kSame, "{devices=[1,4,1,1]2,0,3,1}", "",
       "{devices=[1,4,1,1]2,0,3,1}"},
      // Both spatial dims split, and partial replication.
      {8, "f32[2,10,9,3]", "f32[3,3,3,4]", kSame,
       "{devices=[1,2,2,1,2]<=[8] last_tile_dim_replicate}", "",
       "{devices=[1,2,2,1,2]<=[8] last_tile_dim_replicate}"},
      // Stride 2 (tiles of 8 inputs make tiles of 4 outputs), a 4-wide window.
      {4, "f32[2,32,5,2]", "f32[4,1,2,3]",
       "window={size=4x1 stride=2x1 pad=1_1x0_0}, dim_labels=b01f_01io->b01f",
       "{devices=[1,4,1,1]<=[4]}", "", "{devices=[1,4,1,1]<=[4]}"},
      // Stride 2 with tiles starting at different phases: a dynamic-slice.
      {4, "f32[2,20,5,2]", "f32[3,1,2,3]",
       "window={size=3x1 stride=2x1 pad=1_1x0_0}, dim_labels=b01f_01io->b01f",
       "{devices=[1,4,1,1]<=[4]}", "", "{devices=[1,4,1,1]<=[4]}"},
      // Window dilation, negative padding and reversal; 1-D.
      {4, "f32[3,24,2]", "f32[3,2,5]",
       "window={size=3 pad=-1_3 rhs_dilate=2 rhs_reversal=1}, dim_labels=b0f_0io->b0f",
       "{devices=[1,4,1]<=[4]}", "", "{devices=[1,4,1]<=[4]}"},
      // lhs dilation (a transposed convolution) where the tiles' phases agree.
      {2, "f32[2,8,3]", "f32[3,3,2]",
       "window={size=3 pad=1_1 lhs_dilate=2}, dim_labels=b0f_0io->b0f", "{devices=[1,2,1]<=[2]}",
       "", "{devices=[1,2,1]<=[2]}"},
      // bf16, the halo's zeros in the operands' type.
      {4, "bf16[2,12,7,4]", "bf16[3,3,4,6]", kSame, "{devices=[1,2,2,1]<=[4]}", "",
       "{devices=[1,2,2,1]<=[4]}"},
      // 3-D, split along the middle spatial dim, features first.
      {2, "f32[2,2,5,6,4]", "f32[3,2,2,3,3]",
       "window={size=2x3x3 pad=0_1x1_1x1_1}, dim_labels=fb012_oi012->fb012",
       "{devices=[1,1,1,2,1]<=[2]}", "", "{devices=[1,1,1,2,1]<=[2]}"},
  };
  for (const ConvCase& c : cases) {
    const auto program = Check(c);
    EXPECT_GE(Opcodes(program)[HloOpcode::kCollectivePermute], 1) << Text(c);
    EXPECT_EQ(Opcodes(program)[HloOpcode::kAllGather], 0) << Text(c);
  }
}

// A window reaching two tiles away (7 wide over tiles of 2 rows, 4 tiles;
// 11 wide over tiles of 2, 8 tiles) takes its halo from two (three) tiles
// on each side, still without a gather.
TEST(SpmdConvolutionTest, HalosFromTilesFartherAway) {
  for (const ConvCase& c : std::vector<ConvCase>{
           {4, "f32[2,8,3]", "f32[7,3,2]", "window={size=7 pad=3_3}, dim_labels=b0f_0io->b0f",
            "{devices=[1,4,1]<=[4]}", "", "{devices=[1,4,1]<=[4]}"},
           {8, "f32[2,15,3]", "f32[11,3,2]", "window={size=11 pad=5_4}, dim_labels=b0f_0io->b0f",
            "{devices=[1,8,1]7,6,5,4,3,2,1,0}", "", "{devices=[1,8,1]7,6,5,4,3,2,1,0}"},
       }) {
    const auto program = Check(c);
    EXPECT_GE(Opcodes(program)[HloOpcode::kCollectivePermute], 4) << Text(c);
    EXPECT_EQ(Opcodes(program)[HloOpcode::kAllGather], 0) << Text(c);
  }
}

// A halo from the farthest tiles (a 7-wide window over 3 tiles of 2 rows),
// or tiles starting at different phases of the lhs dilation: the dim is
// gathered, under the convolution's name.
TEST(SpmdConvolutionTest, SpatialSplitsOtherwiseAreGathered) {
  for (const ConvCase& c : std::vector<ConvCase>{
           {3, "f32[2,6,3]", "f32[7,3,2]", "window={size=7 pad=3_3}, dim_labels=b0f_0io->b0f",
            "{devices=[1,3,1]<=[3]}", "", "{devices=[1,3,1]<=[3]}"},
           {4, "f32[2,9,3]", "f32[3,3,2]",
            "window={size=3 pad=1_1 lhs_dilate=2}, dim_labels=b0f_0io->b0f",
            "{devices=[1,4,1]<=[4]}", "", "{devices=[1,4,1]<=[4]}"},
       }) {
    const auto program = Check(c);
    EXPECT_GE(Opcodes(program)[HloOpcode::kAllGather], 1) << Text(c);
    bool named = false;
    for (const HloInstruction* i : program.program->entry_computation()->instructions()) {
      named = named || i->name().find("c.whole_spatial") == 0;
    }
    EXPECT_TRUE(named) << "the gather is named after the convolution";
  }
}

TEST(SpmdConvolutionTest, GroupsSplitWholeGroups) {
  // Depthwise: 8 groups of one feature over 4 devices, no communication.
  const auto depthwise =
      Check({4, "f32[2,6,6,8]", "f32[3,3,1,16]", kSame + ", feature_group_count=8",
             "{devices=[1,1,1,4]<=[4]}", "{devices=[1,1,1,4]<=[4]}", "{devices=[1,1,1,4]<=[4]}"});
  EXPECT_EQ(Collectives(depthwise), 0);
  EXPECT_EQ(LocalConvOperand(depthwise, 0), (std::vector<int64_t>{2, 6, 6, 2}));
  // 2 groups over 4 devices do not split evenly: the features are gathered.
  Check({4, "f32[2,6,6,8]", "f32[3,3,4,6]", kSame + ", feature_group_count=2",
         "{devices=[1,1,1,4]<=[4]}", "", "{devices=[1,1,1,4]<=[4]}"});
  // Groups split along with the batch and the rows (halo).
  Check({8, "f32[4,8,6,4]", "f32[3,3,2,6]", kSame + ", feature_group_count=2",
         "{devices=[2,2,1,2]<=[8]}", "", "{devices=[2,2,1,2]<=[8]}"});
  // Batch groups (a filter gradient's form): the input batch follows the
  // result's output features.
  const auto batch =
      Check({4, "f32[8,6,6,3]", "f32[3,3,3,8]",
             "window={size=3x3}, dim_labels=b01f_01io->b01f, batch_group_count=4",
             "{devices=[4,1,1,1]<=[4]}", "{devices=[1,1,1,4]<=[4]}", "{devices=[1,1,1,4]<=[4]}"});
  EXPECT_EQ(Collectives(batch), 0);
  // The result split along its batch cannot follow the input's batch groups.
  Check({2, "f32[8,6,6,3]", "f32[3,3,3,8]",
         "window={size=3x3}, dim_labels=b01f_01io->b01f, batch_group_count=4", "", "",
         "{devices=[2,1,1,1]<=[2]}"});
}

// Propagation chooses the shardings: a parameter split along the batch and
// the rows reaches the convolution and the result.
TEST(SpmdConvolutionTest, PropagatedShardings) {
  Check({8, "f32[6,12,7,3]", "f32[3,3,3,5]", kSame, "{devices=[2,4,1,1]<=[8]}", "", ""});
  Check({4, "f32[6,12,7,4]", "f32[3,3,4,5]", kSame, "", "{devices=[1,1,2,2]<=[4]}", "", 1e-5});
}

// Property: random convolutions (1-2 spatial dims, strides, padding from -1
// to 3, both dilations, reversal, feature or batch groups, dims in random
// orders) with random shardings of the input, the kernel and the result on
// 1-8 devices give the unsharded answer.
TEST(SpmdConvolutionTest, RandomConvolutionsAndShardings) {
  std::mt19937_64 rng(2026);
  auto pick = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  auto dims_text = [](const std::vector<int64_t>& d) {
    std::string t;
    for (size_t i = 0; i < d.size(); ++i) t += (i ? "," : "") + std::to_string(d[i]);
    return t;
  };
  int64_t cases = 0, halos = 0, sums = 0;
  while (cases < 64) {
    const int64_t n = std::vector<int64_t>{1, 2, 3, 4, 6, 8}[pick(0, 5)];
    const int64_t spatial = pick(1, 2);
    const int64_t mode = pick(0, 2);  // 0: one group, 1: feature groups, 2: batch groups
    const int64_t groups = mode == 0 ? 1 : pick(2, 3);
    const int64_t batch = (mode == 2 ? groups : 1) * pick(1, 3);
    const int64_t group_in = pick(1, 3);
    const int64_t features = (mode == 1 ? groups : 1) * group_in;
    const int64_t kernel_in = mode == 1 ? group_in : features;
    const int64_t out_features = (mode == 0 ? 1 : groups) * pick(1, 3);
    std::vector<int64_t> in_size, kernel_size, out_size;
    std::string size, stride, pad, lhs_dilate, rhs_dilate, reversal;
    bool empty = false;
    for (int64_t k = 0; k < spatial; ++k) {
      // Now and then a window as wide as a filter gradient's (most of the input).
      const int64_t window = pick(0, 4) == 0 ? pick(5, 9) : pick(1, 4);
      const int64_t step = pick(1, 3), lo = pick(-1, 3), hi = pick(-1, 3);
      const int64_t dl = pick(0, 3) == 0 ? 2 : 1, dr = pick(0, 3) == 0 ? 2 : 1;
      const int64_t in = pick(window, 13);
      const int64_t padded = (in - 1) * dl + 1 + lo + hi, span = (window - 1) * dr + 1;
      const int64_t out = padded < span ? 0 : (padded - span) / step + 1;
      empty = empty || out < 1;
      in_size.push_back(in);
      kernel_size.push_back(window);
      out_size.push_back(out);
      const std::string x = k ? "x" : "";
      size += x + std::to_string(window);
      stride += x + std::to_string(step);
      pad += x + std::to_string(lo) + "_" + std::to_string(hi);
      lhs_dilate += x + std::to_string(dl);
      rhs_dilate += x + std::to_string(dr);
      reversal += x + std::to_string(pick(0, 1));
    }
    if (empty) continue;
    // Labels in random orders; each tensor's dims follow its labels.
    auto labels = [&](char a, char b) {
      std::string l{a, b};
      for (int64_t k = 0; k < spatial; ++k) l += static_cast<char>('0' + k);
      std::shuffle(l.begin(), l.end(), rng);
      return l;
    };
    auto shape = [&](const std::string& l, char a, int64_t a_size, char b, int64_t b_size,
                     const std::vector<int64_t>& sp) {
      std::vector<int64_t> d;
      for (char c : l) d.push_back(c == a ? a_size : c == b ? b_size : sp[c - '0']);
      return d;
    };
    const std::string ll = labels('b', 'f'), rl = labels('i', 'o'), ol = labels('b', 'f');
    const std::vector<int64_t> ld = shape(ll, 'b', batch, 'f', features, in_size);
    const std::vector<int64_t> rd = shape(rl, 'i', kernel_in, 'o', out_features, kernel_size);
    const std::vector<int64_t> od =
        shape(ol, 'b', batch / (mode == 2 ? groups : 1), 'f', out_features, out_size);
    auto maybe_sharding = [&](int64_t rank) -> std::string {
      if (pick(0, 3) == 0) return "";
      return ", sharding=" + spmd_test::RandomSharding(n, rank, rng).ToString();
    };
    const std::string text = fmt::format(
        "HloModule random_conv\nENTRY e {{\n  x = f32[{}] parameter(0){}\n  w = f32[{}] "
        "parameter(1){}\n  ROOT c = f32[{}] convolution(x, w), window={{size={} stride={} "
        "pad={} lhs_dilate={} rhs_dilate={} rhs_reversal={}}}, dim_labels={}_{}->{}{}{}\n}}\n",
        dims_text(ld), maybe_sharding(spatial + 2), dims_text(rd), maybe_sharding(spatial + 2),
        dims_text(od), size, stride, pad, lhs_dilate, rhs_dilate, reversal, ll, rl, ol,
        mode == 1   ? fmt::format(", feature_group_count={}", groups)
        : mode == 2 ? fmt::format(", batch_group_count={}", groups)
                    : "",
        maybe_sharding(spatial + 2));
    SCOPED_TRACE(fmt::format("case {} on {} devices:\n{}", cases, n, text));
    const auto program = ExpectShardedMatches(text, n, static_cast<uint64_t>(cases + 1), 1e-5);
    if (::testing::Test::HasFailure()) return;
    const std::map<HloOpcode, int64_t> ops = Opcodes(program);
    halos += ops.count(HloOpcode::kConcatenate) > 0;  // only a halo concatenates
    sums += ops.count(HloOpcode::kAllReduce) + ops.count(HloOpcode::kReduceScatter) > 0;
    ++cases;
  }
  // The cases reach the halo and partial-sum plans, not only gathers.
  EXPECT_GE(halos, cases / 10) << "of " << cases;
  EXPECT_GE(sums, cases / 20) << "of " << cases;
  std::cout << halos << " of " << cases << " exchanged halos, " << sums << " summed\n";
}

}  // namespace
}  // namespace weft
