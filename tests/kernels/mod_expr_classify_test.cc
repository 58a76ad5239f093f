// Block classification of mask expressions (ModExpr::ClassifyMask) against
// evaluation of every element of the block: on random expressions and
// blocks it is exact whenever it answers, never answers where evaluation
// fails, and answers for the blocks of document + causal masks that lie in
// one segment, across segments, or above the diagonal.
#include <gtest/gtest.h>

#include <optional>
#include <random>
#include <string>
#include <vector>

#include "weft/base/error.h"
#include "weft/kernels/mod_expr.h"

namespace weft::kernels {
namespace {

// Random integer and boolean expression texts over b, h, q_idx, kv_idx,
// literals and tensor t of shape [2, n] (indices sometimes out of range).
class TextGen {
 public:
  TextGen(std::mt19937& rng, int64_t n) : rng_(rng), n_(n) {}

  std::string Int(int depth) {
    const int pick = depth <= 0 ? Pick(4) : Pick(12);
    switch (pick) {
      case 0:
        return std::to_string(Uniform(-40, 40));
      case 1:
        return "q_idx";
      case 2:
        return "kv_idx";
      case 3:
        return Pick(2) ? "b" : "h";
      case 4:
        return "(" + Int(depth - 1) + " + " + Int(depth - 1) + ")";
      case 5:
        return "(" + Int(depth - 1) + " - " + Int(depth - 1) + ")";
      case 6:
        return "(" + Int(depth - 1) + " * " + std::to_string(Uniform(-3, 3)) + ")";
      case 7:  // a literal divisor (sometimes 0: an error) or a variable one
        return "(" + Int(depth - 1) + " / " +
               (Pick(4) ? std::to_string(Uniform(-5, 9)) : Int(depth - 1)) + ")";
      case 8:
        return "(" + Int(depth - 1) + " % " +
               (Pick(4) ? std::to_string(Uniform(-5, 9)) : Int(depth - 1)) + ")";
      case 9:
        return std::string(Pick(2) ? "min(" : "max(") + Int(depth - 1) + ", " + Int(depth - 1) +
               ")";
      case 10:
        return "abs(" + Int(depth - 1) + ")";
      default: {
        // In range most of the time: clamped, or an index that may leave it.
        const std::string i = Int(depth - 1);
        const std::string index =
            Pick(3) ? "min(max(" + i + ", 0), " + std::to_string(n_ - 1) + ")" : i;
        return "t[" + std::string(Pick(2) ? "b" : "0") + ", " + index + "]";
      }
    }
  }

  std::string Bool(int depth) {
    static const char* const kCompare[] = {" == ", " != ", " < ", " <= ", " > ", " >= "};
    const int pick = depth <= 0 ? 0 : Pick(6);
    switch (pick) {
      case 0:
      case 1:
        return "(" + Int(depth - 1) + kCompare[Pick(6)] + Int(depth - 1) + ")";
      case 2:
        return "(" + Bool(depth - 1) + " && " + Bool(depth - 1) + ")";
      case 3:
        return "(" + Bool(depth - 1) + " || " + Bool(depth - 1) + ")";
      case 4:
        return "!" + Bool(depth - 1);
      default:
        return "(" + Bool(depth - 1) + " ? " + Bool(depth - 1) + " : " + Bool(depth - 1) + ")";
    }
  }

 private:
  int Pick(int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng_); }
  int64_t Uniform(int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng_);
  }
  std::mt19937& rng_;
  int64_t n_;
};

// What evaluating every element of the block says: all kept (true), none
// kept (false), mixed (nullopt); `failed` when evaluation throws.
std::optional<bool> Evaluated(const ModExpr& e, int64_t b, int64_t h, int64_t q0, int64_t q1,
                              int64_t k0, int64_t k1, bool& failed) {
  std::vector<uint8_t> keep(static_cast<size_t>((q1 - q0) * (k1 - k0)));
  failed = false;
  try {
    e.EvaluateMask(b, h, q0, q1 - q0, k0, k1 - k0, keep.data(), k1 - k0);
  } catch (const Error&) {
    failed = true;
    return std::nullopt;
  }
  int64_t kept = 0;
  for (uint8_t k : keep) kept += k;
  if (kept == 0) return false;
  if (kept == static_cast<int64_t>(keep.size())) return true;
  return std::nullopt;
}

TEST(ModExprClassifyTest, ExactWhenItAnswersOnRandomExpressions) {
  std::mt19937 rng(20261127);
  const int64_t n = 48;
  std::vector<int64_t> values(2 * n);
  int answered = 0, blocks = 0, failing = 0;
  for (int trial = 0; trial < 400; ++trial) {
    // Runs of equal ids (segments) or scattered ones.
    std::uniform_int_distribution<int64_t> id(-3, 6);
    int64_t current = id(rng);
    for (int64_t& v : values) {
      if (std::uniform_int_distribution<int>(0, 5)(rng) == 0) current = id(rng);
      v = trial % 2 ? current : id(rng);
    }
    TextGen gen(rng, n);
    const std::string text = gen.Bool(3);
    const ModExpr e = ModExpr::ParseMask(text, {{"t", IndexTensor{{2, n}, values}}});
    for (int k = 0; k < 12; ++k) {
      std::uniform_int_distribution<int64_t> pos(0, n - 1);
      int64_t q0 = pos(rng), q1 = pos(rng), k0 = pos(rng), k1 = pos(rng);
      if (q0 > q1) std::swap(q0, q1);
      if (k0 > k1) std::swap(k0, k1);
      ++q1;
      ++k1;
      const int64_t b = std::uniform_int_distribution<int64_t>(0, 1)(rng);
      const int64_t h = std::uniform_int_distribution<int64_t>(0, 3)(rng);
      bool failed = false;
      const std::optional<bool> truth = Evaluated(e, b, h, q0, q1, k0, k1, failed);
      const std::optional<bool> told = e.ClassifyMask(b, h, q0, q1, k0, k1);
      ++blocks;
      failing += failed;
      if (!told) continue;
      ++answered;
      EXPECT_FALSE(failed) << text << " on [" << q0 << "," << q1 << ") x [" << k0 << "," << k1
                           << "): answered where evaluation fails";
      EXPECT_EQ(truth, told) << text << " on [" << q0 << "," << q1 << ") x [" << k0 << "," << k1
                             << ") at b=" << b << " h=" << h;
    }
  }
  // The generator reaches both sides: answers, and blocks that fail.
  EXPECT_GT(answered, blocks / 5) << answered << " of " << blocks;
  EXPECT_GT(failing, 0);
}

TEST(ModExprClassifyTest, DocumentCausalBlocksAreToldWithoutEvaluating) {
  // Two rows of 256 tokens: segments [0, 100), [100, 256) in row 0 and one
  // segment in row 1.
  const int64_t s = 256;
  std::vector<int64_t> seg(2 * s);
  for (int64_t i = 0; i < s; ++i) {
    seg[i] = i < 100 ? 7 : 9;
    seg[s + i] = 4;
  }
  const ModExpr e = ModExpr::ParseMask("q_idx >= kv_idx && seg[b, q_idx] == seg[b, kv_idx]",
                                       {{"seg", IndexTensor{{2, s}, seg}}});
  // Below the diagonal inside one segment: full.
  EXPECT_EQ(e.ClassifyMask(0, 0, 64, 96, 0, 32), std::optional<bool>(true));
  EXPECT_EQ(e.ClassifyMask(0, 5, 192, 256, 128, 192), std::optional<bool>(true));
  EXPECT_EQ(e.ClassifyMask(1, 0, 128, 256, 0, 128), std::optional<bool>(true));
  // Query rows of one segment, keys of the other: empty.
  EXPECT_EQ(e.ClassifyMask(0, 0, 128, 192, 0, 64), std::optional<bool>(false));
  // Above the diagonal: empty, whatever the segments.
  EXPECT_EQ(e.ClassifyMask(0, 0, 0, 64, 64, 128), std::optional<bool>(false));
  // The diagonal, and a block across the segment boundary: evaluate.
  EXPECT_EQ(e.ClassifyMask(1, 0, 64, 128, 64, 128), std::nullopt);
  EXPECT_EQ(e.ClassifyMask(0, 0, 128, 192, 64, 128), std::nullopt);
  // Classification of an empty block, or of a score expression, is refused.
  EXPECT_THROW(e.ClassifyMask(0, 0, 8, 8, 0, 8), Error);
  EXPECT_THROW(ModExpr::ParseScore("score * 2.0").ClassifyMask(0, 0, 0, 8, 0, 8), Error);
}

TEST(ModExprClassifyTest, NeverAnswersWhereEvaluationFails) {
  const std::vector<int64_t> t(16, 3);
  // Index out of range for q_idx >= 16: evaluation fails there, so no
  // answer for blocks reaching it, although t is 3 everywhere it exists.
  const ModExpr e = ModExpr::ParseMask("t[q_idx] == 3", {{"t", IndexTensor{{16}, t}}});
  EXPECT_EQ(e.ClassifyMask(0, 0, 0, 16, 0, 64), std::optional<bool>(true));
  EXPECT_EQ(e.ClassifyMask(0, 0, 8, 24, 0, 64), std::nullopt);
  // Guarded by a condition that is false on the block: the guard decides.
  const ModExpr guarded =
      ModExpr::ParseMask("q_idx < 16 && t[q_idx] == 3", {{"t", IndexTensor{{16}, t}}});
  EXPECT_EQ(guarded.ClassifyMask(0, 0, 16, 40, 0, 8), std::optional<bool>(false));
  // A divisor that may be 0 on the block.
  const ModExpr div = ModExpr::ParseMask("q_idx / (kv_idx - 4) >= 0");
  EXPECT_EQ(div.ClassifyMask(0, 0, 0, 8, 0, 8), std::nullopt);
  EXPECT_EQ(div.ClassifyMask(0, 0, 0, 8, 5, 9), std::optional<bool>(true));
  // Arithmetic that wraps on the block has no bounds.
  const ModExpr wrap = ModExpr::ParseMask("q_idx * 4611686018427387904 >= 0");
  EXPECT_EQ(wrap.ClassifyMask(0, 0, 0, 8, 0, 8), std::nullopt);
}

}  // namespace
}  // namespace weft::kernels
