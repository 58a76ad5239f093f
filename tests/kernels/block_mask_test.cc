// BlockMask against brute force: every block's kind for every mask kind on
// odd sizes, the by-q and by-kv lists as transposes of each other,
// broadcasting of batch/heads, Dense(), errors, and the summary text.
#include "weft/kernels/block_mask.h"

#include <gtest/gtest.h>
#include <sys/resource.h>

#include <functional>
#include <limits>
#include <random>

#include "error_of.h"
#include "weft/base/error.h"

namespace weft::kernels {
namespace {

using Formula = std::function<bool(int64_t b, int64_t h, int64_t q, int64_t kv)>;

struct Case {
  std::string name;
  MaskModPtr mask;
  Formula formula;
  int64_t batch, heads;
};

IndexTensor Segments(std::mt19937& rng, int64_t batch, int64_t len, bool sorted) {
  IndexTensor t{{batch, len}, {}};
  for (int64_t b = 0; b < batch; ++b) {
    int64_t id = 0;
    for (int64_t i = 0; i < len; ++i) {
      if (sorted && rng() % 40 == 0) ++id;
      t.values.push_back(sorted ? id : static_cast<int64_t>(rng() % 3));
    }
  }
  return t;
}

std::vector<Case> Cases(std::mt19937& rng, int64_t q_len, int64_t kv_len) {
  std::vector<Case> cases;
  const int64_t offset = static_cast<int64_t>(rng() % 81) - 40;
  cases.push_back({"causal", CausalMask(offset),
                   [=](int64_t, int64_t, int64_t q, int64_t kv) { return q + offset >= kv; }, 1,
                   1});
  const int64_t left = rng() % 70, right = rng() % 20;
  cases.push_back(
      {"sliding", SlidingWindowMask(left, right),
       [=](int64_t, int64_t, int64_t q, int64_t kv) { return q - left <= kv && kv <= q + right; },
       1, 1});
  const std::vector<int64_t> prefix = {static_cast<int64_t>(rng() % 100), 3};
  cases.push_back(
      {"prefix_lm", PrefixLmMask(prefix),
       [=](int64_t b, int64_t, int64_t q, int64_t kv) { return kv < prefix[b] || q >= kv; }, 2, 1});
  const int64_t chunk = 1 + rng() % 70;
  cases.push_back(
      {"chunked", ChunkedCausalMask(chunk),
       [=](int64_t, int64_t, int64_t q, int64_t kv) { return q / chunk == kv / chunk && q >= kv; },
       1, 1});
  for (bool sorted : {true, false}) {
    auto qs = std::make_shared<IndexTensor>(Segments(rng, 2, q_len, sorted));
    auto ks = std::make_shared<IndexTensor>(Segments(rng, 2, kv_len, sorted));
    cases.push_back({sorted ? "document_sorted" : "document_random", DocumentMask(*qs, *ks),
                     [=](int64_t b, int64_t, int64_t q, int64_t kv) {
                       return qs->values[b * q_len + q] == ks->values[b * kv_len + kv];
                     },
                     2, 1});
  }
  cases.push_back({"and", AndMasks({cases[0].mask, cases[1].mask, cases[4].mask}),
                   [f = cases[0].formula, g = cases[1].formula, d = cases[4].formula](
                       int64_t b, int64_t h, int64_t q, int64_t kv) {
                     return f(b, h, q, kv) && g(b, h, q, kv) && d(b, h, q, kv);
                   },
                   2, 1});
  cases.push_back(
      {"or", OrMasks({cases[3].mask, cases[2].mask}),
       [f = cases[3].formula, g = cases[2].formula](int64_t b, int64_t h, int64_t q, int64_t kv) {
         return f(b, h, q, kv) || g(b, h, q, kv);
       },
       2, 1});
  // Depends on the head: heads are not broadcast.
  cases.push_back(
      {"expr", MaskExpr("kv_idx <= q_idx && (q_idx - kv_idx) % (h + 2) == 0"),
       [](int64_t, int64_t h, int64_t q, int64_t kv) { return kv <= q && (q - kv) % (h + 2) == 0; },
       1, 3});
  Formula lambda = [](int64_t b, int64_t h, int64_t q, int64_t kv) {
    return (q * 7 + kv) % 11 < 9;
  };
  cases.push_back({"lambda", LambdaMask(lambda), lambda, 1, 1});
  return cases;
}

// Kind() of every block agrees with brute force, and KvBlocks / QBlocks are
// ascending lists that are each other's transposes.
void ExpectMatchesBruteForce(const BlockMask& m, const Case& c) {
  const int64_t nqb = m.num_q_blocks(), nkb = m.num_kv_blocks();
  int64_t full = 0, partial = 0;
  for (int64_t b = 0; b < m.batch(); ++b) {
    for (int64_t h = 0; h < m.heads(); ++h) {
      std::vector<int> by_q(nqb * nkb, 0), by_kv(nqb * nkb, 0);  // 0 empty, 1 partial, 2 full
      for (int64_t qb = 0; qb < nqb; ++qb) {
        const BlockMask::BlockList l = m.KvBlocks(b, h, qb);
        for (int32_t i = 0; i < l.num_full; ++i) by_q[qb * nkb + l.full[i]] = 2;
        for (int32_t i = 0; i < l.num_partial; ++i) by_q[qb * nkb + l.partial[i]] = 1;
        ASSERT_TRUE(std::is_sorted(l.full, l.full + l.num_full));
        ASSERT_TRUE(std::is_sorted(l.partial, l.partial + l.num_partial));
        full += l.num_full;
        partial += l.num_partial;
      }
      for (int64_t kb = 0; kb < nkb; ++kb) {
        const BlockMask::BlockList l = m.QBlocks(b, h, kb);
        for (int32_t i = 0; i < l.num_full; ++i) by_kv[l.full[i] * nkb + kb] = 2;
        for (int32_t i = 0; i < l.num_partial; ++i) by_kv[l.partial[i] * nkb + kb] = 1;
        ASSERT_TRUE(std::is_sorted(l.full, l.full + l.num_full));
        ASSERT_TRUE(std::is_sorted(l.partial, l.partial + l.num_partial));
      }
      ASSERT_EQ(by_q, by_kv) << c.name;
      for (int64_t qb = 0; qb < nqb; ++qb) {
        for (int64_t kb = 0; kb < nkb; ++kb) {
          const int64_t q0 = qb * m.q_block(), q1 = std::min(q0 + m.q_block(), m.q_len());
          const int64_t k0 = kb * m.kv_block(), k1 = std::min(k0 + m.kv_block(), m.kv_len());
          int64_t kept = 0;
          for (int64_t q = q0; q < q1; ++q) {
            for (int64_t kv = k0; kv < k1; ++kv) kept += c.formula(b, h, q, kv);
          }
          const int truth = kept == 0 ? 0 : kept == (q1 - q0) * (k1 - k0) ? 2 : 1;
          ASSERT_EQ(by_q[qb * nkb + kb], truth)
              << c.name << " b=" << b << " h=" << h << " qb=" << qb << " kb=" << kb;
          ASSERT_EQ(static_cast<int>(m.Kind(b, h, qb, kb)), truth);
          // A partial block's kept mask is the formula's; other blocks have none.
          const uint8_t* tile = m.PartialKeep(b, h, qb, kb);
          ASSERT_EQ(tile != nullptr, truth == 1) << c.name << " qb=" << qb << " kb=" << kb;
          for (int64_t q = q0; tile != nullptr && q < q1; ++q) {
            for (int64_t kv = k0; kv < k1; ++kv) {
              ASSERT_EQ(tile[(q - q0) * m.kv_block() + (kv - k0)], c.formula(b, h, q, kv) ? 1 : 0)
                  << c.name << " b=" << b << " h=" << h << " q=" << q << " kv=" << kv;
            }
          }
        }
      }
    }
  }
  EXPECT_EQ(m.num_full(), full);
  EXPECT_EQ(m.num_partial(), partial);
  EXPECT_EQ(m.num_empty(), m.batch() * m.heads() * nqb * nkb - full - partial);
  EXPECT_DOUBLE_EQ(m.Sparsity(), 100.0 * m.num_empty() / (m.batch() * m.heads() * nqb * nkb));
}

TEST(BlockMaskTest, EveryMaskKindMatchesBruteForce) {
  std::mt19937 rng(600);
  const int64_t lengths[] = {1, 63, 65, 130, 200};
  const int64_t blocks[] = {16, 17, 64, 128};
  for (int trial = 0; trial < 15; ++trial) {
    const int64_t q_len = lengths[rng() % 5], kv_len = lengths[rng() % 5];
    for (const Case& c : Cases(rng, q_len, kv_len)) {
      const int64_t qb = blocks[rng() % 4], kb = blocks[rng() % 4];
      const BlockMask m = BlockMask::Create(c.mask, c.batch, c.heads, q_len, kv_len, qb, kb);
      EXPECT_EQ(m.mask_mod(), c.mask.get());
      ExpectMatchesBruteForce(m, c);
      if (HasFatalFailure()) return;
    }
  }
}

TEST(BlockMaskTest, BatchAndHeadsBroadcastWhenOne) {
  const BlockMask m = BlockMask::Create(CausalMask(), 1, 1, 200, 200, 64, 64);
  for (int64_t qb = 0; qb < m.num_q_blocks(); ++qb) {
    const BlockMask::BlockList a = m.KvBlocks(0, 0, qb), b = m.KvBlocks(5, 31, qb);
    EXPECT_EQ(a.full, b.full);
    EXPECT_EQ(a.num_full, b.num_full);
    EXPECT_EQ(a.partial, b.partial);
    EXPECT_EQ(m.QBlocks(3, 2, qb).num_partial, m.QBlocks(0, 0, qb).num_partial);
  }
  // A head-dependent mask over 3 heads, batch broadcast.
  const BlockMask per_head =
      BlockMask::Create(MaskExpr("kv_idx <= q_idx + 64 * h"), 1, 3, 128, 256, 64, 64);
  EXPECT_EQ(per_head.KvBlocks(9, 0, 0).num_full + per_head.KvBlocks(9, 0, 0).num_partial, 1);
  EXPECT_EQ(per_head.KvBlocks(9, 2, 0).num_full, 2);
  EXPECT_THROW(per_head.KvBlocks(0, 3, 0), Error);
  EXPECT_THROW(per_head.KvBlocks(0, -1, 0), Error);
  EXPECT_THROW(per_head.KvBlocks(-1, 0, 0), Error);
  EXPECT_THROW(per_head.KvBlocks(0, 0, 2), Error);
  EXPECT_THROW(per_head.QBlocks(0, 0, 4), Error);
  EXPECT_THROW(per_head.Kind(0, 0, 0, 4), Error);
  const BlockMask batched = BlockMask::Create(PrefixLmMask({1, 2}), 2, 1, 64, 64);
  EXPECT_THROW(batched.KvBlocks(2, 0, 0), Error);
  EXPECT_NO_THROW(batched.KvBlocks(1, 7, 0));
}

TEST(BlockMaskTest, PartialMasksAreKeptOnlyUnderTheBound) {
  // 2 x 8 x (2048 / 16)^2 blocks of a mask no Classify can tell: all of them
  // partial, 16 x 16 bytes each, 8 MiB in all (under the bound): kept.
  const BlockMask kept =
      BlockMask::Create(MaskExpr("(q_idx + kv_idx + b + h) % 2 == 0"), 2, 8, 2048, 2048, 16, 16);
  EXPECT_EQ(kept.num_partial(), 2 * 8 * 128 * 128);
  const uint8_t* tile = kept.PartialKeep(1, 5, 3, 7);
  ASSERT_NE(tile, nullptr);
  EXPECT_EQ(tile[0], (48 + 112 + 1 + 5) % 2 == 0 ? 1 : 0);
  EXPECT_EQ(tile[17], (49 + 113 + 1 + 5) % 2 == 0 ? 1 : 0);
  // 257^2 partial blocks of 64 x 64 bytes are 258 MiB, over the bound: not
  // kept (the kernels evaluate those blocks themselves).
  const int64_t n = 257 * 64;
  static_assert(257 * 257 * 64 * 64 > kMaxPartialTileBytes);
  const BlockMask big =
      BlockMask::Create(MaskExpr("(q_idx + kv_idx) % 2 == 0"), 1, 1, n, n, 64, 64);
  EXPECT_EQ(big.num_partial(), 257 * 257);
  EXPECT_EQ(big.PartialKeep(0, 0, 3, 7), nullptr);
  EXPECT_EQ(BlockMask::Dense(128, 128).PartialKeep(0, 0, 0, 0), nullptr);
}

TEST(BlockMaskTest, DenseIsAllFull) {
  const BlockMask m = BlockMask::Dense(130, 65, 64, 32);
  EXPECT_EQ(m.mask_mod(), nullptr);
  EXPECT_EQ(m.num_q_blocks(), 3);
  EXPECT_EQ(m.num_kv_blocks(), 3);
  EXPECT_EQ(m.num_full(), 9);
  EXPECT_EQ(m.num_partial() + m.num_empty(), 0);
  EXPECT_EQ(m.Sparsity(), 0.0);
  EXPECT_EQ(m.Density(), 1.0);
  const BlockMask::BlockList l = m.KvBlocks(4, 4, 2);
  ASSERT_EQ(l.num_full, 3);
  EXPECT_EQ(l.full[0] + l.full[1] + l.full[2], 0 + 1 + 2);
  EXPECT_EQ(m.QBlocks(0, 0, 1).num_full, 3);
  EXPECT_THROW(BlockMask::Dense(0, 10), Error);
}

TEST(BlockMaskTest, LargeStructuredMasksUseClassify) {
  // 512 x 512 blocks; Classify answers for each without evaluating.
  const int64_t s = 32768, n = s / 64;
  const BlockMask causal = BlockMask::Create(CausalMask(), 1, 1, s, s);
  EXPECT_EQ(causal.num_partial(), n);
  EXPECT_EQ(causal.num_full(), n * (n - 1) / 2);
  EXPECT_EQ(causal.num_empty(), n * (n - 1) / 2);
  const BlockMask::BlockList last = causal.QBlocks(0, 0, n - 1);
  EXPECT_EQ(last.num_full, 0);
  ASSERT_EQ(last.num_partial, 1);
  EXPECT_EQ(last.partial[0], n - 1);
  const BlockMask window = BlockMask::Create(SlidingWindowMask(256, 0), 1, 1, s, s);
  // Full: the 1st to 3rd block below the diagonal; partial: the diagonal and the 4th.
  EXPECT_EQ(window.num_full(), 3 * n - 6);
  EXPECT_EQ(window.num_partial(), 2 * n - 4);
}

TEST(BlockMaskTest, ErrorsNameTheInput) {
  const auto& error = weft::testing::ErrorOf;
  EXPECT_NE(error([] { BlockMask::Create(nullptr, 1, 1, 8, 8); }).find("mask_mod is null"),
            std::string::npos);
  EXPECT_NE(error([] { BlockMask::Create(CausalMask(), 1, 1, 0, 8); }).find("q_len 0"),
            std::string::npos);
  EXPECT_NE(error([] { BlockMask::Create(CausalMask(), 1, 1, 8, 8, 0, 8); }).find("block sizes"),
            std::string::npos);
  EXPECT_NE(error([] { BlockMask::Create(CausalMask(), 0, 1, 8, 8); }).find("batch 0"),
            std::string::npos);
  // The mask validates itself against the sizes.
  const IndexTensor ids{{2, 100}, std::vector<int64_t>(200, 0)};
  EXPECT_NE(error([&] { BlockMask::Create(DocumentMask(ids, ids), 2, 1, 128, 100); })
                .find("document_mask: q_segment_ids has shape [2, 100] but the attention has batch "
                      "2 and q_len 128"),
            std::string::npos);
  // Errors while evaluating blocks on the thread pool reach the caller.
  const IndexTensor small{{1, 50}, std::vector<int64_t>(50, 0)};
  EXPECT_NE(error([&] {
              BlockMask::Create(MaskExpr("t[0, q_idx] == t[0, kv_idx]", {{"t", small}}), 1, 1, 64,
                                64, 16, 16);
            }).find("out of range for tensor 't' of shape [1, 50]"),
            std::string::npos);
}

// Peak resident memory of this process so far (Linux: KiB).
int64_t PeakRssBytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return int64_t{usage.ru_maxrss} * 1024;
}

TEST(BlockMaskTest, HugeSizesAreRefusedAndHugeBlocksClamped) {
  const auto& error = weft::testing::ErrorOf;
  // batch x heads overflowed 64 bits to 0 (a division by zero), and the
  // block product overflowed to a small tile the mask was written past.
  constexpr int64_t k32 = int64_t{1} << 32, kMax = std::numeric_limits<int64_t>::max();
  EXPECT_NE(error([] { BlockMask::Create(CausalMask(), k32, k32, 128, 128); }).find("too many"),
            std::string::npos);
  EXPECT_NE(error([] {
              BlockMask::Create(CausalMask(), kMax, kMax, kMax, kMax, 1, 1);
            }).find("batch 9223372036854775807 x heads"),
            std::string::npos);
  EXPECT_THROW(BlockMask::Dense(kMax, kMax, 1, 1), Error);
  // A block longer than the sequence is one block, kept as the sequence
  // rounded up to 256: the kept mask of a partial block is that size.
  const int64_t huge = int64_t{1} << 33;
  const BlockMask m = BlockMask::Create(CausalMask(), 1, 1, 128, 100, huge, huge);
  EXPECT_EQ(m.q_block(), 256);
  EXPECT_EQ(m.kv_block(), 256);
  EXPECT_EQ(m.num_partial(), 1);
  ExpectMatchesBruteForce(
      m, {"causal", CausalMask(), [](int64_t, int64_t, int64_t q, int64_t kv) { return q >= kv; },
          1, 1});
  EXPECT_EQ(BlockMask::Create(CausalMask(), 1, 1, 100, 100, 128, 128).q_block(), 128);
  const BlockMask widest = BlockMask::Create(CausalMask(), 1, 1, kMax, 64, kMax, kMax);
  EXPECT_EQ(widest.num_q_blocks(), 1);
  EXPECT_EQ(widest.num_kv_blocks(), 1);
  EXPECT_EQ(BlockMask::Dense(100, 100, kMax, kMax).num_full(), 1);
  // 65536 x 65536 blocks of a mask no Classify tells: one block of 4 GiB of
  // mask, found partial a band of rows at a time, never held whole.
  const int64_t s = 65536;
  const BlockMask big = BlockMask::Create(MaskExpr("(q_idx + kv_idx) % 2 == 0"), 1, 1, s, s, s, s);
  EXPECT_EQ(big.num_partial(), 1);
  EXPECT_EQ(big.PartialKeep(0, 0, 0, 0), nullptr);
  EXPECT_LT(PeakRssBytes(), int64_t{2} << 30);
}

TEST(BlockMaskTest, BlocksTooLargeToKeepAreEvaluatedInBands) {
  // 4096 x 8192 bytes of mask (32 MiB) per block: more than is evaluated at
  // once, so the kind comes from bands of rows; the one masked element is in
  // the last band.
  const int64_t q = 4096, kv = 8192;
  auto lambda = [&](std::function<bool(int64_t, int64_t)> f) {
    return LambdaMask([f](int64_t, int64_t, int64_t i, int64_t j) { return f(i, j); });
  };
  const BlockMask partial = BlockMask::Create(
      lambda([&](int64_t i, int64_t j) { return i != q - 1 || j != kv - 1; }), 1, 1, q, kv, q, kv);
  EXPECT_EQ(partial.num_partial(), 1);
  EXPECT_EQ(partial.PartialKeep(0, 0, 0, 0), nullptr);
  const BlockMask full =
      BlockMask::Create(lambda([](int64_t, int64_t) { return true; }), 1, 1, q, kv, q, kv);
  EXPECT_EQ(full.num_full(), 1);
  const BlockMask empty =
      BlockMask::Create(lambda([](int64_t, int64_t) { return false; }), 1, 1, q, kv, q, kv);
  EXPECT_EQ(empty.num_empty(), 1);
}

TEST(BlockMaskTest, ToStringSummarizesAndDrawsSmallMasks) {
  const BlockMask m = BlockMask::Create(CausalMask(), 1, 1, 256, 256, 64, 64);
  const std::string text = m.ToString();
  EXPECT_NE(text.find("q_len=256, kv_len=256, block=64x64, 4x4 blocks per head: 6 full, 4 "
                      "partial, 6 empty, sparsity 37.50%"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("mask: q_idx >= kv_idx"), std::string::npos) << text;
  EXPECT_NE(text.find("  |░   |\n  |█░  |\n  |██░ |\n  |███░|\n"), std::string::npos) << text;
  const std::string big = BlockMask::Create(CausalMask(), 1, 1, 64 * 33, 64).ToString();
  EXPECT_EQ(big.find('|'), std::string::npos) << big;
  EXPECT_NE(BlockMask::Dense(10, 10).ToString().find("none (dense)"), std::string::npos);
}

}  // namespace
}  // namespace weft::kernels
