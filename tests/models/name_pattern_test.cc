#include "weft/models/name_pattern.h"

#include <gtest/gtest.h>

#include <random>
#include <string>

namespace weft {
namespace {

// An obviously correct (exponential) reference: recursive glob.
bool ReferenceMatch(std::string_view pattern, std::string_view name) {
  if (pattern.empty()) return name.empty();
  if (pattern[0] == '*') {
    for (size_t skip = 0; skip <= name.size(); ++skip) {
      if (ReferenceMatch(pattern.substr(1), name.substr(skip))) return true;
    }
    return false;
  }
  return !name.empty() && (pattern[0] == '?' || pattern[0] == name[0]) &&
         ReferenceMatch(pattern.substr(1), name.substr(1));
}

TEST(MatchesNamePattern, ConfigExamples) {
  EXPECT_TRUE(MatchesNamePattern("layers.*.attention.wq", "layers.0.attention.wq"));
  EXPECT_TRUE(MatchesNamePattern("layers.*.attention.wq", "layers.125.attention.wq"));
  EXPECT_FALSE(MatchesNamePattern("layers.*.attention.wq", "layers.0.attention.wqkv"));
  EXPECT_FALSE(MatchesNamePattern("layers.*.attention.wq", "xlayers.0.attention.wq"));
  EXPECT_TRUE(MatchesNamePattern("*norm*", "layers.3.attention_norm"));
  EXPECT_TRUE(MatchesNamePattern("*norm*", "norm"));
  EXPECT_FALSE(MatchesNamePattern("*norm*", "layers.3.attention.wo"));
  EXPECT_TRUE(MatchesNamePattern("tok_embeddings", "tok_embeddings"));
  EXPECT_TRUE(MatchesNamePattern("layers.?.ffn.w1", "layers.7.ffn.w1"));
  EXPECT_FALSE(MatchesNamePattern("layers.?.ffn.w1", "layers.17.ffn.w1"));
  EXPECT_TRUE(MatchesNamePattern("*", ""));
  EXPECT_FALSE(MatchesNamePattern("", "x"));
}

TEST(MatchesNamePattern, AgreesWithARecursiveReference) {
  std::mt19937_64 rng(3);
  const char pattern_chars[] = {'a', 'b', '.', '*', '?'};
  const char name_chars[] = {'a', 'b', '.'};
  int matches = 0;
  for (int trial = 0; trial < 20000; ++trial) {
    std::string pattern, name;
    for (int i = rng() % 7; i > 0; --i) pattern += pattern_chars[rng() % 5];
    for (int i = rng() % 9; i > 0; --i) name += name_chars[rng() % 3];
    bool expected = ReferenceMatch(pattern, name);
    matches += expected;
    ASSERT_EQ(MatchesNamePattern(pattern, name), expected) << pattern << " vs " << name;
  }
  EXPECT_GT(matches, 1000);  // both outcomes are exercised
}

// The distance is 0 exactly when the pattern matches, and otherwise counts
// the edits to the pattern a typo needs undone.
TEST(NamePatternDistance, CountsTheEditsThatMakeAPatternMatch) {
  EXPECT_EQ(NamePatternDistance("layers.*.attention.wq", "layers.0.attention.wq"), 0u);
  EXPECT_EQ(NamePatternDistance("layers.*.atention.wq", "layers.0.attention.wq"), 1u);
  EXPECT_EQ(NamePatternDistance("layers.*.attention.qw", "layers.0.attention.wq"), 2u);
  // The stacked name without a layer number: "0." is missing.
  EXPECT_EQ(NamePatternDistance("layers.attention.wq", "layers.0.attention.wq"), 2u);
  EXPECT_EQ(NamePatternDistance("tok_embedings", "tok_embeddings"), 1u);
  EXPECT_EQ(NamePatternDistance("", "norm"), 4u);
  EXPECT_EQ(NamePatternDistance("norm", ""), 4u);
  EXPECT_EQ(NamePatternDistance("*", "anything"), 0u);
  std::mt19937_64 rng(5);
  const char pattern_chars[] = {'a', 'b', '.', '*', '?'};
  const char name_chars[] = {'a', 'b', '.'};
  for (int trial = 0; trial < 5000; ++trial) {
    std::string pattern, name;
    for (int i = rng() % 7; i > 0; --i) pattern += pattern_chars[rng() % 5];
    for (int i = rng() % 9; i > 0; --i) name += name_chars[rng() % 3];
    const size_t d = NamePatternDistance(pattern, name);
    ASSERT_EQ(d == 0, ReferenceMatch(pattern, name)) << pattern << " vs " << name;
    // Never more than rewriting every literal and inserting the name.
    ASSERT_LE(d, pattern.size() + name.size()) << pattern << " vs " << name;
  }
}

TEST(ClosestNames, NearestFirstWithinTheDistance) {
  const std::vector<std::string> names = {"tok_embeddings", "layers.*.attention.wq",
                                          "layers.*.attention.wk", "norm", "output"};
  EXPECT_EQ(ClosestNames("layers.*.attention.qw", names, 3, 3),
            (std::vector<std::string>{"layers.*.attention.wq", "layers.*.attention.wk"}));
  EXPECT_EQ(ClosestNames("outptu", names, 2, 3), (std::vector<std::string>{"output"}));
  EXPECT_EQ(ClosestNames("layers.*.attention.w?", names, 3, 1),
            (std::vector<std::string>{"layers.*.attention.wq"}));
  EXPECT_TRUE(ClosestNames("embedding_table", names, 2, 3).empty());
}

}  // namespace
}  // namespace weft
