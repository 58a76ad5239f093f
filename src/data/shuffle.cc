#include "weft/data/shuffle.h"

#include <numeric>

#include "weft/base/error.h"

namespace weft {

uint64_t UniformBelow(std::mt19937_64& rng, uint64_t bound) {
  WEFT_INTERNAL_CHECK(bound > 0, "UniformBelow(0)");
  // Accept draws below the largest multiple of `bound`; the rest would favour
  // small remainders.
  uint64_t limit = UINT64_MAX - UINT64_MAX % bound;
  while (true) {
    uint64_t draw = rng();
    if (draw < limit) return draw % bound;
  }
}

std::vector<int64_t> ShuffledIndices(int64_t n, uint64_t seed) {
  std::vector<int64_t> indices(static_cast<size_t>(n));
  std::iota(indices.begin(), indices.end(), int64_t{0});
  std::mt19937_64 rng(seed);
  SeededShuffle(indices, rng);
  return indices;
}

}  // namespace weft
