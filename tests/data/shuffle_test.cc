#include "weft/data/shuffle.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

namespace weft {
namespace {

TEST(UniformBelow, StaysInRangeAndIsRoughlyUniform) {
  std::mt19937_64 rng(123);
  for (uint64_t bound : {1ULL, 2ULL, 3ULL, 7ULL, 1000ULL, (1ULL << 63) + 5}) {
    for (int i = 0; i < 1000; ++i) EXPECT_LT(UniformBelow(rng, bound), bound);
  }
  // 60000 draws over 6 bins: each bin within 5% of 10000.
  std::vector<int> counts(6, 0);
  for (int i = 0; i < 60000; ++i) ++counts[UniformBelow(rng, 6)];
  for (int count : counts) EXPECT_NEAR(count, 10000, 500);
}

TEST(SeededShuffle, IsAPermutationAndDependsOnTheSeed) {
  auto a = ShuffledIndices(1000, 7), b = ShuffledIndices(1000, 7), c = ShuffledIndices(1000, 8);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  std::vector<int64_t> sorted = a;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int64_t> expected(1000);
  std::iota(expected.begin(), expected.end(), 0);
  EXPECT_EQ(sorted, expected);
  EXPECT_TRUE(ShuffledIndices(0, 1).empty());
}

TEST(SeededShuffle, EveryPositionIsReachedEvenly) {
  // Fisher–Yates is uniform: element 0 lands in each of 5 slots ~1/5 of runs.
  std::vector<int> where(5, 0);
  for (uint64_t seed = 0; seed < 5000; ++seed) {
    auto order = ShuffledIndices(5, seed);
    ++where[std::find(order.begin(), order.end(), 0) - order.begin()];
  }
  for (int count : where) EXPECT_NEAR(count, 1000, 100);
}

TEST(SeededShuffle, OrderIsFixedAcrossStandardLibraries) {
  // mt19937_64's sequence is fixed by the C++ standard (its 10000th output is
  // 9981545732273789042), and the shuffle uses nothing else, so this order is
  // the same everywhere (the expected order was computed by an independent
  // Python mt19937_64). A change here changes every training run's data order.
  std::mt19937_64 check;
  check.discard(9999);
  ASSERT_EQ(check(), 9981545732273789042ULL);
  EXPECT_EQ(ShuffledIndices(10, 42), (std::vector<int64_t>{1, 7, 9, 0, 3, 8, 4, 2, 5, 6}));
}

}  // namespace
}  // namespace weft
