// Flex attention forward and backward against the float64 reference, for
// every mask and score mod, odd sizes, GQA, fully masked rows, both backward
// work splits and every instruction set this machine has; in float32 and in
// bfloat16 (second half of the file).
#include "weft/kernels/attention.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <optional>
#include <string>

#include "attention_reference.h"
#include "weft/base/bfloat16.h"
#include "weft/base/cpu.h"
#include "weft/base/error.h"
#include "weft/kernels/attention_config.h"
#include "weft/kernels/simd.h"

namespace weft::kernels {
namespace {

using testing::RandomVector;
using testing::ReferenceAttention;
using testing::RefMods;
using testing::RelativeError;
using testing::ScopedEnv;

struct Case {
  AttentionDims d;
  MaskModPtr mask = nullptr;  // null: no mask
  RefMods ref = {};
  ScoreModPtr score = nullptr;  // null: none
  int64_t block = 64;
  bool mask_per_batch = false;  // BlockMask with B = batch instead of 1
  bool mask_per_head = false;
};

// Softcap 2 (2 tanh(s / 2)) in the kernel and in the reference.
void SetSoftcap2(Case& c) {
  c.score = Softcap(2.0f);
  c.ref.score = [](double s, int64_t, int64_t, int64_t, int64_t) { return 2.0 * std::tanh(s / 2); };
  c.ref.dscore = [](double s, int64_t, int64_t, int64_t, int64_t) {
    double t = std::tanh(s / 2);
    return 1 - t * t;
  };
}

// Document ids [B, S] with random boundaries (a new document with
// probability 1 / every at each position).
IndexTensor RandomDocuments(int64_t B, int64_t S, uint32_t seed, uint32_t every) {
  std::mt19937 rng(seed);
  IndexTensor seg{{B, S}, std::vector<int64_t>(B * S)};
  for (int64_t b = 0; b < B; ++b) {
    int64_t id = 0;
    for (int64_t i = 0; i < S; ++i) {
      if (rng() % every == 0) ++id;
      seg.values[b * S + i] = id;
    }
  }
  return seg;
}

struct Outputs {
  std::vector<float> out, lse, dq, dk, dv;
};

Outputs RunCase(const Case& c, const std::vector<float>& q, const std::vector<float>& k,
                const std::vector<float>& v, const std::vector<float>& dout,
                const std::vector<float>& dlse, BackwardSplit split) {
  const AttentionDims& d = c.d;
  std::optional<BlockMask> bm;
  AttentionOptions o;
  o.enable_gqa = d.q_heads != d.kv_heads;
  o.score_mod = c.score.get();
  o.backward_split = split;
  if (c.mask) {
    bm.emplace(BlockMask::Create(c.mask, c.mask_per_batch ? d.batch : 1,
                                 c.mask_per_head ? d.q_heads : 1, d.q_len, d.kv_len, c.block,
                                 c.block));
    o.block_mask = &*bm;
  }
  Outputs r;
  r.out.resize(d.batch * d.q_heads * d.q_len * d.value_dim);
  r.lse.resize(d.batch * d.q_heads * d.q_len);
  FlexAttentionForward(d, q.data(), k.data(), v.data(), o, r.out.data(), r.lse.data());
  r.dq.resize(q.size());
  r.dk.resize(k.size());
  r.dv.resize(v.size());
  FlexAttentionBackward(d, q.data(), k.data(), v.data(), r.out.data(), r.lse.data(), dout.data(),
                        dlse.empty() ? nullptr : dlse.data(), o, r.dq.data(), r.dk.data(),
                        r.dv.data());
  return r;
}

void Check(const Case& c, uint32_t seed, bool with_dlse = true) {
  SCOPED_TRACE("case with seed " + std::to_string(seed));
  const AttentionDims& d = c.d;
  std::mt19937 rng(seed);
  auto q = RandomVector(d.batch * d.q_heads * d.q_len * d.head_dim, rng);
  auto k = RandomVector(d.batch * d.kv_heads * d.kv_len * d.head_dim, rng);
  auto v = RandomVector(d.batch * d.kv_heads * d.kv_len * d.value_dim, rng);
  auto dout = RandomVector(d.batch * d.q_heads * d.q_len * d.value_dim, rng);
  std::vector<float> dlse;
  if (with_dlse) dlse = RandomVector(d.batch * d.q_heads * d.q_len, rng);
  double scale = 1.0 / std::sqrt(double(d.head_dim));
  auto ref = ReferenceAttention(d, q, k, v, scale, c.ref, dout, dlse);

  Outputs fused = RunCase(c, q, k, v, dout, dlse, BackwardSplit::kFused);
  EXPECT_LE(RelativeError(fused.out, ref.out), 1e-5);
  EXPECT_LE(RelativeError(fused.lse, ref.lse), 1e-5);
  EXPECT_LE(RelativeError(fused.dq, ref.dq), 1e-4);
  EXPECT_LE(RelativeError(fused.dk, ref.dk), 1e-4);
  EXPECT_LE(RelativeError(fused.dv, ref.dv), 1e-4);

  // The other work split, and a second run, give the same bits.
  Outputs split = RunCase(c, q, k, v, dout, dlse, BackwardSplit::kSplit);
  EXPECT_EQ(split.out, fused.out);
  EXPECT_EQ(split.dq, fused.dq);
  EXPECT_EQ(split.dk, fused.dk);
  EXPECT_EQ(split.dv, fused.dv);
  Outputs again = RunCase(c, q, k, v, dout, dlse, BackwardSplit::kAuto);
  EXPECT_EQ(again.out, fused.out);
  EXPECT_EQ(again.dq, fused.dq);
}

AttentionDims Dims(int64_t B, int64_t Hq, int64_t Hkv, int64_t Sq, int64_t Skv, int64_t D,
                   int64_t Dv) {
  return AttentionDims{B, Hq, Hkv, Sq, Skv, D, Dv};
}

// Runs the body once per instruction set this CPU has.
class AttentionIsa : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { isa_.emplace(GetParam().c_str()); }
  std::optional<simd::ScopedIsa> isa_;
};

std::vector<std::string> Isas() {
  int n = 0;
  const char* const* names = simd::AvailableIsas(&n);
  return std::vector<std::string>(names, names + n);
}

INSTANTIATE_TEST_SUITE_P(Isa, AttentionIsa, ::testing::ValuesIn(Isas()),
                         [](const auto& info) { return info.param; });

TEST_P(AttentionIsa, DenseOddSizes) {
  Check({Dims(2, 3, 3, 37, 70, 24, 40)}, 1);
  Check({Dims(1, 2, 2, 130, 65, 64, 64)}, 2);
  Check({Dims(1, 1, 1, 1, 1, 8, 8)}, 3);
}

TEST_P(AttentionIsa, Causal) {
  Case c{Dims(1, 2, 2, 150, 150, 32, 32), CausalMask()};
  c.ref.mask = [](int64_t, int64_t, int64_t q, int64_t k) { return q >= k; };
  Check(c, 4);
  // Offset causal with Sq != Skv (bottom-right aligned through the offset).
  Case o{Dims(1, 1, 1, 40, 100, 16, 16), CausalMask(60)};
  o.ref.mask = [](int64_t, int64_t, int64_t q, int64_t k) { return q + 60 >= k; };
  Check(o, 5);
}

TEST_P(AttentionIsa, GqaWithSlidingWindowAndSoftcap) {
  Case c{Dims(2, 4, 2, 97, 97, 32, 48), SlidingWindowMask(20, 5)};
  c.ref.mask = [](int64_t, int64_t, int64_t q, int64_t k) { return q - 20 <= k && k <= q + 5; };
  SetSoftcap2(c);
  c.block = 32;
  Check(c, 6);
}

TEST_P(AttentionIsa, DocumentMaskPerBatchRow) {
  const int64_t B = 2, S = 200;
  const IndexTensor seg = RandomDocuments(B, S, 7, 23);
  auto causal_doc = AndMasks({CausalMask(), DocumentMask(seg, seg)});
  Case c{Dims(B, 2, 1, S, S, 32, 32), causal_doc};
  c.mask_per_batch = true;
  c.ref.mask = [seg, S](int64_t b, int64_t, int64_t q, int64_t k) {
    return q >= k && seg.values[b * S + q] == seg.values[b * S + k];
  };
  Check(c, 8);
}

TEST_P(AttentionIsa, PrefixLmChunkedAndAlibi) {
  Case c{Dims(2, 2, 2, 90, 90, 16, 16), PrefixLmMask({30, 7})};
  c.mask_per_batch = true;
  c.ref.mask = [](int64_t b, int64_t, int64_t q, int64_t k) {
    return k < (b == 0 ? 30 : 7) || q >= k;
  };
  std::vector<float> slopes{0.5f, 0.125f};
  c.score = Alibi(slopes);
  c.ref.score = [slopes](double s, int64_t, int64_t h, int64_t q, int64_t k) {
    return s + double(slopes[h]) * double(k - q);
  };
  c.ref.dscore = [](double, int64_t, int64_t, int64_t, int64_t) { return 1.0; };
  Check(c, 9);

  Case ch{Dims(1, 1, 1, 100, 100, 16, 16), ChunkedCausalMask(24)};
  ch.ref.mask = [](int64_t, int64_t, int64_t q, int64_t k) { return q / 24 == k / 24 && q >= k; };
  ch.block = 16;
  Check(ch, 10);
}

TEST_P(AttentionIsa, OrMaskRelativeBiasAndExpressions) {
  const int64_t Sq = 50, Skv = 70;
  std::mt19937 rng(11);
  std::vector<float> table = RandomVector(Sq + Skv - 1, rng);
  Case c{Dims(1, 2, 2, Sq, Skv, 16, 16),
         OrMasks({SlidingWindowMask(3, 3), MaskExpr("kv_idx % 7 == 0")})};
  c.ref.mask = [](int64_t, int64_t, int64_t q, int64_t k) {
    return (q - 3 <= k && k <= q + 3) || k % 7 == 0;
  };
  c.score = RelativeBias(table, Skv);
  c.ref.score = [table](double s, int64_t, int64_t, int64_t q, int64_t k) {
    return s + double(table[q - k + Skv - 1]);
  };
  c.ref.dscore = [](double, int64_t, int64_t, int64_t, int64_t) { return 1.0; };
  c.block = 16;
  Check(c, 12);

  ValueTensor w{{2}, {0.7f, -1.3f}};
  Case e{Dims(1, 2, 2, 45, 45, 8, 8), MaskExpr("q_idx >= kv_idx || h == 1")};
  e.mask_per_head = true;
  e.ref.mask = [](int64_t, int64_t h, int64_t q, int64_t k) { return q >= k || h == 1; };
  e.score = ScoreExpr("score * w[h] + tanh(score)", {{"w", w}});
  e.ref.score = [w](double s, int64_t, int64_t h, int64_t, int64_t) {
    return s * double(w.values[h]) + std::tanh(s);
  };
  e.ref.dscore = [w](double s, int64_t, int64_t h, int64_t, int64_t) {
    double t = std::tanh(s);
    return double(w.values[h]) + 1 - t * t;
  };
  e.block = 16;
  Check(e, 13);
}

TEST_P(AttentionIsa, FullyMaskedRowsGiveZerosNotNan) {
  // q_idx - 5 >= kv_idx: the first 5 query rows see no key at all.
  Case c{Dims(1, 2, 1, 40, 40, 16, 16), CausalMask(-5)};
  c.ref.mask = [](int64_t, int64_t, int64_t q, int64_t k) { return q - 5 >= k; };
  c.block = 16;
  Check(c, 14);
  std::mt19937 rng(15);
  const AttentionDims& d = c.d;
  auto q = RandomVector(d.batch * d.q_heads * d.q_len * d.head_dim, rng);
  auto k = RandomVector(d.batch * d.kv_heads * d.kv_len * d.head_dim, rng);
  auto v = RandomVector(d.batch * d.kv_heads * d.kv_len * d.value_dim, rng);
  auto dout = RandomVector(d.batch * d.q_heads * d.q_len * d.value_dim, rng);
  auto dlse = RandomVector(d.batch * d.q_heads * d.q_len, rng);
  Outputs r = RunCase(c, q, k, v, dout, dlse, BackwardSplit::kAuto);
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t i = 0; i < 5; ++i) {
      EXPECT_EQ(r.lse[h * 40 + i], -INFINITY);
      for (int64_t c2 = 0; c2 < 16; ++c2) {
        EXPECT_EQ(r.out[(h * 40 + i) * 16 + c2], 0.0f);
        EXPECT_EQ(r.dq[(h * 40 + i) * 16 + c2], 0.0f);
      }
    }
  for (float x : r.dk) EXPECT_TRUE(std::isfinite(x));
}

// The reference's gradient formulas against central finite differences of
// the reference itself (float64), so the comparisons above test the kernel
// against true gradients.
TEST(AttentionReference, GradientsMatchFiniteDifferences) {
  AttentionDims d = Dims(1, 2, 1, 6, 7, 4, 3);
  RefMods mods;
  mods.mask = [](int64_t, int64_t, int64_t q, int64_t k) { return q + 1 >= k; };
  mods.score = [](double s, int64_t, int64_t, int64_t, int64_t) { return 3 * std::tanh(s / 3); };
  mods.dscore = [](double s, int64_t, int64_t, int64_t, int64_t) {
    double t = std::tanh(s / 3);
    return 1 - t * t;
  };
  std::mt19937 rng(16);
  auto q = RandomVector(2 * 6 * 4, rng), k = RandomVector(7 * 4, rng), v = RandomVector(7 * 3, rng);
  auto dout = RandomVector(2 * 6 * 3, rng), dlse = RandomVector(2 * 6, rng);
  const double scale = 0.5;
  auto loss = [&](const std::vector<float>& qq, const std::vector<float>& kk,
                  const std::vector<float>& vv) {
    auto r = ReferenceAttention(d, qq, kk, vv, scale, mods);
    double l = 0;
    for (size_t i = 0; i < r.out.size(); ++i) l += r.out[i] * dout[i];
    for (size_t i = 0; i < r.lse.size(); ++i) l += r.lse[i] * dlse[i];
    return l;
  };
  auto ref = ReferenceAttention(d, q, k, v, scale, mods, dout, dlse);
  auto check = [&](std::vector<float>& x, const std::vector<double>& grad) {
    for (size_t i = 0; i < x.size(); ++i) {
      float saved = x[i];
      const float h = 1e-2f;
      x[i] = saved + h;
      double up = loss(q, k, v);
      x[i] = saved - h;
      double down = loss(q, k, v);
      x[i] = saved;
      double fd = (up - down) / (double(saved + h) - double(saved - h));
      EXPECT_NEAR(fd, grad[i], 2e-3 * (1 + std::abs(grad[i]))) << "index " << i;
    }
  };
  check(q, ref.dq);
  check(k, ref.dk);
  check(v, ref.dv);
}

TEST(Attention, BadInputNamesTheProblem) {
  std::vector<float> buf(4096, 1.0f);
  AttentionOptions o;
  auto expect_error = [&](AttentionDims d, const std::string& needle) {
    try {
      FlexAttentionForward(d, buf.data(), buf.data(), buf.data(), o, buf.data(), buf.data());
      ADD_FAILURE() << "no error for " << needle;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_error(Dims(1, 4, 2, 8, 8, 8, 8), "enable_gqa");
  o.enable_gqa = true;
  expect_error(Dims(1, 4, 3, 8, 8, 8, 8), "multiple");
  expect_error(Dims(1, 1, 1, 8, 8, 300, 8), "head dim");
  auto bm = BlockMask::Create(CausalMask(), 1, 1, 16, 16);
  o.block_mask = &bm;
  expect_error(Dims(1, 1, 1, 8, 8, 8, 8), "Q_LEN=16");
}

// Long sequences run with memory that grows with S, not S^2: S = 32768
// forward and backward with a local window (an S x S float buffer would be
// 4 GiB; we allow 64 MiB of growth in the high-water mark).
int64_t PeakRssKiB() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::stoll(line.substr(6));
  return 0;
}

TEST(Attention, LongSequenceMemoryGrowsWithSNotSSquared) {
  const int64_t S = 32768, D = 32;
  AttentionDims d = Dims(1, 1, 1, S, S, D, D);
  std::mt19937 rng(17);
  auto q = RandomVector(S * D, rng), k = RandomVector(S * D, rng), v = RandomVector(S * D, rng);
  auto dout = RandomVector(S * D, rng);
  std::vector<float> out(S * D), lse(S), dq(S * D), dk(S * D), dv(S * D);
  int64_t before = PeakRssKiB();
  auto bm = BlockMask::Create(SlidingWindowMask(64, 0), 1, 1, S, S);
  AttentionOptions o;
  o.block_mask = &bm;
  FlexAttentionForward(d, q.data(), k.data(), v.data(), o, out.data(), lse.data());
  FlexAttentionBackward(d, q.data(), k.data(), v.data(), out.data(), lse.data(), dout.data(),
                        nullptr, o, dq.data(), dk.data(), dv.data());
  int64_t growth_kib = PeakRssKiB() - before;
  EXPECT_LT(growth_kib, 64 * 1024);
  // Spot-check the last rows against the reference restricted to them.
  const int64_t tail = 70;
  AttentionDims td = Dims(1, 1, 1, tail, tail, D, D);
  std::vector<float> tq(q.end() - tail * D, q.end()), tk(k.end() - tail * D, k.end()),
      tv(v.end() - tail * D, v.end());
  RefMods mods;
  mods.mask = [](int64_t, int64_t, int64_t i, int64_t j) { return i - 64 <= j && j <= i; };
  auto ref = ReferenceAttention(td, tq, tk, tv, 1.0 / std::sqrt(double(D)), mods);
  std::vector<float> got(out.end() - D, out.end());
  std::vector<double> want(ref.out.end() - D, ref.out.end());
  EXPECT_LE(RelativeError(got, want), 1e-5);
}

}  // namespace
}  // namespace weft::kernels

namespace weft::kernels {
namespace {

// A score mod that yields NaN on a whole row gives NaN, not a silent
// "fully masked" zero row.
TEST(Attention, NanScoresPropagate) {
  AttentionDims d{1, 1, 1, 8, 8, 8, 8};
  std::mt19937 rng(21);
  auto q = testing::RandomVector(64, rng), k = testing::RandomVector(64, rng),
       v = testing::RandomVector(64, rng);
  auto mod = ScoreExpr("q_idx == 1 ? sqrt(-1.0) : score");
  AttentionOptions o;
  o.score_mod = mod.get();
  std::vector<float> out(64), lse(8);
  FlexAttentionForward(d, q.data(), k.data(), v.data(), o, out.data(), lse.data());
  EXPECT_TRUE(std::isnan(lse[1]));
  EXPECT_TRUE(std::isnan(out[8]));
  EXPECT_TRUE(std::isfinite(lse[0]) && std::isfinite(lse[2]));
}

// ---- bfloat16 (FlexAttentionForwardBf16 / FlexAttentionBackwardBf16) ----
// Against the float64 reference on the bf16-rounded inputs, on every
// instruction set this machine has (amx runs its GEMMs on tiles, avx512bf16
// on vdpbf16ps, the others widen bf16 to float32) and on the AMX GEMM's
// software model: masks, score mods, GQA, fully masked rows, odd tiles, a
// tiny cache limit, the backward and both work splits. Plus the bf16
// conversions and the ISA choice.

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

struct Bf16Outputs {
  std::vector<bf16> out, dq, dk, dv;
  std::vector<float> lse;
};

Bf16Outputs CheckBf16(const Case& c, uint32_t seed) {
  SCOPED_TRACE("bf16 case with seed " + std::to_string(seed));
  const AttentionDims& d = c.d;
  std::mt19937 rng(seed);
  auto q = ToBf16(RandomVector(d.batch * d.q_heads * d.q_len * d.head_dim, rng));
  auto k = ToBf16(RandomVector(d.batch * d.kv_heads * d.kv_len * d.head_dim, rng));
  auto v = ToBf16(RandomVector(d.batch * d.kv_heads * d.kv_len * d.value_dim, rng));
  auto dout = ToBf16(RandomVector(d.batch * d.q_heads * d.q_len * d.value_dim, rng));
  auto dlse = RandomVector(d.batch * d.q_heads * d.q_len, rng);
  // The reference sees exactly the bf16 values the kernel sees.
  auto ref = ReferenceAttention(d, ToF32(q), ToF32(k), ToF32(v), 1.0 / std::sqrt(d.head_dim), c.ref,
                                ToF32(dout), dlse);

  std::optional<BlockMask> bm;
  AttentionOptions o;
  o.enable_gqa = d.q_heads != d.kv_heads;
  o.score_mod = c.score.get();
  if (c.mask) {
    bm.emplace(BlockMask::Create(c.mask, c.mask_per_batch ? d.batch : 1,
                                 c.mask_per_head ? d.q_heads : 1, d.q_len, d.kv_len, c.block,
                                 c.block));
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
std::vector<std::string> IsasAndEmulatedAmx() {
  std::vector<std::string> isas = Isas();
  isas.push_back("amx-emulated");
  return isas;
}

INSTANTIATE_TEST_SUITE_P(Isa, Bf16Isa, ::testing::ValuesIn(IsasAndEmulatedAmx()),
                         [](const auto& info) {
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
  Case c{AttentionDims{1, 4, 2, 150, 150, 64, 48}, CausalMask()};
  c.ref.mask = [](int64_t, int64_t, int64_t q, int64_t k) { return q >= k; };
  SetSoftcap2(c);
  CheckBf16(c, 33);
}

TEST_P(Bf16Isa, SlidingWindowWithSmallBlocks) {
  Case c{AttentionDims{2, 2, 1, 97, 97, 32, 32}, SlidingWindowMask(20, 5)};
  c.ref.mask = [](int64_t, int64_t, int64_t q, int64_t k) { return q - 20 <= k && k <= q + 5; };
  c.block = 32;
  CheckBf16(c, 34);
}

TEST_P(Bf16Isa, DocumentMaskGqaPerBatchRow) {
  const int64_t B = 2, S = 150;
  const IndexTensor seg = RandomDocuments(B, S, 36, 19);
  Case c{AttentionDims{B, 4, 2, S, S, 64, 64}, AndMasks({CausalMask(), DocumentMask(seg, seg)})};
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
  Case c{AttentionDims{1, 2, 2, 111, 111, 23, 19}, SlidingWindowMask(40, 3)};
  c.ref.mask = [](int64_t, int64_t, int64_t q, int64_t k) { return q - 40 <= k && k <= q + 3; };
  c.block = 37;
  CheckBf16(c, 38);
}

TEST_P(Bf16Isa, FullyMaskedRowsGiveZerosNotNan) {
  // q_idx - 5 >= kv_idx: the first 5 query rows see no key at all.
  Case c{AttentionDims{1, 2, 1, 40, 40, 16, 16}, CausalMask(-5)};
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
  Case c{AttentionDims{1, 2, 1, 100, 100, 128, 128}, CausalMask()};
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
