// weft run's inputs: seeded per parameter, integers over the extent their
// index uses admit, split into padded tiles and joined back.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "weft/hlo/parser.h"
#include "weft/runtime/run_command.h"

namespace weft::runtime {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

TEST(RunInputsTest, ShardAndJoinRoundTripUnevenPartialTiles) {
  const HloSharding sharding =
      HloSharding::Parse("{devices=[2,3,2]<=[12] last_tile_dim_replicate}");
  const Shape shape(PrimitiveType::kF32, {5, 7});
  const HostTensor global = RandomInputs(std::vector<Shape>{shape}, 1)[0];
  const Shape local(PrimitiveType::kF32, sharding.TileShape(shape.dimensions()));
  EXPECT_EQ(local.dimensions(), (std::vector<int64_t>{3, 3}));
  std::vector<HostTensor> pieces;
  for (int64_t d = 0; d < 12; ++d) pieces.push_back(ShardTensor(global, sharding, d, local, kNaN));
  // Device 11 holds rows 3..4 and column 6: the rest of its tile is padding.
  const std::vector<double> last = pieces[11].ToDoubles();
  EXPECT_EQ(last[0], global.GetDouble(3 * 7 + 6));
  EXPECT_TRUE(std::isnan(last[1]));
  EXPECT_TRUE(std::isnan(last[6]));
  const HostTensor joined = JoinTensor(pieces, sharding, shape);
  EXPECT_EQ(joined.ToDoubles(), global.ToDoubles());
  // Replicated values are shared, not copied.
  EXPECT_EQ(ShardTensor(global, HloSharding::Replicate(), 3, shape).raw_data(), global.raw_data());
}

// Under unreduced axes each device holds an addend; joining sums them.
TEST(RunInputsTest, UnreducedValuesSplitIntoAddendsThatSumBack) {
  const Shape shape(PrimitiveType::kF32, {5, 4});
  const HostTensor global = RandomInputs(std::vector<Shape>{shape}, 3)[0];
  const HloSharding sub = HloSharding::Parse("{devices=[2,1,2]<=[4] last_tile_dims={unreduced}}");
  const Shape local(PrimitiveType::kF32, {3, 4});
  std::vector<HostTensor> pieces;
  for (int64_t d = 0; d < 4; ++d) pieces.push_back(ShardTensor(global, sub, d, local, kNaN));
  // Devices 0 and 1 hold addends of rows 0..2: half each.
  EXPECT_EQ(pieces[0].GetDouble(5), global.GetDouble(5) / 2);
  EXPECT_EQ(pieces[1].GetDouble(5), global.GetDouble(5) / 2);
  EXPECT_EQ(pieces[0].ToDoubles(), pieces[1].ToDoubles());
  EXPECT_NE(pieces[0].raw_data(), global.raw_data());  // the input is not written
  EXPECT_EQ(JoinTensor(pieces, sub, shape).ToDoubles(), global.ToDoubles());

  // Integers: quotients, the first device of the group adding the remainder.
  const Shape ints(PrimitiveType::kS32, {7});
  const HostTensor counts = RandomInputs(std::vector<Shape>{ints}, 4)[0];
  const HloSharding all = HloSharding::Unreduced();
  std::vector<HostTensor> addends;
  for (int64_t d = 0; d < 3; ++d) addends.push_back(ShardTensor(counts, all, d, ints, 0, 3));
  for (int64_t i = 0; i < 7; ++i) {
    EXPECT_EQ(addends[1].GetDouble(i), std::trunc(counts.GetDouble(i) / 3));
  }
  EXPECT_EQ(JoinTensor(addends, all, ints).ToDoubles(), counts.ToDoubles());
  EXPECT_THROW(ShardTensor(counts, all, 0, ints), Error);  // {unreduced} needs the device count
}

TEST(RunInputsTest, RandomInputsAreSeededPerParameter) {
  const std::vector<Shape> shapes = {Shape(PrimitiveType::kF32, {1000}),
                                     Shape(PrimitiveType::kS32, {64}),
                                     Shape(PrimitiveType::kF32, {1000})};
  const std::vector<HostTensor> a = RandomInputs(shapes, 9);
  const std::vector<HostTensor> b = RandomInputs(shapes, 9);
  const std::vector<HostTensor> c = RandomInputs(shapes, 10);
  EXPECT_EQ(OutputDigest(a), OutputDigest(b));
  EXPECT_NE(OutputDigest(a), OutputDigest(c));
  // A distinct stream per parameter, and one that does not depend on the others.
  EXPECT_NE(a[0].ToDoubles(), a[2].ToDoubles());
  EXPECT_EQ(RandomInputs(std::vector<Shape>{shapes[0]}, 9)[0].ToDoubles(), a[0].ToDoubles());
  // Normal(0, 1): mean near 0, variance near 1; integers in [0, 4).
  double sum = 0, squares = 0;
  for (double x : a[0].ToDoubles()) sum += x, squares += x * x;
  EXPECT_NEAR(sum / 1000, 0, 0.15);
  EXPECT_NEAR(squares / 1000, 1, 0.2);
  for (double x : a[1].ToDoubles()) EXPECT_TRUE(x >= 0 && x < 4) << x;
}

TEST(RunInputsTest, EachBlockOfALargeLeafIsItsOwnNormalStream) {
  // Three blocks and a part (drawn in parallel): the same values on every
  // draw, no block a repeat of another, each N(0, 1).
  const std::vector<Shape> shapes = {Shape(PrimitiveType::kF32, {3 * kRandomBlock + 5})};
  const std::vector<double> a = RandomInputs(shapes, 4)[0].ToDoubles();
  EXPECT_EQ(RandomInputs(shapes, 4)[0].ToDoubles(), a);
  for (int64_t block = 0; block < 3; ++block) {
    const int64_t begin = block * kRandomBlock;
    double sum = 0, squares = 0;
    for (int64_t k = begin; k < begin + kRandomBlock; ++k) sum += a[k], squares += a[k] * a[k];
    EXPECT_NEAR(sum / kRandomBlock, 0, 0.02) << block;
    EXPECT_NEAR(squares / kRandomBlock, 1, 0.03) << block;
    EXPECT_NE(a[begin], a[begin + kRandomBlock]) << block;
  }
}

TEST(RunInputsTest, IntegerInputsSpanTheExtentTheirIndexUsesAdmit) {
  const std::unique_ptr<HloModule> module = ParseHloModule(R"(HloModule m
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY e {
  x = f32[40,8] parameter(0)
  i = s64[] parameter(1)
  i32 = s32[] convert(i)
  z = s32[] constant(0)
  ds = f32[4,8] dynamic-slice(x, i32, z), dynamic_slice_sizes={4,8}
  g = s32[6,1] parameter(2)
  gather = f32[6,8] gather(x, g), offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0}, index_vector_dim=1, slice_sizes={1,8}
  si = s32[5,1] parameter(3)
  u = f32[5,8] parameter(4)
  sc = f32[40,8] scatter(x, si, u), update_window_dims={1}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=add
  seg = s32[16] parameter(5)
  ROOT t = (f32[4,8], f32[6,8], f32[40,8], s32[16]) tuple(ds, gather, sc, seg)
})");
  const std::vector<IntegerRange> ranges = InputIntegerRanges(*module);
  ASSERT_EQ(ranges.size(), 6u);
  EXPECT_EQ(ranges[1].lo, -2);  // the dynamic-slice start, through a convert: 40 - 4 past both ends
  EXPECT_EQ(ranges[1].hi, 38);
  EXPECT_EQ(ranges[2].hi, 41);  // gather rows: 40 - 1
  EXPECT_EQ(ranges[3].hi, 42);  // scatter rows: out-of-range ones are dropped
  EXPECT_EQ(ranges[5].lo, 0);   // no index use: small segment ids
  EXPECT_EQ(ranges[5].hi, 3);
  std::vector<Shape> shapes = {Shape(PrimitiveType::kS32, {4000}),
                               Shape(PrimitiveType::kS32, {4000})};
  const std::vector<IntegerRange> two = {ranges[1], ranges[5]};
  const std::vector<HostTensor> drawn = RandomInputs(shapes, 3, two);
  const std::vector<double> wide = drawn[0].ToDoubles(), small = drawn[1].ToDoubles();
  EXPECT_EQ(*std::min_element(wide.begin(), wide.end()), -2);
  EXPECT_EQ(*std::max_element(wide.begin(), wide.end()), 38);
  EXPECT_EQ(*std::min_element(small.begin(), small.end()), 0);
  EXPECT_EQ(*std::max_element(small.begin(), small.end()), 3);
}

}  // namespace
}  // namespace weft::runtime
