// bfloat16 flex attention against the float64 reference (on the bf16-rounded
// inputs), on every instruction set this machine has (avx512bf16 runs its
// GEMMs on vdpbf16ps, the others widen bf16 to float32): masks, score mods,
// GQA, fully masked rows, odd tiles, a tiny cache limit, the backward and
// both work splits. Plus the bf16 conversions and the ISA choice.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <optional>
#include <string>

#include "attention_reference.h"
#include "simd/primitives.h"
#include "weft/base/bfloat16.h"
#include "weft/base/cpu.h"
#include "weft/base/error.h"
#include "weft/kernels/attention.h"
#include "weft/kernels/attention_config.h"

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
  bool mask_per_batch = false;
};

struct Bf16Outputs {
  std::vector<bf16> out, dq, dk, dv;
  std::vector<float> lse;
};

Bf16Outputs CheckBf16(const Bf16Case& c, uint32_t seed) {
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
    bm.emplace(BlockMask::Create(c.mask, c.mask_per_batch ? d.batch : 1, 1, d.q_len, d.kv_len,
                                 c.block, c.block));
    o.block_mask = &*bm;
  }
  Bf16Outputs r;
  r.out.resize(d.batch * d.q_heads * d.q_len * d.value_dim);
  r.lse.resize(d.batch * d.q_heads * d.q_len);
  FlexAttentionForwardBf16(d, q.data(), k.data(), v.data(), o, r.out.data(), r.lse.data());
  EXPECT_LE(RelativeError(ToF32(r.out), ref.out), 1e-2);
  EXPECT_LE(RelativeError(r.lse, ref.lse), 1e-2);

  for (BackwardSplit split : {BackwardSplit::kFused, BackwardSplit::kSplit}) {
    o.backward_split = split;
    std::vector<bf16> dq(q.size()), dk(k.size()), dv(v.size());
    FlexAttentionBackwardBf16(d, q.data(), k.data(), v.data(), r.out.data(), r.lse.data(),
                              dout.data(), dlse.data(), o, dq.data(), dk.data(), dv.data());
    EXPECT_LE(RelativeError(ToF32(dq), ref.dq), 1e-2);
    EXPECT_LE(RelativeError(ToF32(dk), ref.dk), 1e-2);
    EXPECT_LE(RelativeError(ToF32(dv), ref.dv), 1e-2);
    if (r.dq.empty()) {
      r.dq = dq;
      r.dk = dk;
      r.dv = dv;
    } else {
      // Fused and split visit the same tiles in the same order: same bits.
      auto differing = [](const std::vector<bf16>& a, const std::vector<bf16>& b) {
        int64_t n = 0;
        for (size_t i = 0; i < a.size(); ++i) n += a[i].bits != b[i].bits;
        return n;
      };
      EXPECT_EQ(differing(dq, r.dq), 0);
      EXPECT_EQ(differing(dk, r.dk), 0);
      EXPECT_EQ(differing(dv, r.dv), 0);
    }
  }
  return r;
}

// Sets an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (old_) {
      setenv(name_, old_->c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

class Bf16Isa : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "amx-emulated") {
      isa_.emplace(simd::EmulatedAmxPrimitives());
    } else {
      isa_.emplace(GetParam().c_str());
    }
  }
  std::optional<simd::ScopedIsa> isa_;
};

// Every instruction set this machine has, and the AMX GEMM on the software
// model of the tile instructions (so its blocking runs under every mask here
// even where the CPU has no AMX).
std::vector<std::string> Isas() {
  int n = 0;
  const char* const* names = simd::AvailableIsas(&n);
  std::vector<std::string> isas(names, names + n);
  isas.push_back("amx-emulated");
  return isas;
}

INSTANTIATE_TEST_SUITE_P(Isa, Bf16Isa, ::testing::ValuesIn(Isas()), [](const auto& info) {
  std::string name = info.param;
  for (char& c : name)
    if (c == '-') c = '_';
  return name;
});

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

TEST_P(Bf16Isa, DocumentMaskGqaPerBatchRow) {
  const int64_t B = 2, S = 150;
  std::mt19937 rng(36);
  IndexTensor seg{{B, S}, std::vector<int64_t>(B * S)};
  for (int64_t b = 0; b < B; ++b) {
    int64_t id = 0;
    for (int64_t i = 0; i < S; ++i) {
      if (rng() % 19 == 0) ++id;  // random document boundaries
      seg.values[b * S + i] = id;
    }
  }
  Bf16Case c{AttentionDims{B, 4, 2, S, S, 64, 64},
             AndMasks({CausalMask(), DocumentMask(seg, seg)})};
  c.mask_per_batch = true;
  c.block = 32;
  c.ref.mask = [seg, S](int64_t b, int64_t, int64_t q, int64_t k) {
    return q >= k && seg.values[b * S + q] == seg.values[b * S + k];
  };
  CheckBf16(c, 37);
}

TEST_P(Bf16Isa, OddTilesAndOddHeadDims) {
  // Mask blocks of 37 rows are their own tiles: tiles start at odd rows, so
  // every pair-packed panel's K dimension is odd somewhere (also D and Dv).
  Bf16Case c{AttentionDims{1, 2, 2, 111, 111, 23, 19}, SlidingWindowMask(40, 3)};
  c.ref.mask = [](int64_t, int64_t, int64_t q, int64_t k) { return q - 40 <= k && k <= q + 3; };
  c.block = 37;
  CheckBf16(c, 38);
}

TEST_P(Bf16Isa, FullyMaskedRowsGiveZerosNotNan) {
  // q_idx - 5 >= kv_idx: the first 5 query rows see no key at all.
  Bf16Case c{AttentionDims{1, 2, 1, 40, 40, 16, 16}, CausalMask(-5)};
  c.ref.mask = [](int64_t, int64_t, int64_t q, int64_t k) { return q - 5 >= k; };
  c.block = 16;
  Bf16Outputs r = CheckBf16(c, 39);
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t i = 0; i < 5; ++i) {
      EXPECT_EQ(r.lse[h * 40 + i], -INFINITY);
      for (int64_t j = 0; j < 16; ++j) {
        EXPECT_EQ(static_cast<float>(r.out[(h * 40 + i) * 16 + j]), 0.0f);
        EXPECT_EQ(static_cast<float>(r.dq[(h * 40 + i) * 16 + j]), 0.0f);
      }
    }
  for (const auto* g : {&r.dq, &r.dk, &r.dv})
    for (bf16 x : *g) EXPECT_TRUE(std::isfinite(static_cast<float>(x)));
}

TEST_P(Bf16Isa, TinyCacheLimitStillRunsCorrectly) {
  ScopedEnv limit("WEFT_CACHE_LIMIT", "8K");
  Bf16Case c{AttentionDims{1, 2, 1, 100, 100, 128, 128}, CausalMask()};
  c.ref.mask = [](int64_t, int64_t, int64_t q, int64_t k) { return q >= k; };
  CheckBf16(c, 40);
}

TEST_P(Bf16Isa, ForcedTilesRunTheSameKernels) {
  // A forced configuration with this ISA named explicitly (kernel_options' ISA;
  // the emulated AMX has no name: the test's ScopedIsa forces it).
  const std::string isa = GetParam() == "amx-emulated" ? "" : GetParam();
  const AttentionDims d{1, 2, 2, 80, 80, 64, 64};
  std::mt19937 rng(41);
  auto q = ToBf16(RandomVector(2 * 80 * 64, rng)), k = ToBf16(RandomVector(2 * 80 * 64, rng)),
       v = ToBf16(RandomVector(2 * 80 * 64, rng));
  auto ref = ReferenceAttention(d, ToF32(q), ToF32(k), ToF32(v), 1.0 / 8, RefMods{});
  AttentionOptions o;
  o.config = AttentionConfig{{32, 16}, {16, 32}, BackwardSplit::kAuto, isa};
  std::vector<bf16> out(q.size());
  std::vector<float> lse(2 * 80);
  FlexAttentionForwardBf16(d, q.data(), k.data(), v.data(), o, out.data(), lse.data());
  EXPECT_LE(RelativeError(ToF32(out), ref.out), 1e-2);
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

TEST(Bf16, AmxAndAvx512Bf16RunOnlyWhereTheCpuHasThem) {
  if (simd::PrimitivesFor("amx") != nullptr) {
    simd::ScopedIsa forced("amx");
    EXPECT_STREQ(simd::GetBf16Primitives().isa, "amx");
  } else {
    try {
      simd::ScopedIsa forced("amx");
      ADD_FAILURE() << "no error for amx on a machine that cannot run it";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("amx"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("AMX"), std::string::npos) << e.what();
    }
  }
  const CpuInfo& cpu = GetCpuInfo();
  if (cpu.avx512_bf16 && cpu.HasAvx512()) {
    simd::ScopedIsa forced("avx512bf16");
    EXPECT_STREQ(simd::GetBf16Primitives().isa, "avx512bf16");
    EXPECT_NE(simd::GetBf16Primitives().bf16_dot_peak_loop, nullptr);
  } else {
    try {
      simd::ScopedIsa forced("avx512bf16");
      ADD_FAILURE() << "no error for avx512bf16 on a CPU without it";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(cpu.model_name), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("avx512bf16"), std::string::npos) << e.what();
    }
  }
}

TEST(Bf16, DefaultIsaRunsTheWidestBf16Path) {
  int n = 0;
  const char* const* names = simd::AvailableIsas(&n);
  // bf16 calls take the first (widest) ISA; float32 calls skip amx and
  // avx512bf16.
  EXPECT_STREQ(simd::GetBf16Primitives().isa, names[0]);
  EXPECT_STRNE(simd::GetPrimitives().isa, "avx512bf16");
  EXPECT_STRNE(simd::GetPrimitives().isa, "amx");
}

}  // namespace
}  // namespace weft::kernels
