// Parameter-name patterns, as written in configs: "layers.*.attention.wq",
// "*norm*". '*' matches any run of characters (dots included), '?' one
// character; everything else matches itself. The whole name must match.
#pragma once

#include <string_view>

namespace weft {

bool MatchesNamePattern(std::string_view pattern, std::string_view name);

}  // namespace weft
