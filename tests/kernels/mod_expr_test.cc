// The expression language's parser: precedence, semantics of the operators,
// type checks and error messages with columns, tensor validation, and the
// text helpers (RenameIdentifiers, FormatFloatLiteral). Evaluation over
// tiles (broadcasting, guards, derivatives) is in mod_expr_eval_test.cc.
#include "weft/kernels/mod_expr.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <random>

#include "error_of.h"
#include "weft/base/error.h"

namespace weft::kernels {
namespace {

// Evaluates a score expression at one point and returns the value.
float ScoreAt(const std::string& text, float score = 0.0f, int64_t b = 0, int64_t h = 0,
              int64_t q = 0, int64_t kv = 0, std::map<std::string, ValueTensor> tensors = {}) {
  ModExpr e = ModExpr::ParseScore(text, std::move(tensors));
  float s = score;
  e.ApplyScore(b, h, q, 1, kv, 1, &s, 1, nullptr);
  return s;
}

// The message of the weft::Error that fn throws ("" if none).
using testing::ErrorOf;

TEST(ModExprTest, PrecedenceAndAssociativity) {
  struct Case {
    const char* text;
    double expected;
  };
  const Case cases[] = {
      {"1 + 2 * 3", 7},
      {"(1 + 2) * 3", 9},
      {"10 - 4 - 3", 3},    // left-associative
      {"2 * 3 % 4", 2},     // (2 * 3) % 4, not 2 * (3 % 4) = 6
      {"100 / 10 / 5", 2},  // (100 / 10) / 5
      {"-2 * -3", 6},
      {"- - 4", 4},
      {"+5 - -5", 10},
      {"1 < 2 == 2 < 3 ? 1 : 0", 1},          // comparisons bind tighter than ==
      {"true || false && false ? 1 : 0", 1},  // && binds tighter than ||
      {"(true || false) && false ? 1 : 0", 0},
      {"!false && false ? 1 : 0", 0},   // ! binds tighter than &&
      {"false ? 1 : true ? 2 : 3", 2},  // right-associative ?:
      {"true ? false ? 1 : 2 : 3", 2},
      {"1 + (false ? 10 : 20) * 2", 41},
      {"min(5, 2, 8)", 2},
      {"max(-1, -7, -3)", -1},
      {"max(1, 2.5)", 2.5},
      {"abs(-3) + abs(2)", 5},
      {"abs(-2.5)", 2.5},
      {"1e2 + .5 + 2.", 102.5},
      {"3 == 3.0 ? 1 : 0", 1},  // int promoted to float
  };
  for (const Case& c : cases) {
    EXPECT_DOUBLE_EQ(ScoreAt(c.text), c.expected) << c.text;
  }
}

TEST(ModExprTest, DivisionIsFloorDivisionAndModuloFollowsTheDivisor) {
  std::mt19937 rng(11);
  std::uniform_int_distribution<int64_t> dist(-50, 50);
  for (int trial = 0; trial < 300; ++trial) {
    const int64_t a = dist(rng);
    int64_t b = dist(rng);
    if (b == 0) b = 7;
    const int64_t floor_div = static_cast<int64_t>(std::floor(static_cast<double>(a) / b));
    const int64_t mod = a - floor_div * b;  // Python's a % b
    const std::string div_text = fmt::format("({}) / ({})", a, b);
    const std::string mod_text = fmt::format("({}) % ({})", a, b);
    EXPECT_EQ(ScoreAt(div_text), static_cast<float>(floor_div)) << div_text;
    EXPECT_EQ(ScoreAt(mod_text), static_cast<float>(mod)) << mod_text;
    // Float division is true division; float modulo also takes b's sign.
    const std::string fdiv = fmt::format("({}.0) / ({})", a, b);
    EXPECT_FLOAT_EQ(ScoreAt(fdiv), static_cast<float>(a) / static_cast<float>(b)) << fdiv;
    const double fa = a + 0.25;
    const double fmod_py = fa - std::floor(fa / b) * b;
    EXPECT_NEAR(ScoreAt(fmt::format("({}) % ({})", fa, b)), fmod_py, 1e-5) << fa << " % " << b;
  }
  // Wraps instead of trapping.
  EXPECT_EQ(ScoreAt("(-9223372036854775807 - 1) / -1 < 0 ? 1 : 0"), 1.0f);
  EXPECT_EQ(ScoreAt("9223372036854775807 + 1 < 0 ? 1 : 0"), 1.0f);
}

TEST(ModExprTest, FloatFunctions) {
  std::mt19937 rng(12);
  std::uniform_real_distribution<float> dist(0.1f, 4.0f);
  for (int trial = 0; trial < 50; ++trial) {
    const float x = dist(rng);
    EXPECT_NEAR(ScoreAt("tanh(score)", x), std::tanh(static_cast<double>(x)), 1e-6);
    EXPECT_NEAR(ScoreAt("exp(score)", x), std::exp(static_cast<double>(x)), 1e-5 * std::exp(x));
    EXPECT_NEAR(ScoreAt("log(score)", x), std::log(static_cast<double>(x)), 1e-6);
    EXPECT_NEAR(ScoreAt("sqrt(score)", x), std::sqrt(static_cast<double>(x)), 1e-6);
    EXPECT_NEAR(ScoreAt("sigmoid(-score)", x), 1.0 / (1.0 + std::exp(static_cast<double>(x))),
                1e-6);
  }
  EXPECT_FLOAT_EQ(ScoreAt("sqrt(16)"), 4.0f);  // int arguments become floats
  EXPECT_FLOAT_EQ(ScoreAt("exp(0)"), 1.0f);
}

TEST(ModExprTest, VariablesAndTensorIndexing) {
  std::mt19937 rng(13);
  ValueTensor t{{2, 3, 4}, {}};
  for (int i = 0; i < 24; ++i)
    t.values.push_back(std::uniform_real_distribution<float>(-1, 1)(rng));
  for (int64_t b = 0; b < 2; ++b) {
    for (int64_t q = 0; q < 3; ++q) {
      for (int64_t kv = 0; kv < 4; ++kv) {
        const float expected =
            t.values[(b * 3 + q) * 4 + kv] * 2.0f + static_cast<float>(b + 5 * q);
        EXPECT_EQ(
            ScoreAt("t[b, q_idx, kv_idx] * 2.0 + (b + 5 * q_idx)", 0, b, 7, q, kv, {{"t", t}}),
            expected);
      }
    }
  }
  EXPECT_EQ(ScoreAt("score + h", 1.5f, 0, 3), 4.5f);
}

TEST(ModExprTest, ParseErrorsNameTheColumn) {
  struct Case {
    const char* text;
    const char* message;  // a part of the expected message
  };
  const std::map<std::string, IndexTensor> tensors = {
      {"seg", IndexTensor{{2, 8}, std::vector<int64_t>(16, 0)}}};
  const Case cases[] = {
      {"seg[b, q_idx == kv_idx",
       "expected ']' after the indices of 'seg' at column 23 (end of input)"},
      {"q_idx >= ", "expected an operand at column 10 (end of input)"},
      {"q_idx >= kv_idx)", "unexpected ')' at column 16"},
      {"(q_idx >= kv_idx", "expected ')' to close '(' at column 17"},
      {"q_idx >= kv_idx ? true", "expected ':' in 'condition ? a : b' at column 23"},
      {"foo > 1", "unknown name 'foo' at column 1"},
      {"q_idx > bar[1]",
       "unknown tensor 'bar' at column 9 in 'q_idx > bar[1]'; known names: b, h, q_idx, kv_idx, "
       "seg[...]"},
      {"seg[b] == 1",
       "tensor 'seg' has shape [2, 8] and needs 2 indices, but 1 were given at column 1"},
      {"seg == 1", "tensor 'seg' must be indexed, e.g. seg[..., ...] at column 1"},
      {"seg[b, 1.5] == 1",
       "index 1 of tensor 'seg' must be an integer, but it is a float at column 8"},
      {"q_idx[0] == 1", "'q_idx' is not a tensor and cannot be indexed at column 1"},
      {"score > 0", "'score' is only defined in score expressions"},
      {"q_idx && kv_idx", "'&&' needs booleans, but its left operand is an integer at column 7"},
      {"q_idx < kv_idx < 3", "'<' needs numbers, but its left operand is boolean at column 16"},
      {"(q_idx < 1) + 1 > 0", "'+' needs numbers, but its left operand is boolean at column 13"},
      {"q_idx == (kv_idx > 1)", "'==' compares a boolean with a number at column 7"},
      {"!q_idx", "'!' needs a boolean, but its operand is an integer at column 1"},
      {"-(q_idx > 1)", "'-' needs numbers, but its operand is boolean at column 1"},
      {"q_idx ? true : false",
       "the condition of '?:' must be boolean, but it is an integer at column 7"},
      {"q_idx > 0 ? true : 1",
       "must both be boolean or both numbers, but they are boolean and an integer at column 11"},
      {"tanh(q_idx, 1) > 0", "'tanh' needs 1 argument, but 2 were given at column 1"},
      {"min(q_idx) > 0", "'min' needs at least 2 arguments, but 1 were given at column 1"},
      {"sin(q_idx) > 0",
       "unknown function 'sin' at column 1 in 'sin(q_idx) > 0'; functions are min, max, abs, tanh, "
       "exp, log, sqrt, sigmoid"},
      {"tanh > 0", "'tanh' is a function at column 1 in 'tanh > 0'; call it as tanh(...)"},
      {"q_idx = kv_idx", "unexpected '=' (write '==' to compare) at column 7"},
      {"q_idx >= kv_idx & true", "unexpected '&' (write '&&') at column 17"},
      {"q_idx >= kv_idx | true", "unexpected '|' (write '||') at column 17"},
      {"q_idx >= 3 $ 4", "unexpected character '$' at column 12"},
      {"q_idx >= 12abc", "unexpected 'a' after the number '12' at column 12"},
      {"q_idx >= 99999999999999999999",
       "integer literal '99999999999999999999' does not fit in 64 bits at column 10"},
      {"q_idx >= 1e99", "float literal '1e99' is out of range at column 10"},
      {"q_idx + kv_idx",
       "a mask must be boolean (e.g. a comparison), but the expression is an integer"},
      {"", "expected an operand at column 1 (end of input)"},
  };
  for (const Case& c : cases) {
    const std::string message = ErrorOf([&] { ModExpr::ParseMask(c.text, tensors); });
    EXPECT_NE(message.find(c.message), std::string::npos)
        << "text: " << c.text << "\nmessage: " << message;
    EXPECT_EQ(message.rfind("mask_expr: ", 0), 0u) << message;
    EXPECT_NE(message.find(std::string("in '") + c.text + "'"), std::string::npos) << message;
  }
  EXPECT_NE(ErrorOf([] {
              ModExpr::ParseScore("score > 0");
            }).find("a score mod must be a number, but the expression is boolean in 'score > 0'"),
            std::string::npos);
  EXPECT_NE(ErrorOf([] {
              ModExpr::ParseScore("score + 1.5 *");
            }).find("score_expr: expected an operand at column 14"),
            std::string::npos);
}

TEST(ModExprTest, NestingIsBoundedInsteadOfOverflowingTheStack) {
  const std::string deep = std::string(5000, '(') + "q_idx" + std::string(5000, ')') + " > 0";
  EXPECT_NE(ErrorOf([&] { ModExpr::ParseMask(deep); }).find("nested more than"), std::string::npos);
  std::string chain = "q_idx";
  for (int i = 0; i < 2000; ++i) chain += " + 1";
  EXPECT_NE(ErrorOf([&] { ModExpr::ParseMask(chain + " > 0"); }).find("nested more than"),
            std::string::npos);
  // Moderate depth is fine.
  std::string ok = "q_idx";
  for (int i = 0; i < 100; ++i) ok += " + 1";
  EXPECT_EQ(ScoreAt(ok, 0, 0, 0, 5), 105.0f);
}

TEST(ModExprTest, TensorsAreValidated) {
  EXPECT_NE(ErrorOf([] {
              ModExpr::ParseMask("t[q_idx] > 0", {{"t", IndexTensor{{2, 3}, {1, 2, 3}}}});
            }).find("tensor 't' has 3 values but its shape [2, 3] needs 6"),
            std::string::npos);
  EXPECT_NE(ErrorOf([] {
              ModExpr::ParseMask("true", {{"q_idx", IndexTensor{{1}, {1}}}});
            }).find("tensor name 'q_idx' is a reserved name"),
            std::string::npos);
  EXPECT_NE(ErrorOf([] {
              ModExpr::ParseMask("true", {{"my-ids", IndexTensor{{1}, {1}}}});
            }).find("tensor name 'my-ids' is not an identifier"),
            std::string::npos);
  EXPECT_NE(ErrorOf([] {
              ModExpr::ParseScore("score", {{"t", ValueTensor{{-1}, {}}}});
            }).find("negative dimension"),
            std::string::npos);
  // A mask expression cannot be applied as a score mod, nor the reverse.
  ModExpr mask = ModExpr::ParseMask("q_idx >= kv_idx");
  float s = 0;
  EXPECT_THROW(mask.ApplyScore(0, 0, 0, 1, 0, 1, &s, 1, nullptr), Error);
  uint8_t keep = 0;
  EXPECT_THROW(ModExpr::ParseScore("score").EvaluateMask(0, 0, 0, 1, 0, 1, &keep, 1), Error);
  EXPECT_EQ(mask.kind(), ModExpr::Kind::kMask);
  EXPECT_EQ(mask.text(), "q_idx >= kv_idx");
}

TEST(ModExprTest, RenameIdentifiersReplacesWholeNamesOnly) {
  const std::map<std::string, std::string> renames = {{"seg", "seg_2"}, {"e", "E"}, {"b", "bb"}};
  EXPECT_EQ(RenameIdentifiers("seg[b, q_idx] == segment[b, kv_idx] && 1e5 > 2.5e-3 + e", renames),
            "seg_2[bb, q_idx] == segment[bb, kv_idx] && 1e5 > 2.5e-3 + E");
  EXPECT_EQ(RenameIdentifiers("<lambda: seg>", renames), "<lambda: seg_2>");
  EXPECT_EQ(RenameIdentifiers("q_idx >= kv_idx", {}), "q_idx >= kv_idx");
}

TEST(ModExprTest, FloatLiteralsRoundTripExactly) {
  std::mt19937 rng(14);
  std::vector<float> values = {0.0f,   -0.0f,         1.0f,   50.0f,    0.1f,
                               1e-30f, 3.4028235e38f, 1e-45f, INFINITY, -INFINITY};
  for (int i = 0; i < 500; ++i) {
    uint32_t bits = static_cast<uint32_t>(rng());
    float f;
    std::memcpy(&f, &bits, sizeof f);
    if (std::isfinite(f)) values.push_back(f);
  }
  for (float v : values) {
    const std::string text = FormatFloatLiteral(v);
    const float back = ScoreAt(text);
    EXPECT_EQ(std::memcmp(&back, &v, sizeof v), 0) << text << " read back as " << back;
    EXPECT_NE(text.find_first_of(".e"), std::string::npos) << text << " would read as an int";
  }
  EXPECT_TRUE(std::isnan(ScoreAt(FormatFloatLiteral(NAN))));
}

}  // namespace
}  // namespace weft::kernels
