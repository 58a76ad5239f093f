#include "weft/data/batch_iterator.h"

#include <gtest/gtest.h>

#include <random>

#include "weft/base/error.h"

namespace weft {
namespace {

std::shared_ptr<const TokenizedCorpus> RandomCorpus(uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto corpus = std::make_shared<TokenizedCorpus>();
  for (int d = 0; d < 15; ++d) {
    std::vector<int32_t> ids(1 + rng() % 40);
    for (auto& id : ids) id = 4 + static_cast<int32_t>(rng() % 500);
    corpus->Add(ids, Tokenizer::kBosId, Tokenizer::kEosId);
  }
  return corpus;
}

std::vector<int32_t> Row(const Batch& batch, int64_t b) {
  return {batch.tokens.begin() + b * batch.seq_len, batch.tokens.begin() + (b + 1) * batch.seq_len};
}

TEST(BatchIterator, WalksEpochsInOrderAcrossBatchBoundaries) {
  auto corpus = RandomCorpus(1);
  const int64_t rows = (corpus->num_tokens() + 9) / 10;
  int64_t B = 3;
  while (rows % B == 0) ++B;  // a batch then straddles two epochs
  BatchIteratorOptions options{.batch_size = B, .seq_len = 10, .seed = 77};
  BatchIterator iterator(corpus, options);
  ASSERT_EQ(iterator.rows_per_epoch(), rows);

  // The reference: rows of epoch 0, then of epoch 1, in their visiting order.
  std::vector<std::vector<int32_t>> expected;
  for (int64_t e = 0; e < 2; ++e) {
    PackedEpoch epoch(*corpus, 10, 77, e);
    Batch all = Batch::Zeros(rows, 10);
    for (int64_t i = 0; i < rows; ++i) epoch.FillRow(i, all, i);
    for (int64_t i = 0; i < rows; ++i) expected.push_back(Row(all, i));
  }
  std::vector<std::vector<int32_t>> got;
  while (static_cast<int64_t>(got.size()) + B <= 2 * rows) {
    Batch batch = iterator.Next();
    for (int64_t b = 0; b < B; ++b) got.push_back(Row(batch, b));
  }
  expected.resize(got.size());
  EXPECT_EQ(got, expected);
  EXPECT_EQ(iterator.epoch(), 1);
  EXPECT_NE(std::vector(expected.begin(), expected.begin() + rows / 2),
            std::vector(expected.begin() + rows, expected.begin() + rows + rows / 2))
      << "epochs should be reshuffled";
}

TEST(BatchIterator, SeekResumesExactly) {
  auto corpus = RandomCorpus(2);
  BatchIteratorOptions options{.batch_size = 4, .seq_len = 8, .seed = 5};
  BatchIterator straight(corpus, options);
  for (int step = 0; step < 7; ++step) straight.Next();
  int64_t position = straight.position();
  EXPECT_EQ(position, 28);
  EXPECT_EQ(straight.steps_done(), 7);

  BatchIterator resumed(corpus, options);
  resumed.Seek(position);
  for (int step = 0; step < 20; ++step) {
    Batch a = straight.Next(), b = resumed.Next();
    ASSERT_EQ(a.tokens, b.tokens) << step;
    ASSERT_EQ(a.targets, b.targets) << step;
    ASSERT_EQ(a.loss_mask, b.loss_mask) << step;
    ASSERT_EQ(a.segment_ids, b.segment_ids) << step;
    ASSERT_EQ(a.positions, b.positions) << step;
  }
  EXPECT_THROW(resumed.Seek(6), Error);  // not a multiple of batch_size
  EXPECT_THROW(resumed.Seek(-4), Error);
}

TEST(BatchIterator, StopsAfterNumSteps) {
  auto corpus = RandomCorpus(3);
  BatchIterator iterator(corpus, {.batch_size = 2, .seq_len = 16, .seed = 1, .num_steps = 3});
  int steps = 0;
  while (iterator.HasNext()) {
    Batch batch = iterator.Next();
    EXPECT_EQ(batch.batch_size, 2);
    EXPECT_GT(batch.num_loss_tokens(), 0);
    ++steps;
  }
  EXPECT_EQ(steps, 3);
  EXPECT_THROW(iterator.Next(), Error);
}

TEST(BatchIterator, IsAssignable) {
  auto corpus = RandomCorpus(5);
  BatchIterator iterator(corpus, {.batch_size = 2, .seq_len = 16, .seed = 1});
  iterator.Next();
  BatchIterator restarted(corpus, {.batch_size = 2, .seq_len = 16, .seed = 1});
  Batch first = restarted.Next();
  iterator = BatchIterator(corpus, {.batch_size = 2, .seq_len = 16, .seed = 1});
  EXPECT_EQ(iterator.Next().tokens, first.tokens);
}

TEST(BatchIterator, DifferentSeedsGiveDifferentBatches) {
  auto corpus = RandomCorpus(4);
  BatchIterator a(corpus, {.batch_size = 2, .seq_len = 16, .seed = 1});
  BatchIterator b(corpus, {.batch_size = 2, .seq_len = 16, .seed = 2});
  EXPECT_NE(a.Next().tokens, b.Next().tokens);
}

}  // namespace
}  // namespace weft
