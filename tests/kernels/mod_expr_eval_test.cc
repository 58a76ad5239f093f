// Tile evaluation of expressions: random expression trees against a scalar
// reference (every broadcast combination of row/column/tile values),
// guards of &&, || and ?:, range and division errors, and d/d(score)
// against finite differences of a float64 reference.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>

#include "error_of.h"
#include "weft/base/error.h"
#include "weft/kernels/mod_expr.h"

namespace weft::kernels {
namespace {

struct Point {
  int64_t b, h, q, kv;
};

template <typename T>
struct Gen {
  std::string text;
  std::function<T(const Point&)> eval;
};

// Two's complement arithmetic, as the language defines it (no UB here either).
int64_t Add(int64_t a, int64_t b) { return static_cast<int64_t>(uint64_t(a) + uint64_t(b)); }
int64_t Sub(int64_t a, int64_t b) { return static_cast<int64_t>(uint64_t(a) - uint64_t(b)); }
int64_t Mul(int64_t a, int64_t b) { return static_cast<int64_t>(uint64_t(a) * uint64_t(b)); }
int64_t Abs(int64_t a) { return a < 0 ? Sub(0, a) : a; }
int64_t FloorDiv(int64_t a, int64_t b) {
  if (b == -1) return Sub(0, a);
  const int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

// Random integer and boolean expressions, fully parenthesized, with their
// meaning as C++ closures. Tensor "t" has shape [2, n] and "u" shape [n];
// without tensors, no tensor is indexed.
class ExprGenerator {
 public:
  ExprGenerator(std::mt19937& rng, const IndexTensor* t, const IndexTensor* u)
      : rng_(rng), t_(t), u_(u) {}

  Gen<int64_t> Int(int depth) {
    int choice = Pick(depth <= 0 ? 3 : 11);
    if (choice == 2 && t_ == nullptr) choice = 1;
    switch (choice) {
      case 0: {
        const int64_t k = Uniform(-5, 9);
        return {k < 0 ? fmt::format("({})", k) : std::to_string(k),
                [k](const Point&) { return k; }};
      }
      case 1: {
        static const char* const kNames[] = {"b", "h", "q_idx", "kv_idx"};
        const int which = Pick(4);
        return {kNames[which], [which](const Point& p) {
                  return which == 0 ? p.b : which == 1 ? p.h : which == 2 ? p.q : p.kv;
                }};
      }
      case 2: {
        const bool q = Pick(2) == 0;
        const int64_t n = t_->shape[1];
        const IndexTensor* t = t_;
        if (Pick(2) == 0) {
          const IndexTensor* u = u_;
          return {q ? "u[q_idx]" : "u[kv_idx]",
                  [u, q](const Point& p) { return u->values[q ? p.q : p.kv]; }};
        }
        return {q ? "t[b % 2, q_idx]" : "t[h % 2, kv_idx]", [t, q, n](const Point& p) {
                  return q ? t->values[(p.b % 2) * n + p.q] : t->values[(p.h % 2) * n + p.kv];
                }};
      }
      case 3:
      case 4:
      case 5: {
        static const char* const kOps[] = {"+", "-", "*"};
        const int op = choice - 3;
        Gen<int64_t> a = Int(depth - 1), b = Int(depth - 1);
        return {fmt::format("({} {} {})", a.text, kOps[op], b.text), [a, b, op](const Point& p) {
                  const int64_t x = a.eval(p), y = b.eval(p);
                  return op == 0 ? Add(x, y) : op == 1 ? Sub(x, y) : Mul(x, y);
                }};
      }
      case 6: {  // divisor never zero: a nonzero literal or abs(...) + 1
        const bool mod = Pick(2) == 0;
        Gen<int64_t> a = Int(depth - 1);
        Gen<int64_t> d;
        if (Pick(2) == 0) {
          int64_t k = Uniform(-7, 7);
          if (k == 0) k = 3;
          d = {fmt::format("({})", k), [k](const Point&) { return k; }};
        } else {
          Gen<int64_t> inner = Int(depth - 1);
          d = {fmt::format("(abs({}) + 1)", inner.text),
               [inner](const Point& p) { return Add(Abs(inner.eval(p)), 1); }};
        }
        return {fmt::format("({} {} {})", a.text, mod ? "%" : "/", d.text),
                [a, d, mod](const Point& p) {
                  const int64_t x = a.eval(p), y = d.eval(p), q = FloorDiv(x, y);
                  return mod ? Sub(x, Mul(q, y)) : q;
                }};
      }
      case 7: {
        const bool is_min = Pick(2) == 0;
        Gen<int64_t> a = Int(depth - 1), b = Int(depth - 1), c = Int(depth - 1);
        return {fmt::format("{}({}, {}, {})", is_min ? "min" : "max", a.text, b.text, c.text),
                [a, b, c, is_min](const Point& p) {
                  const int64_t x = a.eval(p), y = b.eval(p), z = c.eval(p);
                  return is_min ? std::min({x, y, z}) : std::max({x, y, z});
                }};
      }
      case 8: {
        Gen<int64_t> a = Int(depth - 1);
        return {fmt::format("abs({})", a.text), [a](const Point& p) { return Abs(a.eval(p)); }};
      }
      case 9: {
        Gen<int64_t> a = Int(depth - 1);
        return {fmt::format("(-{})", a.text), [a](const Point& p) { return Sub(0, a.eval(p)); }};
      }
      default: {
        Gen<bool> c = Bool(depth - 1);
        Gen<int64_t> a = Int(depth - 1), b = Int(depth - 1);
        return {fmt::format("({} ? {} : {})", c.text, a.text, b.text),
                [c, a, b](const Point& p) { return c.eval(p) ? a.eval(p) : b.eval(p); }};
      }
    }
  }

  Gen<bool> Bool(int depth) {
    const int choice = Pick(depth <= 0 ? 1 : 6);
    switch (choice) {
      case 0:
      case 1: {
        static const char* const kOps[] = {"==", "!=", "<", "<=", ">", ">="};
        const int op = Pick(6);
        Gen<int64_t> a = Int(depth - 1), b = Int(depth - 1);
        return {fmt::format("({} {} {})", a.text, kOps[op], b.text), [a, b, op](const Point& p) {
                  const int64_t x = a.eval(p), y = b.eval(p);
                  switch (op) {
                    case 0:
                      return x == y;
                    case 1:
                      return x != y;
                    case 2:
                      return x < y;
                    case 3:
                      return x <= y;
                    case 4:
                      return x > y;
                    default:
                      return x >= y;
                  }
                }};
      }
      case 2: {
        const bool is_and = Pick(2) == 0;
        Gen<bool> a = Bool(depth - 1), b = Bool(depth - 1);
        return {fmt::format("({} {} {})", a.text, is_and ? "&&" : "||", b.text),
                [a, b, is_and](const Point& p) {
                  return is_and ? (a.eval(p) && b.eval(p)) : (a.eval(p) || b.eval(p));
                }};
      }
      case 3: {
        Gen<bool> a = Bool(depth - 1);
        return {fmt::format("(!{})", a.text), [a](const Point& p) { return !a.eval(p); }};
      }
      case 4: {
        Gen<bool> a = Bool(depth - 1), b = Bool(depth - 1);
        return {fmt::format("({} == {})", a.text, b.text),
                [a, b](const Point& p) { return a.eval(p) == b.eval(p); }};
      }
      default: {
        Gen<bool> c = Bool(depth - 1), a = Bool(depth - 1), b = Bool(depth - 1);
        return {fmt::format("({} ? {} : {})", c.text, a.text, b.text),
                [c, a, b](const Point& p) { return c.eval(p) ? a.eval(p) : b.eval(p); }};
      }
    }
  }

 private:
  int Pick(int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng_); }
  int64_t Uniform(int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng_);
  }
  std::mt19937& rng_;
  const IndexTensor* t_;
  const IndexTensor* u_;
};

IndexTensor RandomTensor(std::mt19937& rng, std::vector<int64_t> shape) {
  IndexTensor t{std::move(shape), {}};
  for (int64_t i = 0; i < t.numel(); ++i) {
    t.values.push_back(std::uniform_int_distribution<int64_t>(-4, 4)(rng));
  }
  return t;
}

using testing::ErrorOf;

TEST(ModExprEvalTest, RandomMaskExpressionsMatchAScalarReference) {
  std::mt19937 rng(21);
  const int64_t n = 160;
  const IndexTensor t = RandomTensor(rng, {2, n}), u = RandomTensor(rng, {n});
  ExprGenerator gen(rng, &t, &u);
  const int64_t sizes[] = {1, 2, 7, 16, 33, 64};
  for (int trial = 0; trial < 300; ++trial) {
    const Gen<bool> g = gen.Bool(1 + trial % 4);
    const ModExpr e = ModExpr::ParseMask(g.text, {{"t", t}, {"u", u}});
    const int64_t nq = sizes[rng() % 6], nk = sizes[rng() % 6], ld = nk + rng() % 3;
    const int64_t q0 = rng() % (n - nq), k0 = rng() % (n - nk), b = rng() % 3, h = rng() % 5;
    std::vector<uint8_t> keep(nq * ld, 7);
    e.EvaluateMask(b, h, q0, nq, k0, nk, keep.data(), ld);
    int64_t mismatches = 0;
    for (int64_t i = 0; i < nq; ++i) {
      for (int64_t j = 0; j < ld; ++j) {
        const uint8_t expected = j < nk ? g.eval({b, h, q0 + i, k0 + j}) : 7;  // padding untouched
        mismatches += keep[i * ld + j] != expected;
      }
    }
    ASSERT_EQ(mismatches, 0) << g.text << " at b=" << b << " h=" << h << " q0=" << q0
                             << " k0=" << k0 << " nq=" << nq << " nk=" << nk;
  }
}

TEST(ModExprEvalTest, RandomIntegerScoreExpressionsMatchAScalarReference) {
  // Integer results of a score expression become floats (score mods take
  // float tensors, which cannot be indices: no tensors here).
  std::mt19937 rng(22);
  ExprGenerator gen(rng, nullptr, nullptr);
  for (int trial = 0; trial < 200; ++trial) {
    const Gen<int64_t> g = gen.Int(1 + trial % 4);
    const std::string text = g.text;
    const ModExpr e = ModExpr::ParseScore(text + " + score");
    const int64_t nq = 1 + rng() % 40, nk = 1 + rng() % 40, q0 = rng() % 50, k0 = rng() % 50;
    std::vector<float> s(nq * nk), grad(nq * nk);
    for (float& x : s) x = std::uniform_real_distribution<float>(-1, 1)(rng);
    const std::vector<float> raw = s;
    e.ApplyScore(1, 2, q0, nq, k0, nk, s.data(), nk, grad.data());
    for (int64_t i = 0; i < nq; ++i) {
      for (int64_t j = 0; j < nk; ++j) {
        const float expected = static_cast<float>(g.eval({1, 2, q0 + i, k0 + j})) + raw[i * nk + j];
        ASSERT_EQ(s[i * nk + j], expected) << text;
        ASSERT_EQ(grad[i * nk + j], 1.0f) << text;
      }
    }
  }
}

TEST(ModExprEvalTest, TensorsOfEveryRankAndBroadcastShape) {
  std::mt19937 rng(23);
  ValueTensor t3{{3, 4, 50}, {}};
  for (int64_t i = 0; i < t3.numel(); ++i)
    t3.values.push_back(std::normal_distribution<float>()(rng));
  ValueTensor t1{{60}, {}};
  for (int64_t i = 0; i < 60; ++i) t1.values.push_back(std::normal_distribution<float>()(rng));
  const ModExpr e = ModExpr::ParseScore(
      "score * t3[b, h, q_idx] + t3[b, h % 4, kv_idx + 1] - t1[q_idx + kv_idx] + t1[7]",
      {{"t3", t3}, {"t1", t1}});
  for (int trial = 0; trial < 20; ++trial) {
    const int64_t b = rng() % 3, h = rng() % 4, nq = 1 + rng() % 25, nk = 1 + rng() % 24;
    const int64_t q0 = rng() % (50 - nq + 1), k0 = rng() % (49 - nk + 1);
    if (q0 + nq + k0 + nk - 2 >= 60) continue;
    std::vector<float> s(nq * nk), grad(nq * nk);
    for (float& x : s) x = std::normal_distribution<float>()(rng);
    const std::vector<float> raw = s;
    e.ApplyScore(b, h, q0, nq, k0, nk, s.data(), nk, grad.data());
    for (int64_t i = 0; i < nq; ++i) {
      for (int64_t j = 0; j < nk; ++j) {
        const int64_t q = q0 + i, kv = k0 + j;
        const double slope = t3.values[(b * 4 + h) * 50 + q];
        const double expected = raw[i * nk + j] * slope + t3.values[(b * 4 + h) * 50 + kv + 1] -
                                t1.values[q + kv] + t1.values[7];
        EXPECT_NEAR(s[i * nk + j], expected, 1e-5 * (1 + std::abs(expected)));
        EXPECT_EQ(grad[i * nk + j], static_cast<float>(slope));
      }
    }
  }
}

TEST(ModExprEvalTest, GuardsKeepUnusedIndicesAndDivisorsUnchecked) {
  // A tensor of 8 elements on a 12 x 12 tile: every text indexes out of range
  // or divides by zero somewhere, but only where its guard rules it out.
  const IndexTensor t{{8}, {5, 1, 4, 1, 5, 9, 2, 6}};
  auto at = [&](int64_t i) { return t.values[i]; };
  const std::vector<std::pair<const char*, std::function<bool(int64_t, int64_t)>>> cases = {
      {"q_idx < 8 && t[q_idx] > 3", [&](int64_t q, int64_t) { return q < 8 && at(q) > 3; }},
      {"q_idx >= 8 || t[q_idx] > 3", [&](int64_t q, int64_t) { return q >= 8 || at(q) > 3; }},
      {"q_idx < 8 ? t[q_idx] > 3 : false", [&](int64_t q, int64_t) { return q < 8 && at(q) > 3; }},
      {"q_idx >= 8 ? false : t[q_idx] > 3", [&](int64_t q, int64_t) { return q < 8 && at(q) > 3; }},
      {"kv_idx < 8 && q_idx < 8 && t[q_idx] > t[kv_idx]",  // a guard from two levels up
       [&](int64_t q, int64_t kv) { return kv < 8 && q < 8 && at(q) > at(kv); }},
      {"(kv_idx != 0 && q_idx / kv_idx >= 1) || kv_idx == 0",
       [&](int64_t q, int64_t kv) { return kv == 0 || q / kv >= 1; }},
      {"(q_idx < 8 ? t[q_idx] : t[0]) > 3 && (kv_idx >= 8 || t[kv_idx] != 1)",
       [&](int64_t q, int64_t kv) {
         return (q < 8 ? at(q) : at(0)) > 3 && (kv >= 8 || at(kv) != 1);
       }},
      {"q_idx + kv_idx < 8 && kv_idx != 5 ? t[q_idx + kv_idx] % (kv_idx - 5) == 0 : kv_idx == 5",
       [&](int64_t q, int64_t kv) {
         if (q + kv >= 8 || kv == 5) return kv == 5;
         const int64_t d = kv - 5, x = at(q + kv);
         return ((x % d) + d) % d == 0;
       }},
  };
  for (const auto& [text, expected] : cases) {
    const ModExpr e = ModExpr::ParseMask(text, {{"t", t}});
    std::vector<uint8_t> keep(12 * 12);
    const std::string error = ErrorOf([&] { e.EvaluateMask(0, 0, 0, 12, 0, 12, keep.data(), 12); });
    ASSERT_EQ(error, "") << text;
    for (int64_t q = 0; q < 12; ++q) {
      for (int64_t kv = 0; kv < 12; ++kv) {
        EXPECT_EQ(keep[q * 12 + kv], expected(q, kv)) << text << " q=" << q << " kv=" << kv;
      }
    }
  }
}

TEST(ModExprEvalTest, OutOfRangeIndicesAndDivisionByZeroAreReported) {
  const IndexTensor seg{{2, 10}, std::vector<int64_t>(20, 1)};
  const ModExpr e = ModExpr::ParseMask("seg[b, q_idx] == seg[b, kv_idx]", {{"seg", seg}});
  std::vector<uint8_t> keep(16 * 16);
  EXPECT_EQ(ErrorOf([&] { e.EvaluateMask(1, 0, 0, 10, 0, 10, keep.data(), 10); }), "");
  const std::string q_error = ErrorOf([&] { e.EvaluateMask(1, 0, 4, 8, 0, 4, keep.data(), 4); });
  EXPECT_NE(
      q_error.find("mask_expr: index [1, 10] is out of range for tensor 'seg' of shape [2, 10]"),
      std::string::npos)
      << q_error;
  EXPECT_NE(q_error.find("at column 1 in 'seg[b, q_idx] == seg[b, kv_idx]'"), std::string::npos);
  EXPECT_NE(q_error.find("b=1, h=0, q_idx=10"), std::string::npos) << q_error;
  const std::string b_error = ErrorOf([&] { e.EvaluateMask(2, 0, 0, 4, 0, 4, keep.data(), 4); });
  EXPECT_NE(b_error.find("index [2, 0] is out of range"), std::string::npos) << b_error;
  const std::string kv_error = ErrorOf([&] { e.EvaluateMask(0, 0, 0, 2, 9, 3, keep.data(), 3); });
  EXPECT_NE(kv_error.find("at column 18"), std::string::npos) << kv_error;
  EXPECT_NE(kv_error.find("kv_idx=10"), std::string::npos) << kv_error;
  const std::string neg = ErrorOf([&] {
    ModExpr::ParseMask("seg[0, q_idx - 3] > 0", {{"seg", seg}})
        .EvaluateMask(0, 0, 0, 4, 0, 4, keep.data(), 4);
  });
  EXPECT_NE(neg.find("index [0, -3]"), std::string::npos) << neg;

  const std::string div = ErrorOf([&] {
    ModExpr::ParseMask("q_idx / (kv_idx - 3) > 0").EvaluateMask(0, 0, 0, 4, 0, 8, keep.data(), 8);
  });
  EXPECT_NE(div.find("integer division by zero"), std::string::npos) << div;
  EXPECT_NE(div.find("kv_idx=3"), std::string::npos) << div;
  EXPECT_NE(
      ErrorOf([&] {
        ModExpr::ParseMask("q_idx % (h - 2) > 0").EvaluateMask(0, 2, 0, 4, 0, 8, keep.data(), 8);
      }).find("division by zero"),
      std::string::npos);
}

// Score expressions and their float64 meaning.
struct ScoreCase {
  const char* text;
  std::function<double(double s, int64_t q, int64_t kv, int64_t h)> f;
  std::function<bool(double s)> smooth_at;  // false near kinks, where finite differences lie
};

TEST(ModExprEvalTest, ScoreDerivativesMatchFiniteDifferences) {
  std::mt19937 rng(24);
  ValueTensor bias{{3, 100}, {}};
  for (int i = 0; i < 300; ++i) bias.values.push_back(std::normal_distribution<float>()(rng));
  auto bias_at = [&](int64_t h, int64_t q, int64_t kv) {
    return bias.values[h * 100 + q - kv + 50];
  };
  auto everywhere = [](double) { return true; };
  const std::vector<ScoreCase> cases = {
      {"score * 0.5 + tanh(score)",
       [](double s, auto, auto, auto) { return s * 0.5 + std::tanh(s); }, everywhere},
      {"30.0 * tanh(score / 30)", [](double s, auto, auto, auto) { return 30 * std::tanh(s / 30); },
       everywhere},
      {"score > 0 ? score : 0.1 * score",
       [](double s, auto, auto, auto) { return s > 0 ? s : 0.1 * s; },
       [](double s) { return std::abs(s) > 1e-3; }},
      {"sqrt(score * score + 1.0) - log(1.0 + exp(score))",
       [](double s, auto, auto, auto) { return std::sqrt(s * s + 1) - std::log(1 + std::exp(s)); },
       everywhere},
      {"sigmoid(score) * score / (1.0 + abs(score))",
       [](double s, auto, auto, auto) { return s / (1 + std::exp(-s)) / (1 + std::abs(s)); },
       [](double s) { return std::abs(s) > 1e-3; }},
      {"min(score, 1.0) + max(score * 2.0, -1)",
       [](double s, auto, auto, auto) { return std::min(s, 1.0) + std::max(2 * s, -1.0); },
       [](double s) { return std::abs(s - 1) > 1e-3 && std::abs(s + 0.5) > 1e-3; }},
      {"score * bias[h, q_idx - kv_idx + 50] + exp(-score * score)",
       [&](double s, int64_t q, int64_t kv, int64_t h) {
         return s * bias_at(h, q, kv) + std::exp(-s * s);
       },
       everywhere},
      {"score % 1.5 + score / (q_idx + 1)",
       [](double s, int64_t q, auto, auto) { return s - std::floor(s / 1.5) * 1.5 + s / (q + 1); },
       [](double s) { return std::abs(s / 1.5 - std::round(s / 1.5)) > 1e-3; }},
      {"(score - 1.0) / (score * score + 2.0)",
       [](double s, auto, auto, auto) { return (s - 1) / (s * s + 2); }, everywhere},
      {"-score + (kv_idx <= q_idx ? score * score : 3.0)",
       [](double s, int64_t q, int64_t kv, auto) { return -s + (kv <= q ? s * s : 3.0); },
       everywhere},
      {"score * score % (score + 4.0)",
       [](double s, auto, auto, auto) {
         const double b = s + 4;
         return s * s - std::floor(s * s / b) * b;
       },
       [](double s) {
         const double r = s * s / (s + 4);
         return std::abs(r - std::round(r)) > 1e-3;
       }},
      {"h + 0.0", [](double, auto, auto, int64_t h) { return static_cast<double>(h); }, everywhere},
  };
  for (const ScoreCase& c : cases) {
    const ModExpr e = ModExpr::ParseScore(c.text, {{"bias", bias}});
    const int64_t nq = 1 + rng() % 30, nk = 1 + rng() % 30, ld = nk + 2;
    const int64_t q0 = rng() % 16, k0 = rng() % 16, h = rng() % 3;
    std::vector<float> s(nq * ld), grad(nq * ld, -9.0f);
    for (float& x : s) x = std::uniform_real_distribution<float>(-3, 3)(rng);
    const std::vector<float> raw = s;
    std::vector<float> s_no_grad = s;
    e.ApplyScore(0, h, q0, nq, k0, nk, s.data(), ld, grad.data());
    e.ApplyScore(0, h, q0, nq, k0, nk, s_no_grad.data(), ld, nullptr);
    for (int64_t i = 0; i < nq; ++i) {
      for (int64_t j = 0; j < ld; ++j) {
        const int64_t k = i * ld + j;
        if (j >= nk) {  // padding untouched
          EXPECT_EQ(s[k], raw[k]);
          EXPECT_EQ(grad[k], -9.0f);
          continue;
        }
        const double x = raw[k];
        const int64_t q = q0 + i, kv = k0 + j;
        EXPECT_EQ(s[k], s_no_grad[k]) << c.text;
        if (!c.smooth_at(x)) continue;  // float and float64 may take different sides
        const double value = c.f(x, q, kv, h);
        EXPECT_NEAR(s[k], value, 2e-6 * (1 + std::abs(value))) << c.text << " at " << x;
        const double eps = 1e-6;
        const double fd = (c.f(x + eps, q, kv, h) - c.f(x - eps, q, kv, h)) / (2 * eps);
        EXPECT_NEAR(grad[k], fd, 1e-4 * (1 + std::abs(fd))) << c.text << " at " << x;
      }
    }
  }
}

TEST(ModExprEvalTest, LargeTilesAndConstantResults) {
  // Tiles bigger than the first arena chunk, and results that are constant
  // over the tile (broadcast back out).
  std::mt19937 rng(25);
  const ModExpr mask = ModExpr::ParseMask(
      "((q_idx * 3 + kv_idx) % 7 < 3 || kv_idx > q_idx + 100) && max(q_idx, kv_idx) % 5 != 1 && "
      "(min(q_idx, kv_idx) / 3 + abs(q_idx - kv_idx)) % 4 != 2");
  const int64_t nq = 300, nk = 257;
  std::vector<uint8_t> keep(nq * nk);
  mask.EvaluateMask(0, 0, 11, nq, 5, nk, keep.data(), nk);
  for (int64_t i = 0; i < nq; ++i) {
    for (int64_t j = 0; j < nk; ++j) {
      const int64_t q = 11 + i, kv = 5 + j;
      const bool expected = ((q * 3 + kv) % 7 < 3 || kv > q + 100) && std::max(q, kv) % 5 != 1 &&
                            (std::min(q, kv) / 3 + std::abs(q - kv)) % 4 != 2;
      ASSERT_EQ(keep[i * nk + j], expected) << q << " " << kv;
    }
  }
  for (const char* text : {"true", "b == 1", "h > 2 || false"}) {
    std::vector<uint8_t> tile(5 * 6, 9);
    ModExpr::ParseMask(text).EvaluateMask(1, 1, 0, 5, 0, 6, tile.data(), 6);
    const bool expected = std::string(text) == "true" || std::string(text) == "b == 1";
    for (uint8_t x : tile) EXPECT_EQ(x, expected) << text;
  }
  std::vector<float> s(4 * 3, 2.0f), grad(4 * 3, 5.0f);
  ModExpr::ParseScore("q_idx * 2").ApplyScore(0, 0, 10, 4, 0, 3, s.data(), 3, grad.data());
  for (int64_t i = 0; i < 4; ++i) {
    for (int64_t j = 0; j < 3; ++j) {
      EXPECT_EQ(s[i * 3 + j], 2.0f * (10 + i));
      EXPECT_EQ(grad[i * 3 + j], 0.0f);  // does not depend on score
    }
  }
}

}  // namespace
}  // namespace weft::kernels
