// bfloat16 flex attention against the float64 reference (on the bf16-rounded
// inputs), on every instruction set this machine has: masks, score mods, GQA,
// the backward and both work splits. Plus the bf16 conversions.
#include <gtest/gtest.h>

#include <cmath>
#include <optional>
#include <string>

#include "attention_reference.h"
#include "simd/primitives.h"
#include "weft/base/bfloat16.h"
#include "weft/base/error.h"
#include "weft/kernels/attention.h"

namespace weft::kernels {
namespace {

using testing::RandomVector;
using testing::ReferenceAttention;
using testing::RefMods;
using testing::RelativeError;

std::vector<bf16> ToBf16(const std::vector<float>& x) {
  std::vector<bf16> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = bf16(x[i]);
  return y;
}

std::vector<float> ToF32(const std::vector<bf16>& x) {
  std::vector<float> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = static_cast<float>(x[i]);
  return y;
}

struct Bf16Case {
  AttentionDims d;
  MaskModPtr mask;
  RefMods ref;
  ScoreModPtr score;
  int64_t block = 64;
};

void CheckBf16(const Bf16Case& c, uint32_t seed) {
  SCOPED_TRACE("bf16 case with seed " + std::to_string(seed));
  const AttentionDims& d = c.d;
  std::mt19937 rng(seed);
  auto q = ToBf16(RandomVector(d.batch * d.q_heads * d.q_len * d.head_dim, rng));
  auto k = ToBf16(RandomVector(d.batch * d.kv_heads * d.kv_len * d.head_dim, rng));
  auto v = ToBf16(RandomVector(d.batch * d.kv_heads * d.kv_len * d.value_dim, rng));
  auto dout = ToBf16(RandomVector(d.batch * d.q_heads * d.q_len * d.value_dim, rng));
  auto dlse = RandomVector(d.batch * d.q_heads * d.q_len, rng);
  // The reference sees exactly the bf16 values the kernel sees.
  auto ref = ReferenceAttention(d, ToF32(q), ToF32(k), ToF32(v), 1.0 / std::sqrt(d.head_dim),
                                c.ref, ToF32(dout), dlse);

  std::optional<BlockMask> bm;
  AttentionOptions o;
  o.enable_gqa = d.q_heads != d.kv_heads;
  o.score_mod = c.score.get();
  if (c.mask) {
    bm.emplace(BlockMask::Create(c.mask, 1, 1, d.q_len, d.kv_len, c.block, c.block));
    o.block_mask = &*bm;
  }
  std::vector<bf16> out(d.batch * d.q_heads * d.q_len * d.value_dim);
  std::vector<float> lse(d.batch * d.q_heads * d.q_len);
  FlexAttentionForwardBf16(d, q.data(), k.data(), v.data(), o, out.data(), lse.data());
  EXPECT_LE(RelativeError(ToF32(out), ref.out), 1e-2);
  EXPECT_LE(RelativeError(lse, ref.lse), 1e-2);

  std::vector<bf16> first_dq;
  for (BackwardSplit split : {BackwardSplit::kFused, BackwardSplit::kSplit}) {
    o.backward_split = split;
    std::vector<bf16> dq(q.size()), dk(k.size()), dv(v.size());
    FlexAttentionBackwardBf16(d, q.data(), k.data(), v.data(), out.data(), lse.data(),
                              dout.data(), dlse.data(), o, dq.data(), dk.data(), dv.data());
    EXPECT_LE(RelativeError(ToF32(dq), ref.dq), 1e-2);
    EXPECT_LE(RelativeError(ToF32(dk), ref.dk), 1e-2);
    EXPECT_LE(RelativeError(ToF32(dv), ref.dv), 1e-2);
    if (first_dq.empty()) {
      first_dq = dq;
    } else {
      for (size_t i = 0; i < dq.size(); ++i) ASSERT_EQ(dq[i].bits, first_dq[i].bits) << i;
    }
  }
}

class Bf16Isa : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { isa_.emplace(GetParam().c_str()); }
  std::optional<simd::ScopedIsa> isa_;
};

std::vector<std::string> Isas() {
  int n = 0;
  const char* const* names = simd::AvailableIsas(&n);
  return std::vector<std::string>(names, names + n);
}

INSTANTIATE_TEST_SUITE_P(Isa, Bf16Isa, ::testing::ValuesIn(Isas()),
                         [](const auto& info) { return info.param; });

TEST_P(Bf16Isa, DenseOddSizes) {
  CheckBf16({AttentionDims{2, 3, 3, 37, 70, 24, 40}}, 31);
  CheckBf16({AttentionDims{1, 2, 2, 130, 65, 128, 64}}, 32);
}

TEST_P(Bf16Isa, CausalGqaSoftcap) {
  Bf16Case c{AttentionDims{1, 4, 2, 150, 150, 64, 48}, CausalMask()};
  c.ref.mask = [](int64_t, int64_t, int64_t q, int64_t k) { return q >= k; };
  c.score = Softcap(2.0f);
  c.ref.score = [](double s, int64_t, int64_t, int64_t, int64_t) { return 2.0 * std::tanh(s / 2); };
  c.ref.dscore = [](double s, int64_t, int64_t, int64_t, int64_t) {
    double t = std::tanh(s / 2);
    return 1 - t * t;
  };
  CheckBf16(c, 33);
}

TEST_P(Bf16Isa, SlidingWindowWithSmallBlocks) {
  Bf16Case c{AttentionDims{2, 2, 1, 97, 97, 32, 32}, SlidingWindowMask(20, 5)};
  c.ref.mask = [](int64_t, int64_t, int64_t q, int64_t k) { return q - 20 <= k && k <= q + 5; };
  c.block = 32;
  CheckBf16(c, 34);
}

TEST(Bf16, ScalarConversionRoundsToNearestEvenAndKeepsNan) {
  EXPECT_EQ(bf16(1.0f).bits, 0x3f80);
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties go to the even (1.0).
  EXPECT_EQ(bf16(1.00390625f).bits, 0x3f80);
  // 1 + 3 * 2^-8 is halfway between 1 + 2^-7 and 1 + 2^-6: even is 1 + 2^-6.
  EXPECT_EQ(bf16(1.01171875f).bits, 0x3f82);
  EXPECT_TRUE(std::isnan(static_cast<float>(bf16(std::nanf("")))));
  // A NaN whose payload sits only in the low bits must not become infinity.
  uint32_t low_nan = 0x7f800001u;
  float x;
  std::memcpy(&x, &low_nan, 4);
  EXPECT_TRUE(std::isnan(static_cast<float>(bf16(x))));
  EXPECT_EQ(static_cast<float>(bf16(-INFINITY)), -INFINITY);
  EXPECT_EQ(bf16(3.4e38f).bits, 0x7f80);  // rounds up to infinity, as IEEE does
}

TEST_P(Bf16Isa, VectorConversionsMatchScalar) {
  const simd::Primitives& p = simd::GetPrimitives();
  std::mt19937 rng(35);
  std::vector<float> x = RandomVector(1000, rng, 100.0f);
  x[3] = std::nanf("");
  x[17] = INFINITY;
  x[18] = -0.0f;
  x[19] = 1.00390625f;
  uint32_t low_nan = 0x7f800001u;
  std::memcpy(&x[20], &low_nan, 4);
  for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{33}, int64_t{1000}}) {
    std::vector<uint16_t> h(n);
    p.f32_to_bf16(x.data(), h.data(), n);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(h[i], bf16(x[i]).bits) << "i=" << i;
    std::vector<float> back(n);
    p.bf16_to_f32(h.data(), back.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      if (std::isnan(x[i])) {
        EXPECT_TRUE(std::isnan(back[i]));
      } else {
        EXPECT_EQ(back[i], bf16::ToFloat(h[i]));
      }
    }
  }
}

TEST(Bf16, MatrixIsasAreClearErrors) {
  for (const char* isa : {"amx", "avx512bf16"}) {
    try {
      simd::ScopedIsa forced(isa);
      ADD_FAILURE() << "no error for " << isa;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(isa), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace weft::kernels
