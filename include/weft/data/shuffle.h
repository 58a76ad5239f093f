// Seeded shuffling that gives the same order with every standard library:
// std::mt19937_64's output is fixed by the standard, but std::shuffle and
// std::uniform_int_distribution are not, so we draw and shuffle ourselves.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

namespace weft {

// A uniform integer in [0, bound) (bound > 0), by rejection: no modulo bias.
uint64_t UniformBelow(std::mt19937_64& rng, uint64_t bound);

// Fisher–Yates over `values`, drawing with UniformBelow.
template <typename T>
void SeededShuffle(std::vector<T>& values, std::mt19937_64& rng) {
  for (size_t i = values.size(); i > 1; --i) {
    size_t j = static_cast<size_t>(UniformBelow(rng, i));
    std::swap(values[i - 1], values[j]);
  }
}

// 0..n-1 shuffled by a generator seeded with `seed`.
std::vector<int64_t> ShuffledIndices(int64_t n, uint64_t seed);

}  // namespace weft
