#include "weft/train/optimizer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <numbers>
#include <random>

#include "weft/base/error.h"

namespace weft {
namespace {

std::vector<float> RandomVector(std::mt19937_64& rng, size_t n, double scale) {
  std::normal_distribution<double> normal(0.0, scale);
  std::vector<float> out(n);
  for (auto& x : out) x = static_cast<float>(normal(rng));
  return out;
}

// AdamW in float64, written from the paper's algorithm (Loshchilov & Hutter,
// with PyTorch's lr-scaled decay).
struct ReferenceAdamW {
  std::vector<double> param, m, v;
  void Step(const std::vector<float>& grad, const AdamWHyperParams& h, const AdamWStep& s) {
    for (size_t i = 0; i < param.size(); ++i) {
      double g = static_cast<double>(grad[i]) * s.grad_scale;
      m[i] = h.beta1 * m[i] + (1 - h.beta1) * g;
      v[i] = h.beta2 * v[i] + (1 - h.beta2) * g * g;
      double m_hat = m[i] / (1 - std::pow(h.beta1, s.step));
      double v_hat = v[i] / (1 - std::pow(h.beta2, s.step));
      if (s.apply_weight_decay) param[i] -= s.lr * h.weight_decay * param[i];
      param[i] -= s.lr * m_hat / (std::sqrt(v_hat) + h.eps);
    }
  }
};

double MaxRelativeError(const std::vector<float>& actual, const std::vector<double>& expected) {
  double worst = 0, scale = 0;
  for (size_t i = 0; i < actual.size(); ++i) {
    worst = std::max(worst, std::abs(actual[i] - expected[i]));
    scale = std::max(scale, std::abs(expected[i]));
  }
  EXPECT_GT(scale, 0) << "the reference is all zeros";
  return worst / scale;
}

TEST(AdamWUpdate, MatchesAFloat64ReferenceOverManySteps) {
  std::mt19937_64 rng(2024);
  const size_t n = 1537;  // odd: no alignment luck
  for (bool decay : {true, false}) {
    AdamWHyperParams hyper{.beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1};
    std::vector<float> param = RandomVector(rng, n, 0.5), m(n, 0.0f), v(n, 0.0f);
    ReferenceAdamW reference{
        {param.begin(), param.end()}, std::vector<double>(n, 0.0), std::vector<double>(n, 0.0)};
    LrSchedule schedule{.warmup_steps = 3, .total_steps = 12, .peak_lr = 1e-2, .min_lr = 1e-3};
    for (int64_t step = 0; step < 12; ++step) {
      std::vector<float> grad = RandomVector(rng, n, 0.01 + 0.1 * step);
      AdamWStep s{.lr = schedule.LearningRate(step),
                  .step = step + 1,
                  .grad_scale = step % 3 == 0 ? 0.37 : 1.0,
                  .apply_weight_decay = decay};
      AdamWUpdate(param, grad, m, v, hyper, s);
      reference.Step(grad, hyper, s);
      ASSERT_LT(MaxRelativeError(param, reference.param), 2e-6) << "step " << step;
      ASSERT_LT(MaxRelativeError(m, reference.m), 2e-6) << "step " << step;
      ASSERT_LT(MaxRelativeError(v, reference.v), 2e-6) << "step " << step;
    }
  }
}

TEST(AdamWUpdate, WeightDecayShrinksTowardsZero) {
  // With a zero gradient and zero moments, only the decay acts.
  std::mt19937_64 rng(5);
  std::vector<float> param = RandomVector(rng, 64, 1.0), before = param;
  std::vector<float> grad(64, 0.0f), m(64, 0.0f), v(64, 0.0f);
  AdamWUpdate(param, grad, m, v, {.weight_decay = 0.5}, {.lr = 0.1, .step = 1});
  for (size_t i = 0; i < param.size(); ++i) {
    EXPECT_NEAR(param[i], before[i] * (1 - 0.1 * 0.5), 1e-6);
  }
}

TEST(AdamWUpdate, StaysFiniteTellsAnOverflowingUpdateApartAndWritesNothing) {
  std::mt19937_64 rng(std::random_device{}());
  const size_t n = 50000;  // several of the pool's chunks
  std::vector<float> param = RandomVector(rng, n, 1.0), grad = RandomVector(rng, n, 1.0);
  std::vector<float> m = RandomVector(rng, n, 0.1), v(n);
  for (float& x : v) x = std::abs(RandomVector(rng, 1, 0.1)[0]);
  const AdamWHyperParams hyper;
  const AdamWStep step{.lr = 1e-3, .step = 3};
  const std::vector<float> p0 = param, m0 = m, v0 = v;
  EXPECT_TRUE(AdamWUpdateStaysFinite(param, grad, m, v, hyper, step));

  // A finite gradient whose square overflows float32 makes v infinite
  // ((1 - beta2) g g > 3.4e38).
  const size_t k = rng() % n;
  std::vector<float> huge = grad;
  huge[k] = 1e20f;
  EXPECT_FALSE(AdamWUpdateStaysFinite(param, huge, m, v, hyper, step)) << "element " << k;
  // A learning rate that throws a parameter to infinity.
  EXPECT_FALSE(AdamWUpdateStaysFinite(param, grad, m, v, hyper, {.lr = 1e38, .step = 3}));
  // An infinite moment already held.
  std::vector<float> bad_m = m;
  bad_m[k] = std::numeric_limits<float>::infinity();
  EXPECT_FALSE(AdamWUpdateStaysFinite(param, grad, bad_m, v, hyper, step));
  EXPECT_EQ(param, p0);
  EXPECT_EQ(m, m0);
  EXPECT_EQ(v, v0);

  // Where it says yes, the applied update is indeed finite everywhere.
  AdamWUpdate(param, grad, m, v, hyper, step);
  for (size_t i = 0; i < n; ++i) {
    ASSERT_TRUE(std::isfinite(param[i]) && std::isfinite(m[i]) && std::isfinite(v[i])) << i;
  }
}

TEST(AdamWUpdate, ShardsUpdateExactlyLikeTheWhole) {
  std::mt19937_64 rng(9);
  const size_t n = 40000;  // shards and the pool's chunks cut at different places
  std::vector<float> whole = RandomVector(rng, n, 1.0), sharded = whole;
  std::vector<float> m1(n, 0.0f), v1(n, 0.0f), m2(n, 0.0f), v2(n, 0.0f);
  AdamWHyperParams hyper;
  for (int64_t step = 1; step <= 4; ++step) {
    std::vector<float> grad = RandomVector(rng, n, 1.0);
    AdamWStep s{.lr = 1e-3, .step = step, .grad_scale = 0.8};
    AdamWUpdate(whole, grad, m1, v1, hyper, s);
    for (size_t begin : {size_t{0}, size_t{333}, size_t{20000}}) {
      size_t end = begin == 0 ? 333 : begin == 333 ? 20000 : n;
      auto part = [&](auto& x) { return std::span(x).subspan(begin, end - begin); };
      AdamWUpdate(part(sharded), part(grad), part(m2), part(v2), hyper, s);
    }
  }
  EXPECT_EQ(whole, sharded);
  EXPECT_EQ(m1, m2);
  EXPECT_EQ(v1, v2);
}

TEST(AdamWUpdate, RejectsMismatchedSpans) {
  // The trainer's own invariants: a bug if they break, not the user's input.
  std::vector<float> a(4, 1.0f), b(3, 1.0f);
  EXPECT_THROW(AdamWUpdate(a, b, a, a, {}, {.lr = 1e-3, .step = 1}), InternalError);
  EXPECT_THROW(AdamWUpdate(a, a, a, a, {}, {.lr = 1e-3, .step = 0}), InternalError);
}

TEST(SumOfSquares, MatchesFloat64AndAddsUpOverShards) {
  std::mt19937_64 rng(17);
  std::vector<float> x = RandomVector(rng, 100003, 3.0);
  long double reference = 0;
  for (float value : x) reference += static_cast<long double>(value) * value;
  double whole = SumOfSquares(x);
  EXPECT_NEAR(whole, static_cast<double>(reference), 1e-12 * static_cast<double>(reference));
  double parts = SumOfSquares(std::span(x).subspan(0, 5)) +
                 SumOfSquares(std::span(x).subspan(5, 50000)) +
                 SumOfSquares(std::span(x).subspan(50005));
  EXPECT_NEAR(parts, whole, 1e-12 * whole);
  EXPECT_EQ(SumOfSquares({}), 0.0);
}

TEST(ClipScale, ClipsToTheGlobalNorm) {
  std::mt19937_64 rng(23);
  std::vector<float> a = RandomVector(rng, 500, 1.0), b = RandomVector(rng, 300, 2.0);
  double sq = SumOfSquares(a) + SumOfSquares(b);  // as after an all-reduce
  double norm = std::sqrt(sq);
  double scale = ClipScale(sq, 1.0);
  EXPECT_NEAR(scale, 1.0 / (norm + 1e-6), 1e-15);
  double clipped = 0;
  for (float x : a) clipped += (x * scale) * (x * scale);
  for (float x : b) clipped += (x * scale) * (x * scale);
  EXPECT_NEAR(std::sqrt(clipped), 1.0, 1e-5);
  EXPECT_EQ(ClipScale(sq, 10 * norm), 1.0);  // below the limit: untouched
  EXPECT_EQ(ClipScale(sq, 0.0), 1.0);        // clipping disabled
  EXPECT_EQ(ClipScale(std::nan(""), 1.0), 0.0);
  EXPECT_EQ(ClipScale(INFINITY, 1.0), 0.0);
}

TEST(LrSchedule, WarmupThenCosine) {
  LrSchedule s{.warmup_steps = 10, .total_steps = 110, .peak_lr = 1e-3, .min_lr = 1e-4};
  for (int64_t step = 0; step < 130; ++step) {
    double expected;
    if (step < 10) {
      expected = 1e-3 * (step + 1) / 10.0;
    } else if (step >= 110) {
      expected = 1e-4;
    } else {
      double progress = (step - 10) / 100.0;
      expected = 1e-4 + 0.5 * 9e-4 * (1 + std::cos(std::numbers::pi * progress));
    }
    EXPECT_NEAR(s.LearningRate(step), expected, 1e-15) << step;
  }
  EXPECT_DOUBLE_EQ(s.LearningRate(9), 1e-3);       // warmup ends at the peak
  EXPECT_DOUBLE_EQ(s.LearningRate(10), 1e-3);      // and decay starts there
  EXPECT_NEAR(s.LearningRate(60), 5.5e-4, 1e-15);  // halfway: the mean
  for (int64_t step = 10; step < 120; ++step) {
    EXPECT_LE(s.LearningRate(step + 1), s.LearningRate(step)) << step;
  }
  LrSchedule no_warmup{.warmup_steps = 0, .total_steps = 5, .peak_lr = 2.0, .min_lr = 0.0};
  EXPECT_DOUBLE_EQ(no_warmup.LearningRate(0), 2.0);
  EXPECT_THROW(s.LearningRate(-1), Error);
}

TEST(WeightDecayApplies, SkipsMatchingParameters) {
  std::vector<std::string> skip = {"*norm*", "tok_embeddings"};
  EXPECT_FALSE(WeightDecayApplies("layers.2.attention_norm", skip));
  EXPECT_FALSE(WeightDecayApplies("norm", skip));
  EXPECT_FALSE(WeightDecayApplies("tok_embeddings", skip));
  EXPECT_TRUE(WeightDecayApplies("layers.2.attention.wq", skip));
  EXPECT_TRUE(WeightDecayApplies("output", skip));
  EXPECT_TRUE(WeightDecayApplies("norm", {}));
}

}  // namespace
}  // namespace weft
