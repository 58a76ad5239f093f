#include "weft/models/name_pattern.h"

#include <algorithm>
#include <utility>

namespace weft {

// Greedy glob matching with backtracking to the last '*': linear in practice,
// no recursion.
bool MatchesNamePattern(std::string_view pattern, std::string_view name) {
  size_t p = 0, n = 0;
  size_t star = std::string_view::npos, resume = 0;
  while (n < name.size()) {
    if (p < pattern.size() && (pattern[p] == '?' || pattern[p] == name[n])) {
      ++p, ++n;
    } else if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      resume = n;
    } else if (star != std::string_view::npos) {
      p = star + 1;
      n = ++resume;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

// d[i][j]: the edits that make pattern[0, i) match name[0, j). A '*' takes
// any run at no cost; '?' any one character; a literal costs 1 to delete, to
// substitute, and each name character matched by nothing costs 1 to insert.
size_t NamePatternDistance(std::string_view pattern, std::string_view name) {
  std::vector<size_t> prev(name.size() + 1), row(name.size() + 1);
  for (size_t j = 0; j <= name.size(); ++j) prev[j] = j;  // empty pattern: insert all
  for (size_t i = 1; i <= pattern.size(); ++i) {
    const char c = pattern[i - 1];
    if (c == '*') {
      row[0] = prev[0];
      for (size_t j = 1; j <= name.size(); ++j) row[j] = std::min(prev[j], row[j - 1]);
    } else {
      row[0] = prev[0] + 1;
      for (size_t j = 1; j <= name.size(); ++j) {
        const size_t substitute = prev[j - 1] + (c == '?' || c == name[j - 1] ? 0 : 1);
        row[j] = std::min({substitute, prev[j] + 1, row[j - 1] + 1});
      }
    }
    std::swap(prev, row);
  }
  return prev[name.size()];
}

std::vector<std::string> ClosestNames(std::string_view pattern, std::span<const std::string> names,
                                      size_t max_distance, size_t limit) {
  std::vector<std::pair<size_t, size_t>> ranked;  // (distance, index)
  for (size_t i = 0; i < names.size(); ++i) {
    const size_t d = NamePatternDistance(pattern, names[i]);
    if (d <= max_distance) ranked.emplace_back(d, i);
  }
  std::stable_sort(ranked.begin(), ranked.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<std::string> out;
  for (const auto& [d, i] : ranked) {
    if (out.size() >= limit) break;
    out.push_back(names[i]);
  }
  return out;
}

}  // namespace weft
