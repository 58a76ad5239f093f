// Small helpers over ranges that every module needs: one definition each.
#pragma once

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <ranges>
#include <span>

namespace weft {

// The product of `values` (1 for none): an element count, a mesh's device
// count. It does not check for overflow: callers bound their inputs first
// (base/limits.h, Shape's own checks).
inline int64_t Product(std::span<const int64_t> values) {
  int64_t product = 1;
  for (int64_t v : values) product *= v;
  return product;
}

// The product of values[i] for each i in `indices` (1 for none): the size of
// a set of dimensions, as a dot's contracting or batch dimensions.
inline int64_t Product(std::span<const int64_t> values, std::span<const int64_t> indices) {
  int64_t product = 1;
  for (int64_t i : indices) product *= values[i];
  return product;
}

// Mixes `value` into the hash `seed` (boost's hash_combine constant): the
// hashes of shardings and tile assignments.
inline size_t HashCombine(size_t seed, size_t value) {
  return seed ^ (value + 0x9e3779b97f4a7c15ULL + (seed << 6) + (seed >> 2));
}

// Whether `range` holds an element equal to `value` (C++23's
// std::ranges::contains).
template <std::ranges::input_range Range, typename T>
requires std::equality_comparable_with < std::ranges::range_reference_t<const Range&>,
const T& > bool Contains(const Range& range, const T& value) {
  return std::ranges::find(range, value) != std::ranges::end(range);
}

}  // namespace weft
