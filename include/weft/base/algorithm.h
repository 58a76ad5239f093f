// Small helpers over ranges that every module needs: one definition each.
#pragma once

#include <algorithm>
#include <concepts>
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

// Whether `range` holds an element equal to `value` (C++23's
// std::ranges::contains).
template <std::ranges::input_range Range, typename T>
requires std::equality_comparable_with < std::ranges::range_reference_t<const Range&>,
const T& > bool Contains(const Range& range, const T& value) {
  return std::ranges::find(range, value) != std::ranges::end(range);
}

}  // namespace weft
