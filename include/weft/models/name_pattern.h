// Parameter-name patterns, as written in configs: "layers.*.attention.wq",
// "*norm*". '*' matches any run of characters (dots included), '?' one
// character; everything else matches itself. The whole name must match.
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace weft {

bool MatchesNamePattern(std::string_view pattern, std::string_view name);

// The fewest single-character edits (insert, delete, substitute) to the
// pattern's characters that make it match `name`; 0 exactly when it matches.
// "layers.*.atention.wq" is 1 from "layers.0.attention.wq".
size_t NamePatternDistance(std::string_view pattern, std::string_view name);

// The names nearest to the pattern (NamePatternDistance), nearest first, ties
// in the given order; only those within `max_distance`, at most `limit`.
std::vector<std::string> ClosestNames(std::string_view pattern, std::span<const std::string> names,
                                      size_t max_distance, size_t limit);

}  // namespace weft
