#include "reduce.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

namespace weft::runtime {
namespace {

template <typename T>
std::vector<const std::byte*> Pointers(const std::vector<std::vector<T>>& inputs) {
  std::vector<const std::byte*> p;
  for (const auto& v : inputs) p.push_back(reinterpret_cast<const std::byte*>(v.data()));
  return p;
}

template <typename T>
std::vector<T> Reduce(PrimitiveType dtype, ReduceOp op, const std::vector<std::vector<T>>& inputs) {
  std::vector<T> out(inputs[0].size());
  auto p = Pointers(inputs);
  ReduceBuffers(dtype, op, p.data(), static_cast<int64_t>(p.size()),
                reinterpret_cast<std::byte*>(out.data()), static_cast<int64_t>(out.size()));
  return out;
}

TEST(Reduce, FloatSumsGoLeftToRightAcrossBlocks) {
  // (1e8 + 1) - 1e8 is 0 in float32; any other order gives 1.
  std::vector<std::vector<float>> inputs(3, std::vector<float>(2500));
  for (int i = 0; i < 2500; ++i) {
    inputs[0][i] = 1e8f;
    inputs[1][i] = 1.0f;
    inputs[2][i] = -1e8f;
  }
  for (float v : Reduce(PrimitiveType::kF32, ReduceOp::kSum, inputs)) ASSERT_EQ(v, 0.0f);
  std::swap(inputs[1], inputs[2]);
  for (float v : Reduce(PrimitiveType::kF32, ReduceOp::kSum, inputs)) ASSERT_EQ(v, 1.0f);
}

TEST(Reduce, RandomFloatSumMatchesFloat64) {
  std::mt19937 rng(3);
  std::normal_distribution<float> dist;
  std::vector<std::vector<float>> inputs(5, std::vector<float>(3000));
  for (auto& v : inputs)
    for (auto& x : v) x = dist(rng);
  const auto out = Reduce(PrimitiveType::kF32, ReduceOp::kSum, inputs);
  for (size_t i = 0; i < out.size(); ++i) {
    double ref = 0, mag = 0;
    for (const auto& v : inputs) ref += v[i], mag += std::fabs(v[i]);
    ASSERT_NEAR(out[i], ref, 1e-6 * mag + 1e-7) << i;
  }
}

TEST(Reduce, FloatSumsOfAnyCountAndAlignmentAreLeftToRightBitwise) {
  // One to four inputs at odd byte offsets (buffers of any alignment), a
  // count that leaves a short last block, the output separate, over input 0
  // or over the last input: each element is ((x0 + x1) + x2) + x3 in
  // float32, bit for bit.
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> dist(-3.0f, 3.0f);
  constexpr int64_t kCount = 2 * 1024 + 37;
  for (int64_t n = 1; n <= 4; ++n) {
    for (int64_t over : {int64_t{-1}, int64_t{0}, n - 1}) {
      std::vector<std::vector<std::byte>> storage(n, std::vector<std::byte>(kCount * 4 + 3));
      std::vector<const std::byte*> p;
      std::vector<float> want(kCount, 0.0f);
      for (int64_t m = 0; m < n; ++m) {
        std::byte* base = storage[m].data() + 1 + m % 3;
        for (int64_t i = 0; i < kCount; ++i) {
          const float x = dist(rng);
          std::memcpy(base + i * 4, &x, 4);
          want[i] = m == 0 ? x : want[i] + x;
        }
        p.push_back(base);
      }
      std::vector<std::byte> separate(kCount * 4 + 1);
      std::byte* out = over >= 0 ? const_cast<std::byte*>(p[over]) : separate.data() + 1;
      ReduceBuffers(PrimitiveType::kF32, ReduceOp::kSum, p.data(), n, out, kCount);
      for (int64_t i = 0; i < kCount; ++i) {
        float got;
        std::memcpy(&got, out + i * 4, 4);
        ASSERT_EQ(got, want[i]) << "n " << n << " over input " << over << " element " << i;
      }
    }
  }
}

TEST(Reduce, MaxAndMinPropagateNaN) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<std::vector<float>> inputs = {{1, nan, 3, -2}, {2, 5, nan, -7}};
  auto mx = Reduce(PrimitiveType::kF32, ReduceOp::kMax, inputs);
  auto mn = Reduce(PrimitiveType::kF32, ReduceOp::kMin, inputs);
  EXPECT_EQ(mx[0], 2);
  EXPECT_TRUE(std::isnan(mx[1]));
  EXPECT_TRUE(std::isnan(mx[2]));
  EXPECT_EQ(mx[3], -2);
  EXPECT_EQ(mn[0], 1);
  EXPECT_TRUE(std::isnan(mn[1]));
  EXPECT_TRUE(std::isnan(mn[2]));
  EXPECT_EQ(mn[3], -7);
}

TEST(Reduce, IntegersWrapAndCompareSigned) {
  std::vector<std::vector<int32_t>> i32 = {{INT32_MAX, -5}, {1, 3}};
  EXPECT_EQ(Reduce(PrimitiveType::kS32, ReduceOp::kSum, i32),
            (std::vector<int32_t>{INT32_MIN, -2}));
  EXPECT_EQ(Reduce(PrimitiveType::kS32, ReduceOp::kMax, i32), (std::vector<int32_t>{INT32_MAX, 3}));
  std::vector<std::vector<int64_t>> i64 = {{-1, 5}, {-3, 6}};
  EXPECT_EQ(Reduce(PrimitiveType::kS64, ReduceOp::kMin, i64), (std::vector<int64_t>{-3, 5}));
  EXPECT_EQ(Reduce(PrimitiveType::kS64, ReduceOp::kSum, i64), (std::vector<int64_t>{-4, 11}));
  std::vector<std::vector<uint8_t>> u8 = {{250, 1}, {10, 2}};
  EXPECT_EQ(Reduce(PrimitiveType::kPred, ReduceOp::kSum, u8), (std::vector<uint8_t>{4, 3}));
}

TEST(Reduce, Bfloat16AccumulatesInFloatAndRoundsOnce) {
  EXPECT_EQ(FloatToBf16(1.0f), 0x3f80);
  EXPECT_EQ(Bf16ToFloat(0x3f80), 1.0f);
  // 1 + 2^-8 is halfway between bf16 neighbours 1 and 1 + 2^-7: ties to even.
  EXPECT_EQ(FloatToBf16(1.0f + 1.0f / 256), 0x3f80);
  EXPECT_EQ(FloatToBf16(1.0f + 3.0f / 256), 0x3f82);
  EXPECT_TRUE(std::isnan(Bf16ToFloat(FloatToBf16(std::numeric_limits<float>::quiet_NaN()))));
  // Eight adds of 2^-8 to 1: per-step bf16 rounding would stay at 1;
  // accumulating in float32 gives 1 + 2^-5 exactly.
  std::vector<std::vector<uint16_t>> inputs(9, std::vector<uint16_t>{FloatToBf16(1.0f / 256)});
  inputs[0][0] = FloatToBf16(1.0f);
  EXPECT_EQ(Bf16ToFloat(Reduce(PrimitiveType::kBF16, ReduceOp::kSum, inputs)[0]), 1.0f + 1.0f / 32);
}

// bf16 sums of random values over several blocks and a ragged end, with
// infinities and NaNs among them: each element is the float32 sum, in member
// order, rounded once to nearest even (checked bit for bit against a float64
// reference that rounds the same way); NaN stays NaN, inf + -inf is NaN.
TEST(Reduce, RandomBfloat16SumsRoundOnceAndKeepSpecialValues) {
  std::mt19937 rng(11);
  std::normal_distribution<float> dist(0.0f, 4.0f);
  constexpr int64_t kCount = 2 * 1024 + 77;
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<std::vector<uint16_t>> inputs(3, std::vector<uint16_t>(kCount));
  for (auto& v : inputs) {
    for (auto& x : v) x = FloatToBf16(dist(rng));
  }
  inputs[0][5] = FloatToBf16(inf);
  inputs[1][6] = FloatToBf16(nan);
  inputs[0][7] = FloatToBf16(inf), inputs[2][7] = FloatToBf16(-inf);
  inputs[2][kCount - 1] = FloatToBf16(-inf);
  const auto out = Reduce(PrimitiveType::kBF16, ReduceOp::kSum, inputs);
  for (int64_t i = 0; i < kCount; ++i) {
    float sum = 0.0f;
    for (const auto& v : inputs) sum += Bf16ToFloat(v[i]);
    if (std::isnan(sum)) {
      ASSERT_TRUE(std::isnan(Bf16ToFloat(out[i]))) << i;
      continue;
    }
    // Round to nearest even through float64: the bf16 neighbours below and
    // above the sum, and the nearer one (the even one on a tie).
    const double exact = sum;
    uint32_t bits;
    std::memcpy(&bits, &sum, sizeof(bits));
    const uint32_t low = bits & 0xffff0000u, high = low + 0x10000u;
    float lo, hi;
    std::memcpy(&lo, &low, sizeof(lo));
    std::memcpy(&hi, &high, sizeof(hi));
    const double dlo = std::fabs(exact - lo), dhi = std::fabs(hi - exact);
    const uint32_t want = std::isinf(sum) || dlo < dhi || (dlo == dhi && ((low >> 16) & 1u) == 0)
                              ? low >> 16
                              : high >> 16;
    ASSERT_EQ(out[i], want) << i << ": " << sum;
  }
  EXPECT_TRUE(std::isinf(Bf16ToFloat(out[5])));
  EXPECT_TRUE(std::isnan(Bf16ToFloat(out[6])));
  EXPECT_TRUE(std::isnan(Bf16ToFloat(out[7])));
}

TEST(Reduce, OutputMayBeOneOfTheInputs) {
  std::vector<std::vector<float>> inputs = {std::vector<float>(3000, 1.5f),
                                            std::vector<float>(3000, 2.0f)};
  auto p = Pointers(inputs);
  ReduceBuffers(PrimitiveType::kF32, ReduceOp::kSum, p.data(), 2,
                reinterpret_cast<std::byte*>(inputs[1].data()), 3000);
  for (float v : inputs[1]) ASSERT_EQ(v, 3.5f);
}

}  // namespace
}  // namespace weft::runtime
