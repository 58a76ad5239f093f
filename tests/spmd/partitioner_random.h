// Random shardings for the partitioner's property tests.
#pragma once

#include <algorithm>
#include <numeric>
#include <random>
#include <vector>

#include "weft/sharding/hlo_sharding.h"

namespace weft::spmd_test {

// A sharding of a rank-`rank` array over devices 0..n-1: each dim split by a
// random divisor of what is left, the rest replicated, devices shuffled.
inline HloSharding RandomSharding(int64_t n, int64_t rank, std::mt19937_64& rng) {
  std::vector<int64_t> tiles(rank, 1);
  std::vector<int64_t> order(rank);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  int64_t left = n;
  for (int64_t d : order) {
    std::vector<int64_t> divisors;
    for (int64_t t = 1; t <= left; ++t) {
      if (left % t == 0) divisors.push_back(t);
    }
    tiles[d] = divisors[std::uniform_int_distribution<size_t>(0, divisors.size() - 1)(rng)];
    left /= tiles[d];
  }
  if (left == n) return HloSharding::Replicate();
  std::vector<int64_t> devices(n);
  std::iota(devices.begin(), devices.end(), 0);
  if (std::bernoulli_distribution(0.5)(rng)) std::shuffle(devices.begin(), devices.end(), rng);
  if (left > 1) {
    tiles.push_back(left);
    return HloSharding::PartialTile(TileAssignment(tiles, devices));
  }
  return HloSharding::Tile(TileAssignment(tiles, devices));
}

}  // namespace weft::spmd_test
