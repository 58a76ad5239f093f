// Built-in masks against their scalar formulas, Classify() against brute
// force (it must be exact whenever it answers), and/or combinations, the
// expression round trip of ToString()/Tensors(), and Validate() messages.
#include "weft/kernels/mask_mod.h"

#include <gtest/gtest.h>

#include <functional>
#include <random>

#include "weft/base/error.h"

namespace weft::kernels {
namespace {

using Formula = std::function<bool(int64_t b, int64_t h, int64_t q, int64_t kv)>;

struct Named {
  std::string name;
  MaskModPtr mask;
  Formula formula;
};

int64_t FloorDiv(int64_t a, int64_t b) {
  const int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

IndexTensor RandomSegments(std::mt19937& rng, int64_t batch, int64_t len, bool sorted) {
  IndexTensor t{{batch, len}, {}};
  for (int64_t b = 0; b < batch; ++b) {
    int64_t id = std::uniform_int_distribution<int64_t>(0, 3)(rng);
    for (int64_t i = 0; i < len; ++i) {
      if (sorted) {
        if (rng() % 23 == 0) id += 1 + rng() % 2;  // documents of ~23 tokens
        t.values.push_back(id);
      } else {
        t.values.push_back(std::uniform_int_distribution<int64_t>(0, 2)(rng));
      }
    }
  }
  return t;
}

// Every kind of mask on random parameters, for batch 3, sequences up to 160.
std::vector<Named> RandomMasks(std::mt19937& rng, int64_t q_len = 160, int64_t kv_len = 170) {
  std::vector<Named> masks;
  const int64_t offset = std::uniform_int_distribution<int64_t>(-40, 40)(rng);
  masks.push_back({"causal", CausalMask(offset),
                   [=](int64_t, int64_t, int64_t q, int64_t kv) { return q + offset >= kv; }});
  masks.push_back(
      {"causal0", CausalMask(), [](int64_t, int64_t, int64_t q, int64_t kv) { return q >= kv; }});
  const int64_t left = rng() % 40, right = rng() % 10;
  masks.push_back(
      {"sliding", SlidingWindowMask(left, right),
       [=](int64_t, int64_t, int64_t q, int64_t kv) { return q - left <= kv && kv <= q + right; }});
  const int64_t neg_right = -1 - static_cast<int64_t>(rng() % 3);  // strictly in the past
  masks.push_back({"sliding_past", SlidingWindowMask(left + 3, neg_right),
                   [=](int64_t, int64_t, int64_t q, int64_t kv) {
                     return q - (left + 3) <= kv && kv <= q + neg_right;
                   }});
  std::vector<int64_t> prefix = {static_cast<int64_t>(rng() % 80), 0,
                                 static_cast<int64_t>(rng() % 200)};
  masks.push_back(
      {"prefix_lm", PrefixLmMask(prefix),
       [=](int64_t b, int64_t, int64_t q, int64_t kv) { return kv < prefix[b] || q >= kv; }});
  const int64_t chunk = 1 + rng() % 50;
  masks.push_back(
      {"chunked", ChunkedCausalMask(chunk), [=](int64_t, int64_t, int64_t q, int64_t kv) {
         return FloorDiv(q, chunk) == FloorDiv(kv, chunk) && q >= kv;
       }});
  for (bool sorted : {true, false}) {
    auto qs = std::make_shared<IndexTensor>(RandomSegments(rng, 3, q_len, sorted));
    auto ks = std::make_shared<IndexTensor>(RandomSegments(rng, 3, kv_len, sorted));
    masks.push_back({sorted ? "document_sorted" : "document_random", DocumentMask(*qs, *ks),
                     [=](int64_t b, int64_t, int64_t q, int64_t kv) {
                       return qs->values[b * q_len + q] == ks->values[b * kv_len + kv];
                     }});
  }
  // Segment ids shared by every batch row ([1, S]).
  auto qs = std::make_shared<IndexTensor>(RandomSegments(rng, 1, q_len, true));
  auto ks = std::make_shared<IndexTensor>(RandomSegments(rng, 1, kv_len, true));
  masks.push_back(
      {"document_broadcast", DocumentMask(*qs, *ks),
       [=](int64_t, int64_t, int64_t q, int64_t kv) { return qs->values[q] == ks->values[kv]; }});
  masks.push_back({"expr", MaskExpr("(q_idx + h) % 3 != 0 && kv_idx <= q_idx + b"),
                   [](int64_t b, int64_t h, int64_t q, int64_t kv) {
                     return (q + h) % 3 != 0 && kv <= q + b;
                   }});
  Formula lambda = [](int64_t b, int64_t h, int64_t q, int64_t kv) { return (q ^ kv) % 5 != b; };
  masks.push_back({"lambda", LambdaMask(lambda, "xor"), lambda});
  return masks;
}

// And/or combinations of random masks.
std::vector<Named> RandomCombinations(std::mt19937& rng, const std::vector<Named>& base) {
  std::vector<Named> out;
  for (int i = 0; i < 12; ++i) {
    const int n = 1 + rng() % 3;
    std::vector<MaskModPtr> parts;
    std::vector<Formula> formulas;
    std::string name = i % 2 ? "or(" : "and(";
    for (int k = 0; k < n; ++k) {
      const Named& m = base[rng() % base.size()];
      parts.push_back(m.mask);
      formulas.push_back(m.formula);
      name += m.name + ",";
    }
    name += ")";
    const bool is_and = i % 2 == 0;
    out.push_back({name, is_and ? AndMasks(parts) : OrMasks(parts),
                   [=](int64_t b, int64_t h, int64_t q, int64_t kv) {
                     for (const Formula& f : formulas) {
                       if (f(b, h, q, kv) != is_and) return !is_and;
                     }
                     return is_and;
                   }});
  }
  return out;
}

void ExpectEvaluateMatches(const Named& m, std::mt19937& rng, int trials, int64_t q_len = 160,
                           int64_t kv_len = 170) {
  const int64_t sizes[] = {1, 2, 15, 16, 17, 63, 64, 65};
  for (int t = 0; t < trials; ++t) {
    const int64_t nq = std::min(sizes[rng() % 8], q_len), nk = std::min(sizes[rng() % 8], kv_len);
    const int64_t q0 = rng() % (q_len - nq + 1), k0 = rng() % (kv_len - nk + 1);
    const int64_t b = rng() % 3, h = rng() % 4, ld = nk + rng() % 4;
    std::vector<uint8_t> keep(nq * ld, 9);
    m.mask->Evaluate(b, h, q0, nq, k0, nk, keep.data(), ld);
    for (int64_t i = 0; i < nq; ++i) {
      for (int64_t j = 0; j < ld; ++j) {
        const uint8_t expected = j < nk ? m.formula(b, h, q0 + i, k0 + j) : 9;
        ASSERT_EQ(keep[i * ld + j], expected)
            << m.name << " b=" << b << " h=" << h << " q=" << q0 + i << " kv=" << k0 + j;
      }
    }
  }
}

// Classify over random blocks: exact whenever it answers. Returns how often
// it answered.
int ExpectClassifyExact(const Named& m, std::mt19937& rng, int trials, int64_t q_len = 160,
                        int64_t kv_len = 170) {
  int answered = 0;
  for (int t = 0; t < trials; ++t) {
    int64_t q0 = rng() % q_len, q1 = q0 + 1 + rng() % std::min<int64_t>(70, q_len - q0);
    int64_t k0 = rng() % kv_len, k1 = k0 + 1 + rng() % std::min<int64_t>(70, kv_len - k0);
    const int64_t b = rng() % 3, h = rng() % 4;
    const std::optional<BlockKind> kind = m.mask->Classify(b, h, q0, q1, k0, k1);
    if (!kind) continue;
    ++answered;
    int64_t kept = 0;
    for (int64_t q = q0; q < q1; ++q) {
      for (int64_t kv = k0; kv < k1; ++kv) kept += m.formula(b, h, q, kv);
    }
    const int64_t n = (q1 - q0) * (k1 - k0);
    const BlockKind truth = kept == 0   ? BlockKind::kEmpty
                            : kept == n ? BlockKind::kFull
                                        : BlockKind::kPartial;
    if (*kind != truth) {
      ADD_FAILURE() << m.name << " block q[" << q0 << "," << q1 << ") kv[" << k0 << "," << k1
                    << ") b=" << b << ": Classify says " << static_cast<int>(*kind)
                    << ", brute force " << static_cast<int>(truth);
      return answered;
    }
  }
  return answered;
}

TEST(MaskModTest, EvaluateMatchesTheFormula) {
  for (uint32_t seed = 0; seed < 4; ++seed) {
    std::mt19937 rng(100 + seed);
    for (const Named& m : RandomMasks(rng)) ExpectEvaluateMatches(m, rng, 40);
  }
}

TEST(MaskModTest, ClassifyIsExactWhenItAnswers) {
  for (uint32_t seed = 0; seed < 4; ++seed) {
    std::mt19937 rng(200 + seed);
    for (const Named& m : RandomMasks(rng)) {
      const int answered = ExpectClassifyExact(m, rng, 300);
      // Structural masks always answer; documents and expressions (by
      // interval analysis) answer for some blocks; lambdas never.
      if (m.name.rfind("causal", 0) == 0 || m.name.rfind("sliding", 0) == 0 ||
          m.name == "prefix_lm" || m.name == "chunked") {
        EXPECT_EQ(answered, 300) << m.name;
      }
      if (m.name == "document_sorted" || m.name == "document_broadcast") {
        EXPECT_GT(answered, 30) << m.name;
      }
      if (m.name == "expr") {
        EXPECT_GT(answered, 30) << m.name;
      }
      if (m.name == "lambda") {
        EXPECT_EQ(answered, 0) << m.name;
      }
    }
  }
}

TEST(MaskModTest, DocumentClassifyUsesSegmentRanges) {
  // ids 0..3 in runs of 10 for q and kv: a 10x10 block inside one document is
  // full, blocks of different documents are empty, straddling blocks partial
  // or unknown but never called full/empty.
  IndexTensor ids{{1, 40}, {}};
  for (int64_t i = 0; i < 40; ++i) ids.values.push_back(i / 10);
  const MaskModPtr m = DocumentMask(ids, ids);
  EXPECT_EQ(m->Classify(0, 0, 10, 20, 10, 20), BlockKind::kFull);
  EXPECT_EQ(m->Classify(5, 7, 12, 18, 11, 19), BlockKind::kFull);  // batch broadcast
  EXPECT_EQ(m->Classify(0, 0, 0, 10, 20, 40), BlockKind::kEmpty);
  EXPECT_EQ(m->Classify(0, 0, 5, 15, 10, 20), std::nullopt);
  // Unsorted ids whose ranges interleave: cannot tell (1,3 vs 2).
  IndexTensor q{{1, 2}, {1, 3}}, kv{{1, 2}, {2, 2}};
  EXPECT_EQ(DocumentMask(q, kv)->Classify(0, 0, 0, 2, 0, 2), std::nullopt);
  // Outside the ids: Classify cannot tell, Evaluate explains.
  EXPECT_EQ(m->Classify(0, 0, 30, 41, 0, 10), std::nullopt);
  std::vector<uint8_t> keep(11 * 10);
  try {
    m->Evaluate(0, 0, 30, 11, 0, 10, keep.data(), 10);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(
        std::string(e.what()).find("positions [30, 41) are outside q_segment_ids of shape [1, 40]"),
        std::string::npos)
        << e.what();
  }
}

TEST(MaskModTest, AndOrCombinationsMatchAndStayExact) {
  for (uint32_t seed = 0; seed < 3; ++seed) {
    std::mt19937 rng(300 + seed);
    const std::vector<Named> base = RandomMasks(rng);
    for (const Named& m : RandomCombinations(rng, base)) {
      ExpectEvaluateMatches(m, rng, 25);
      ExpectClassifyExact(m, rng, 150);
    }
  }
  // and(causal, anti-causal) is empty although each part is partial: Classify
  // must not guess "partial" from two partial parts.
  const MaskModPtr both = AndMasks({CausalMask(), SlidingWindowMask(0, 1000)});
  EXPECT_EQ(both->Classify(0, 0, 0, 8, 0, 8), std::nullopt);
  const MaskModPtr disjoint = AndMasks({CausalMask(-5), SlidingWindowMask(-6, 1000)});
  EXPECT_EQ(disjoint->Classify(0, 0, 0, 64, 64, 128), BlockKind::kEmpty);
  EXPECT_EQ(AndMasks({CausalMask(), CausalMask(100)})->Classify(0, 0, 0, 8, 0, 8),
            BlockKind::kPartial);
  EXPECT_EQ(OrMasks({CausalMask(), CausalMask(-100)})->Classify(0, 0, 0, 8, 0, 8),
            BlockKind::kPartial);
  EXPECT_EQ(OrMasks({CausalMask(), CausalMask(100)})->Classify(0, 0, 0, 8, 0, 8), BlockKind::kFull);
  EXPECT_THROW(AndMasks({}), Error);
  EXPECT_THROW(OrMasks({CausalMask(), nullptr}), Error);
}

TEST(MaskModTest, ToStringParsesBackToTheSameMask) {
  std::mt19937 rng(400);
  std::vector<Named> masks = RandomMasks(rng);
  masks.pop_back();  // the lambda cannot be written down
  // Two document masks with different ids share tensor names: the combined
  // expression must rename one pair.
  std::vector<Named> combos = RandomCombinations(rng, masks);
  masks.insert(masks.end(), combos.begin(), combos.end());
  masks.push_back(
      {"two_documents", AndMasks({masks[6].mask, masks[7].mask, masks[6].mask}),
       [f = masks[6].formula, g = masks[7].formula](int64_t b, int64_t h, int64_t q, int64_t kv) {
         return f(b, h, q, kv) && g(b, h, q, kv);
       }});
  for (const Named& m : masks) {
    const std::string text = m.mask->ToString();
    const MaskModPtr parsed = MaskExpr(text, m.mask->Tensors());
    EXPECT_EQ(parsed->ToString(), text);
    ExpectEvaluateMatches({m.name + " as '" + text + "'", parsed, m.formula}, rng, 20);
  }
  const std::string two = masks.back().mask->ToString();
  EXPECT_NE(two.find("q_segment_ids_2"), std::string::npos) << two;
  EXPECT_EQ(masks.back().mask->Tensors().size(), 4u) << two;  // the repeated mask adds none
  EXPECT_EQ(CausalMask()->ToString(), "q_idx >= kv_idx");
  EXPECT_EQ(CausalMask(-3)->ToString(), "q_idx - 3 >= kv_idx");
  EXPECT_EQ(SlidingWindowMask(4, 0)->ToString(), "q_idx - 4 <= kv_idx && kv_idx <= q_idx");
  EXPECT_EQ(DocumentMask({{2, 1}, {0, 0}}, {{2, 1}, {0, 0}})->ToString(),
            "q_segment_ids[b, q_idx] == kv_segment_ids[b, kv_idx]");
  EXPECT_EQ(ChunkedCausalMask(4)->ToString(), "q_idx / 4 == kv_idx / 4 && q_idx >= kv_idx");
}

TEST(MaskModTest, LambdaMasksSayTheyCannotBeSerialized) {
  const MaskModPtr m =
      LambdaMask([](int64_t, int64_t, int64_t q, int64_t kv) { return q > kv; }, "strictly causal");
  EXPECT_EQ(m->ToString(), "<lambda: strictly causal>");
  EXPECT_THROW(MaskExpr(m->ToString()), Error);
  EXPECT_THROW(MaskExpr(AndMasks({CausalMask(), m})->ToString()), Error);
  EXPECT_THROW(LambdaMask(nullptr), Error);
}

std::string ValidateError(const MaskModPtr& m, int64_t batch, int64_t heads, int64_t q_len,
                          int64_t kv_len) {
  try {
    m->Validate(batch, heads, q_len, kv_len);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(MaskModTest, ValidateNamesTheInputAndTheFix) {
  const IndexTensor q{{2, 100}, std::vector<int64_t>(200, 0)};
  const IndexTensor kv{{2, 128}, std::vector<int64_t>(256, 0)};
  const MaskModPtr doc = DocumentMask(q, kv);
  EXPECT_EQ(ValidateError(doc, 2, 4, 100, 128), "");
  EXPECT_EQ(ValidateError(doc, 2, 4, 128, 128),
            "document_mask: q_segment_ids has shape [2, 100] but the attention has batch 2 and "
            "q_len 128; pass segment ids of shape [B, Sq] (or [1, Sq] for every batch row)");
  EXPECT_NE(ValidateError(doc, 3, 4, 100, 128)
                .find("q_segment_ids has shape [2, 100] but the attention has batch 3"),
            std::string::npos);
  EXPECT_NE(ValidateError(doc, 2, 4, 100, 64).find("kv_segment_ids has shape [2, 128]"),
            std::string::npos);
  EXPECT_EQ(
      ValidateError(DocumentMask({{1, 100}, std::vector<int64_t>(100, 0)}, kv), 2, 1, 100, 128),
      "");
  EXPECT_THROW(DocumentMask({{100}, std::vector<int64_t>(100, 0)}, kv), Error);    // rank 1
  EXPECT_THROW(DocumentMask({{2, 100}, std::vector<int64_t>(10, 0)}, kv), Error);  // size

  const MaskModPtr prefix = PrefixLmMask({3, 4});
  EXPECT_EQ(ValidateError(prefix, 2, 1, 10, 10), "");
  EXPECT_EQ(ValidateError(prefix, 3, 1, 10, 10),
            "prefix_lm_mask: prefix_lengths has 2 entries but the attention has batch 3; pass one "
            "prefix length per batch row (or one for all)");
  EXPECT_EQ(ValidateError(PrefixLmMask({5}), 8, 1, 10, 10), "");
  EXPECT_THROW(PrefixLmMask({}), Error);
  EXPECT_THROW(PrefixLmMask({3, -1}), Error);
  EXPECT_THROW(ChunkedCausalMask(0), Error);
  EXPECT_THROW(CausalMask(int64_t{1} << 50), Error);
  // Composite masks validate their parts.
  EXPECT_NE(ValidateError(AndMasks({CausalMask(), prefix}), 3, 1, 10, 10).find("prefix_lengths"),
            std::string::npos);
}

}  // namespace
}  // namespace weft::kernels
