// Built-in score mods against float64 references: values, and derivatives
// against finite differences; the round trip through ToString()/Tensors()
// into ScoreExpr; Validate() messages.
#include "weft/kernels/score_mod.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>

#include "weft/base/error.h"

namespace weft::kernels {
namespace {

// The float64 meaning of a score mod at (h, q, kv).
using Reference = std::function<double(double s, int64_t h, int64_t q, int64_t kv)>;

struct Tile {
  int64_t b, h, q0, nq, k0, nk, ld;
  std::vector<float> raw;
};

Tile RandomTile(std::mt19937& rng, int64_t heads, int64_t q_len, int64_t kv_len) {
  const int64_t sizes[] = {1, 3, 16, 33, 64};
  Tile t;
  t.nq = std::min(sizes[rng() % 5], q_len);
  t.nk = std::min(sizes[rng() % 5], kv_len);
  t.q0 = rng() % (q_len - t.nq + 1);
  t.k0 = rng() % (kv_len - t.nk + 1);
  t.b = rng() % 2;
  t.h = rng() % heads;
  t.ld = t.nk + rng() % 3;
  t.raw.resize(t.nq * t.ld);
  for (float& x : t.raw) x = std::uniform_real_distribution<float>(-60, 60)(rng);
  return t;
}

// Values within float rounding of the reference, derivatives within 1e-4 of
// central differences, the padding past nk untouched, and the same values
// with or without the gradient.
void ExpectMatches(const ScoreModPtr& mod, const Reference& f, const Tile& t,
                   const std::string& what) {
  std::vector<float> s = t.raw, grad(t.raw.size(), -7.0f), s_only = t.raw;
  mod->Apply(t.b, t.h, t.q0, t.nq, t.k0, t.nk, s.data(), t.ld, grad.data());
  mod->Apply(t.b, t.h, t.q0, t.nq, t.k0, t.nk, s_only.data(), t.ld, nullptr);
  for (int64_t i = 0; i < t.nq; ++i) {
    for (int64_t j = 0; j < t.ld; ++j) {
      const int64_t k = i * t.ld + j;
      if (j >= t.nk) {
        ASSERT_EQ(s[k], t.raw[k]) << what;
        ASSERT_EQ(grad[k], -7.0f) << what;
        continue;
      }
      const double x = t.raw[k];
      const int64_t q = t.q0 + i, kv = t.k0 + j;
      const double value = f(x, t.h, q, kv);
      const double eps = 1e-5;
      const double fd = (f(x + eps, t.h, q, kv) - f(x - eps, t.h, q, kv)) / (2 * eps);
      ASSERT_NEAR(s[k], value, 1e-6 * (1 + std::abs(value)) + 1e-6 * std::abs(x))
          << what << " score " << x << " q " << q << " kv " << kv;
      ASSERT_NEAR(grad[k], fd, 1e-4 * (1 + std::abs(fd))) << what << " score " << x;
      ASSERT_EQ(s_only[k], s[k]) << what;
    }
  }
}

// The mod written down and parsed back computes the same function.
void ExpectRoundTrip(const ScoreModPtr& mod, const Tile& t) {
  const std::string text = mod->ToString();
  const ScoreModPtr parsed = ScoreExpr(text, mod->Tensors());
  EXPECT_EQ(parsed->ToString(), text);
  std::vector<float> a = t.raw, b = t.raw, ga(t.raw.size()), gb(t.raw.size());
  mod->Apply(t.b, t.h, t.q0, t.nq, t.k0, t.nk, a.data(), t.ld, ga.data());
  parsed->Apply(t.b, t.h, t.q0, t.nq, t.k0, t.nk, b.data(), t.ld, gb.data());
  for (size_t k = 0; k < a.size(); ++k) {
    ASSERT_EQ(a[k], b[k]) << text;  // the same float operations in the same order
    ASSERT_NEAR(ga[k], gb[k], 1e-6) << text;
  }
}

TEST(ScoreModTest, SoftcapValuesAndDerivatives) {
  std::mt19937 rng(500);
  for (float cap : {0.5f, 20.0f, 50.0f, 1e4f}) {
    const ScoreModPtr mod = Softcap(cap);
    const Reference f = [cap](double s, int64_t, int64_t, int64_t) {
      return cap * std::tanh(s / cap);
    };
    for (int trial = 0; trial < 10; ++trial) {
      const Tile t = RandomTile(rng, 1, 100, 90);
      ExpectMatches(mod, f, t, mod->ToString());
      ExpectRoundTrip(mod, t);
    }
  }
  EXPECT_EQ(Softcap(50)->ToString(), "50.0 * tanh(score / 50.0)");
  EXPECT_THROW(Softcap(0), Error);
  EXPECT_THROW(Softcap(-1), Error);
  EXPECT_THROW(Softcap(INFINITY), Error);
}

TEST(ScoreModTest, AlibiValuesAndDerivatives) {
  std::mt19937 rng(501);
  const int64_t heads = 6;
  std::vector<float> slopes;
  for (int64_t h = 0; h < heads; ++h) slopes.push_back(std::exp2(-0.5f * (h + 1)));
  const ScoreModPtr mod = Alibi(slopes);
  const Reference f = [&](double s, int64_t h, int64_t q, int64_t kv) {
    return s + static_cast<double>(slopes[h]) * static_cast<double>(kv - q);
  };
  for (int trial = 0; trial < 40; ++trial) {
    const Tile t = RandomTile(rng, heads, 130, 65);
    ExpectMatches(mod, f, t, "alibi");
    ExpectRoundTrip(mod, t);
  }
  EXPECT_EQ(mod->ToString(), "score + alibi_slopes[h] * (kv_idx - q_idx)");
  mod->Validate(2, heads, 10, 10);
  try {
    mod->Validate(2, 8, 10, 10);
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(),
                 "alibi: 6 slopes but the attention has 8 query heads; pass one slope per query "
                 "head");
  }
  float s = 0;
  EXPECT_THROW(mod->Apply(0, 6, 0, 1, 0, 1, &s, 1, nullptr), Error);  // head out of range
}

TEST(ScoreModTest, RelativeBiasValuesAndDerivatives) {
  std::mt19937 rng(502);
  // (q_len, kv_len) pairs, including q_len != kv_len and length 1.
  const std::pair<int64_t, int64_t> lengths[] = {{1, 1}, {63, 63}, {65, 130}, {130, 7}, {1, 65}};
  for (const auto& [q_len, kv_len] : lengths) {
    std::vector<float> table(q_len + kv_len - 1);
    for (float& x : table) x = std::normal_distribution<float>()(rng);
    const ScoreModPtr mod =
        q_len == kv_len && rng() % 2 ? RelativeBias(table) : RelativeBias(table, kv_len);
    mod->Validate(1, 1, q_len, kv_len);
    const Reference f = [&, kv_len = kv_len](double s, int64_t, int64_t q, int64_t kv) {
      return s + static_cast<double>(table[q - kv + kv_len - 1]);
    };
    for (int trial = 0; trial < 20; ++trial) {
      const Tile t = RandomTile(rng, 1, q_len, kv_len);
      ExpectMatches(mod, f, t, mod->ToString());
      ExpectRoundTrip(mod, t);
    }
  }
  EXPECT_EQ(RelativeBias(std::vector<float>(7))->ToString(),
            "score + relative_bias[q_idx - kv_idx + 3]");
  EXPECT_EQ(RelativeBias(std::vector<float>(1))->ToString(),
            "score + relative_bias[q_idx - kv_idx]");
}

TEST(ScoreModTest, RelativeBiasChecksTheLengths) {
  auto error = [](const std::function<void()>& fn) -> std::string {
    try {
      fn();
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  // An even table cannot be 2 * S - 1 entries: it needs kv_len.
  EXPECT_NE(error([] { RelativeBias(std::vector<float>(10)); }).find("pass kv_len"),
            std::string::npos);
  const ScoreModPtr square = RelativeBias(std::vector<float>(9));  // q_len = kv_len = 5
  EXPECT_EQ(error([&] { square->Validate(1, 1, 5, 5); }), "");
  EXPECT_EQ(error([&] { square->Validate(1, 1, 6, 4); }),
            "relative_bias: the mod was made for kv_len 5 but the attention has kv_len 4; pass "
            "kv_len (Python: relative_bias(table, kv_len=...); C++: RelativeBias(table, kv_len))");
  EXPECT_EQ(error([&] { square->Validate(1, 1, 5, 6); }),
            "relative_bias: the table has 9 entries but the attention (q_len 5, kv_len 6) needs "
            "q_len + kv_len - 1 = 10");
  EXPECT_EQ(error([&] { RelativeBias(std::vector<float>(9), 3)->Validate(1, 1, 7, 3); }), "");
  EXPECT_THROW(RelativeBias(std::vector<float>(9), 10), Error);
  // A tile outside the table is an error, not a read out of bounds.
  std::vector<float> s(4 * 4);
  EXPECT_NE(error([&] {
              square->Apply(0, 0, 3, 4, 0, 4, s.data(), 4, nullptr);
            }).find("need table entries [4, 10] but the table has 9"),
            std::string::npos);
}

TEST(ScoreModTest, ScoreExpressionsWithTensors) {
  std::mt19937 rng(503);
  const int64_t heads = 3, q_len = 128, kv_len = 128;
  ValueTensor bias{{heads, q_len + kv_len - 1}, {}};
  for (int64_t i = 0; i < bias.numel(); ++i)
    bias.values.push_back(std::normal_distribution<float>()(rng));
  const ScoreModPtr mod =
      ScoreExpr("score * 0.5 + tanh(score) + bias[h, q_idx - kv_idx + 127]", {{"bias", bias}});
  const Reference f = [&](double s, int64_t h, int64_t q, int64_t kv) {
    return s * 0.5 + std::tanh(s) + bias.values[h * (q_len + kv_len - 1) + q - kv + 127];
  };
  for (int trial = 0; trial < 30; ++trial) {
    Tile t = RandomTile(rng, heads, q_len, kv_len);
    for (float& x : t.raw) x /= 20;  // where tanh is not flat
    ExpectMatches(mod, f, t, mod->ToString());
  }
  EXPECT_EQ(mod->Tensors().at("bias").shape, bias.shape);
  EXPECT_THROW(ScoreExpr("score > 0"), Error);
}

}  // namespace
}  // namespace weft::kernels
