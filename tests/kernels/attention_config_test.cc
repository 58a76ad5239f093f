// Kernel configurations: independent tiles give the same results as the
// reference, the chosen working set never exceeds the limit, a tiny limit
// still runs (correctly), forced configurations are honoured or explained.
#include "weft/kernels/attention_config.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>

#include "attention_reference.h"
#include "weft/base/error.h"
#include "weft/kernels/attention.h"

namespace weft::kernels {
namespace {

using testing::RandomVector;
using testing::ReferenceAttention;
using testing::RefMods;
using testing::RelativeError;
using testing::ScopedEnv;

// Forward + backward of a causal problem against the float64 reference.
void CheckCausal(const AttentionDims& d, const AttentionOptions& base, uint32_t seed) {
  std::mt19937 rng(seed);
  auto q = RandomVector(d.batch * d.q_heads * d.q_len * d.head_dim, rng);
  auto k = RandomVector(d.batch * d.kv_heads * d.kv_len * d.head_dim, rng);
  auto v = RandomVector(d.batch * d.kv_heads * d.kv_len * d.value_dim, rng);
  auto dout = RandomVector(d.batch * d.q_heads * d.q_len * d.value_dim, rng);
  RefMods mods;
  mods.mask = [](int64_t, int64_t, int64_t i, int64_t j) { return i >= j; };
  auto ref = ReferenceAttention(d, q, k, v, 1.0 / std::sqrt(double(d.head_dim)), mods, dout);
  auto bm = BlockMask::Create(CausalMask(), 1, 1, d.q_len, d.kv_len);
  AttentionOptions o = base;
  o.block_mask = &bm;
  std::vector<float> out(d.batch * d.q_heads * d.q_len * d.value_dim);
  std::vector<float> lse(d.batch * d.q_heads * d.q_len), dq(q.size()), dk(k.size()), dv(v.size());
  FlexAttentionForward(d, q.data(), k.data(), v.data(), o, out.data(), lse.data());
  FlexAttentionBackward(d, q.data(), k.data(), v.data(), out.data(), lse.data(), dout.data(),
                        nullptr, o, dq.data(), dk.data(), dv.data());
  EXPECT_LE(RelativeError(out, ref.out), 1e-5);
  EXPECT_LE(RelativeError(lse, ref.lse), 1e-5);
  EXPECT_LE(RelativeError(dq, ref.dq), 1e-4);
  EXPECT_LE(RelativeError(dk, ref.dk), 1e-4);
  EXPECT_LE(RelativeError(dv, ref.dv), 1e-4);
}

TEST(AttentionConfig, ForcedTilesSmallerThanMaskBlocksAreCorrect) {
  AttentionDims d{1, 2, 2, 150, 150, 32, 32};
  for (TileSizes fwd : {TileSizes{16, 64}, TileSizes{32, 16}, TileSizes{64, 32}}) {
    AttentionOptions o;
    o.config.emplace();
    o.config->forward = fwd;
    o.config->backward = {fwd.block_n, fwd.block_m};
    CheckCausal(d, o, 41);
  }
}

TEST(AttentionConfig, TinyCacheLimitStillRunsCorrectly) {
  ScopedEnv limit("WEFT_CACHE_LIMIT", "8K");
  EXPECT_EQ(CacheLimitBytes(), 8192);
  CheckCausal(
      AttentionDims{1, 2, 1, 100, 100, 256, 256},
      [] {
        AttentionOptions o;
        o.enable_gqa = true;
        return o;
      }(),
      42);
  ConfigProblem p;
  p.dims = AttentionDims{1, 1, 1, 4096, 4096, 256, 256};
  ChosenTiles t = ChooseTiles(p, AttentionOptions{}, /*backward=*/true);
  EXPECT_EQ(t.tiles, (TileSizes{16, 16}));  // the minimal configuration
  EXPECT_FALSE(t.fits);
  auto cands = BackwardCandidates(p, CacheLimitBytes());
  EXPECT_TRUE(cands.front().minimal);
  EXPECT_NE(cands.front().reason.find("minimal configuration"), std::string::npos);
}

TEST(AttentionConfig, ChosenWorkingSetNeverExceedsTheLimit) {
  for (const char* limit : {"48K", "96K", "256K", "512K", "2M"}) {
    ScopedEnv env("WEFT_CACHE_LIMIT", limit);
    const int64_t bytes = CacheLimitBytes();
    for (int64_t D : {16, 64, 128, 256})
      for (int64_t S : {1, 40, 1000, 8192})
        for (int64_t block : {0, 64, 128})
          for (const char* variant : {"f32", "bf16", "bf16 amx"})
            for (bool score_mod : {false, true}) {
              ConfigProblem p;
              p.dims = AttentionDims{1, 1, 1, S, S, D, D};
              p.dtype = std::string(variant) == "f32" ? PrimitiveType::kF32 : PrimitiveType::kBF16;
              if (std::string(variant) == "bf16 amx") p.isa = "amx";
              p.has_score_mod = score_mod;
              p.has_mask = block > 0;
              p.mask_q_block = p.mask_kv_block = block;
              for (bool backward : {false, true}) {
                ChosenTiles t = ChooseTiles(p, AttentionOptions{}, backward);
                SCOPED_TRACE(fmt::format("limit {} D {} S {} block {} backward {} {}", limit, D, S,
                                         block, backward, variant));
                const auto cands =
                    backward ? BackwardCandidates(p, bytes) : ForwardCandidates(p, bytes);
                if (t.fits) {
                  EXPECT_LE(t.bytes, bytes);
                } else {
                  // Only the minimal configuration may exceed the limit.
                  EXPECT_EQ(t.tiles, cands.front().tiles);
                }
                if (block > 0) {
                  EXPECT_EQ(block % t.tiles.block_m, 0);
                  EXPECT_EQ(block % t.tiles.block_n, 0);
                }
              }
            }
  }
}

TEST(AttentionConfig, MinimalWorkingSetForTheLargestHeadDim) {
  // Documented in attention_config.h / PERFORMANCE.md: 16 x 16 tiles at
  // D = Dv = 256 need at most this much, so any limit >= it fits every head dim.
  AttentionDims d{1, 1, 1, 4096, 4096, 256, 256};
  int64_t worst = 0;
  for (auto k :
       {AttentionKernel::kForward, AttentionKernel::kBackwardDq, AttentionKernel::kBackwardDkDv})
    worst = std::max(worst, WorkingSetBytes(k, d, {16, 16}, true));
  EXPECT_LE(worst, 160 * 1024);
  EXPECT_GT(worst, 64 * 1024);
}

TEST(AttentionConfig, Bf16WorkingSetsCountTwoByteOperands) {
  // bf16 operands take half the bytes, float32 score tiles and accumulators
  // do not: a bf16 working set lies between half and all of the float32 one.
  AttentionDims d{1, 1, 1, 4096, 4096, 128, 128};
  for (auto k :
       {AttentionKernel::kForward, AttentionKernel::kBackwardDq, AttentionKernel::kBackwardDkDv})
    for (TileSizes t : {TileSizes{16, 16}, TileSizes{64, 64}, TileSizes{128, 64}}) {
      const int64_t f32 = WorkingSetBytes(k, d, t, false, PrimitiveType::kF32);
      const int64_t bf16 = WorkingSetBytes(k, d, t, false, PrimitiveType::kBF16);
      EXPECT_LT(bf16, f32) << KernelName(k);
      EXPECT_GT(2 * bf16, f32) << KernelName(k);
    }
  // The candidates of a bf16 problem are judged by the bf16 sizes.
  ConfigProblem p;
  p.dims = d;
  p.dtype = PrimitiveType::kBF16;
  auto cands = ForwardCandidates(p, 1 << 20);
  for (const Candidate& c : cands)
    EXPECT_EQ(c.Bytes(),
              WorkingSetBytes(AttentionKernel::kForward, d, c.tiles, false, PrimitiveType::kBF16));
}

TEST(AttentionConfig, RefusesElementTypesOtherThanF32AndBf16) {
  const AttentionDims d{1, 1, 1, 64, 64, 16, 16};
  try {
    WorkingSetBytes(AttentionKernel::kForward, d, TileSizes{16, 16}, false, PrimitiveType::kF16);
    FAIL() << "f16 was accepted";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "attention does not support element type f16 (it supports f32, bf16)");
  }
  EXPECT_THROW(ConfigProblem::From(d, AttentionOptions{}, PrimitiveType::kF64), Error);
}

TEST(AttentionConfig, AmxCandidatesCountTheTileGemmsScratch) {
  // On AMX the GEMM adds its own copies (C's row tails, A's and B's k tails)
  // to every kernel's working set: at least the 4 KiB C copy, and for D=128
  // tiles no more than 4 KiB + 32 x 128 x 2 + 8 x 1 KiB.
  ConfigProblem p;
  p.dims = AttentionDims{1, 1, 1, 4096, 4096, 128, 128};
  p.dtype = PrimitiveType::kBF16;
  ConfigProblem amx = p;
  amx.isa = "amx";
  for (bool backward : {false, true}) {
    const auto plain = backward ? BackwardCandidates(p, 1 << 20) : ForwardCandidates(p, 1 << 20);
    const auto tiles =
        backward ? BackwardCandidates(amx, 1 << 20) : ForwardCandidates(amx, 1 << 20);
    ASSERT_EQ(plain.size(), tiles.size());
    for (const Candidate& c : tiles) {
      if (c.tiles.block_m > 128 || c.tiles.block_n > 128) continue;
      const auto same = std::find_if(plain.begin(), plain.end(),
                                     [&](const Candidate& o) { return o.tiles == c.tiles; });
      ASSERT_NE(same, plain.end());
      EXPECT_GE(c.Bytes() - same->Bytes(), 4 * 1024);
      EXPECT_LE(c.Bytes() - same->Bytes(), 4 * 1024 + 32 * 128 * 2 + 8 * 1024);
    }
  }
}

TEST(AttentionConfig, ForcedConfigThatDoesNotFitNamesTheLargestThatFits) {
  ScopedEnv env("WEFT_CACHE_LIMIT", "64K");
  AttentionDims d{1, 1, 1, 256, 256, 128, 128};
  std::vector<float> buf(256 * 128, 0.5f), lse(256);
  AttentionOptions o;
  o.config.emplace();
  o.config->forward = {128, 128};
  try {
    FlexAttentionForward(d, buf.data(), buf.data(), buf.data(), o, buf.data(), lse.data());
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("BLOCK_M=128, BLOCK_N=128"), std::string::npos) << msg;
    EXPECT_NE(msg.find("64.0 KiB"), std::string::npos) << msg;
    EXPECT_NE(msg.find("largest configuration that fits is BLOCK_M="), std::string::npos) << msg;
  }
  // A tile that does not divide the mask block is refused with the choices.
  auto bm = BlockMask::Create(CausalMask(), 1, 1, 256, 256);
  o.block_mask = &bm;
  o.config->forward = {48, 16};
  try {
    FlexAttentionForward(d, buf.data(), buf.data(), buf.data(), o, buf.data(), lse.data());
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("must divide"), std::string::npos) << e.what();
  }
}

TEST(AttentionConfig, HeuristicKeepsMeasuredDefault) {
  ConfigProblem p;
  p.dims = AttentionDims{1, 8, 8, 4096, 4096, 128, 128};
  p.has_mask = true;
  p.mask_q_block = p.mask_kv_block = 64;
  ScopedEnv env("WEFT_CACHE_LIMIT", "512K");
  EXPECT_EQ(ChooseTiles(p, AttentionOptions{}, false).tiles, (TileSizes{64, 64}));
  EXPECT_EQ(ChooseTiles(p, AttentionOptions{}, true).tiles, (TileSizes{64, 64}));
}

}  // namespace
}  // namespace weft::kernels
