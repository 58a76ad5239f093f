#include "weft/data/packing.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "weft/base/error.h"

namespace weft {
namespace {

// Documents of random lengths (some shorter than a row, some several rows
// long) with random token ids above the special ids.
TokenizedCorpus RandomCorpus(uint64_t seed, int num_documents, int max_length) {
  std::mt19937_64 rng(seed);
  TokenizedCorpus corpus;
  for (int d = 0; d < num_documents; ++d) {
    std::vector<int32_t> ids(rng() % max_length);
    for (auto& id : ids) id = 4 + static_cast<int32_t>(rng() % 1000);
    corpus.Add(ids, Tokenizer::kBosId, Tokenizer::kEosId);
  }
  return corpus;
}

// The epoch stream written out in full: token and document of each position.
struct Stream {
  std::vector<int32_t> tokens;
  std::vector<int64_t> document;
};

Stream BuildStream(const TokenizedCorpus& corpus, const std::vector<int64_t>& order) {
  Stream stream;
  for (int64_t d : order) {
    auto ids = corpus.document(d);
    stream.tokens.insert(stream.tokens.end(), ids.begin(), ids.end());
    stream.document.insert(stream.document.end(), ids.size(), d);
  }
  return stream;
}

// The row as the packing rules in packing.h describe it.
void ExpectRowMatchesRules(const Batch& batch, int64_t b, const Stream& stream, int64_t r) {
  const int64_t S = batch.seq_len;
  const auto n = static_cast<int64_t>(stream.tokens.size());
  int32_t segment = 0;
  int32_t position = 0;
  for (int64_t i = 0; i < S; ++i) {
    const int64_t t = r * S + i;
    const size_t at = static_cast<size_t>(b * S + i);
    SCOPED_TRACE(testing::Message() << "row " << r << " column " << i);
    if (t >= n) {
      EXPECT_EQ(batch.tokens[at], Tokenizer::kPadId);
      EXPECT_EQ(batch.segment_ids[at], 0);
      EXPECT_EQ(batch.loss_mask[at], 0.0f);
      continue;
    }
    // A new document, or the row's start, opens a segment at position 0.
    bool opens = i == 0 || stream.document[t] != stream.document[t - 1] ||
                 stream.tokens[t] == Tokenizer::kBosId;
    if (opens) {
      ++segment;
      position = 0;
    } else {
      ++position;
    }
    EXPECT_EQ(batch.tokens[at], stream.tokens[t]);
    EXPECT_EQ(batch.segment_ids[at], segment);
    EXPECT_EQ(batch.positions[at], position);
    bool same_document = t + 1 < n && stream.document[t + 1] == stream.document[t] &&
                         stream.tokens[t + 1] != Tokenizer::kBosId;
    EXPECT_EQ(batch.loss_mask[at], same_document ? 1.0f : 0.0f);
    EXPECT_EQ(batch.targets[at], same_document ? stream.tokens[t + 1] : Tokenizer::kPadId);
  }
}

TEST(PackedEpoch, RowsFollowThePackingRules) {
  for (int64_t seq_len : {7, 32, 100}) {
    TokenizedCorpus corpus = RandomCorpus(static_cast<uint64_t>(seq_len), 23, 90);
    PackedEpoch epoch(corpus, seq_len, /*seed=*/17, /*epoch=*/0);
    Stream stream = BuildStream(corpus, epoch.document_order());
    int64_t expected_rows = (corpus.num_tokens() + seq_len - 1) / seq_len;
    ASSERT_EQ(epoch.num_rows(), expected_rows);
    Batch batch = Batch::Zeros(expected_rows, seq_len);
    for (int64_t r = 0; r < expected_rows; ++r) epoch.FillStreamRow(r, batch, r);
    for (int64_t r = 0; r < expected_rows; ++r) ExpectRowMatchesRules(batch, r, stream, r);
    // Every document contributes len - 1 targets: none lost at row breaks.
    EXPECT_EQ(batch.num_loss_tokens(), corpus.num_tokens() - corpus.num_documents());
  }
}

TEST(PackedEpoch, VisitsEveryRowOnceInASeededOrder) {
  TokenizedCorpus corpus = RandomCorpus(3, 40, 60);
  const int64_t S = 16;
  PackedEpoch epoch(corpus, S, 5, 0);
  const int64_t rows = epoch.num_rows();
  Batch visited = Batch::Zeros(rows, S), stream_rows = Batch::Zeros(rows, S);
  for (int64_t i = 0; i < rows; ++i) {
    epoch.FillRow(i, visited, i);
    epoch.FillStreamRow(i, stream_rows, i);
  }
  // Rows as sequences: the visiting order is a permutation of the stream rows.
  auto as_rows = [&](const Batch& batch) {
    std::vector<std::vector<int32_t>> out;
    for (int64_t r = 0; r < rows; ++r) {
      out.emplace_back(batch.tokens.begin() + r * S, batch.tokens.begin() + (r + 1) * S);
    }
    return out;
  };
  auto a = as_rows(visited), b = as_rows(stream_rows);
  EXPECT_NE(a, b);
  std::sort(a.begin(), a.end());
  std::sort(b.begin(), b.end());
  EXPECT_EQ(a, b);
}

TEST(PackedEpoch, OrdersDependOnSeedAndEpochOnly) {
  TokenizedCorpus corpus = RandomCorpus(4, 30, 20);
  auto order = [&](uint64_t seed, int64_t e) {
    return PackedEpoch(corpus, 8, seed, e).document_order();
  };
  EXPECT_EQ(order(1, 0), order(1, 0));
  EXPECT_NE(order(1, 0), order(1, 1));
  EXPECT_NE(order(1, 0), order(2, 0));
  EXPECT_EQ(PackedEpoch(corpus, 8, 1, 0).num_rows(), PackedEpoch(corpus, 8, 1, 3).num_rows());
  std::vector<int64_t> sorted = order(9, 2);
  std::sort(sorted.begin(), sorted.end());
  for (int64_t d = 0; d < corpus.num_documents(); ++d) EXPECT_EQ(sorted[d], d);
}

TEST(PackedEpoch, SeveralShortDocumentsShareARow) {
  TokenizedCorpus corpus;
  const std::vector<int32_t> a = {10, 11, 12}, b = {20}, c = {30, 31};
  corpus.Add(a, 2, 3);
  corpus.Add(b, 2, 3);
  corpus.Add(c, 2, 3);
  PackedEpoch epoch(corpus, 16, 0, 0);
  ASSERT_EQ(epoch.num_rows(), 1);
  Batch batch = Batch::Zeros(1, 16);
  epoch.FillRow(0, batch, 0);
  // 5 + 3 + 4 = 12 tokens, then 4 padding; three segments, positions restart.
  std::vector<int32_t> segments(batch.segment_ids.begin(), batch.segment_ids.end());
  std::vector<int32_t> lengths;
  for (int64_t d : epoch.document_order()) lengths.push_back(corpus.document(d).size());
  std::vector<int32_t> expected_segments;
  for (int s = 0; s < 3; ++s) expected_segments.insert(expected_segments.end(), lengths[s], s + 1);
  expected_segments.resize(16, 0);
  EXPECT_EQ(segments, expected_segments);
  EXPECT_EQ(batch.num_loss_tokens(), 12 - 3);
  EXPECT_EQ(batch.positions[static_cast<size_t>(lengths[0])], 0);
}

TEST(ShardRows, SplitsRowsContiguously) {
  TokenizedCorpus corpus = RandomCorpus(6, 20, 50);
  PackedEpoch epoch(corpus, 12, 1, 0);
  Batch batch = Batch::Zeros(6, 12);
  for (int64_t b = 0; b < 6; ++b) epoch.FillRow(b, batch, b);
  Batch joined;
  for (int64_t shard = 0; shard < 3; ++shard) {
    Batch part = ShardRows(batch, shard, 3);
    EXPECT_EQ(part.batch_size, 2);
    joined.tokens.insert(joined.tokens.end(), part.tokens.begin(), part.tokens.end());
    joined.targets.insert(joined.targets.end(), part.targets.begin(), part.targets.end());
    joined.loss_mask.insert(joined.loss_mask.end(), part.loss_mask.begin(), part.loss_mask.end());
    joined.segment_ids.insert(joined.segment_ids.end(), part.segment_ids.begin(),
                              part.segment_ids.end());
    joined.positions.insert(joined.positions.end(), part.positions.begin(), part.positions.end());
  }
  EXPECT_EQ(joined.tokens, batch.tokens);
  EXPECT_EQ(joined.targets, batch.targets);
  EXPECT_EQ(joined.loss_mask, batch.loss_mask);
  EXPECT_EQ(joined.segment_ids, batch.segment_ids);
  EXPECT_EQ(joined.positions, batch.positions);
  try {
    ShardRows(batch, 0, 4);
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("not divisible by 4"), std::string::npos);
  }
  EXPECT_THROW(ShardRows(batch, 3, 3), Error);
}

}  // namespace
}  // namespace weft
