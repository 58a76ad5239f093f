#include "weft/data/packing.h"

#include <algorithm>
#include <numeric>

#include "weft/base/error.h"
#include "weft/base/thread_pool.h"
#include "weft/data/shuffle.h"

namespace weft {
namespace {

// SplitMix64's finalizer: turns (seed, epoch, which) into well-spread seeds.
uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace

Batch Batch::Zeros(int64_t batch_size, int64_t seq_len) {
  WEFT_CHECK(batch_size > 0 && seq_len > 0, "a batch needs positive sizes, got [{}, {}]",
             batch_size, seq_len);
  Batch batch;
  batch.batch_size = batch_size;
  batch.seq_len = seq_len;
  size_t n = static_cast<size_t>(batch_size * seq_len);
  batch.tokens.assign(n, 0);
  batch.targets.assign(n, 0);
  batch.loss_mask.assign(n, 0.0f);
  batch.segment_ids.assign(n, 0);
  batch.positions.assign(n, 0);
  return batch;
}

int64_t Batch::num_loss_tokens() const {
  int64_t count = 0;
  for (float m : loss_mask) count += m != 0.0f;
  return count;
}

Batch ShardRows(const Batch& batch, int64_t shard_index, int64_t num_shards) {
  WEFT_CHECK(num_shards > 0 && shard_index >= 0 && shard_index < num_shards,
             "shard index {} is out of range for {} data-parallel shards", shard_index, num_shards);
  WEFT_CHECK(batch.batch_size % num_shards == 0,
             "batch size {} is not divisible by {} data-parallel shards; choose a batch size that "
             "is a multiple of {}",
             batch.batch_size, num_shards, num_shards);
  int64_t rows = batch.batch_size / num_shards;
  auto begin = static_cast<ptrdiff_t>(shard_index * rows * batch.seq_len);
  auto end = begin + static_cast<ptrdiff_t>(rows * batch.seq_len);
  Batch shard;
  shard.batch_size = rows;
  shard.seq_len = batch.seq_len;
  shard.tokens.assign(batch.tokens.begin() + begin, batch.tokens.begin() + end);
  shard.targets.assign(batch.targets.begin() + begin, batch.targets.begin() + end);
  shard.loss_mask.assign(batch.loss_mask.begin() + begin, batch.loss_mask.begin() + end);
  shard.segment_ids.assign(batch.segment_ids.begin() + begin, batch.segment_ids.begin() + end);
  shard.positions.assign(batch.positions.begin() + begin, batch.positions.begin() + end);
  return shard;
}

std::span<const int32_t> TokenizedCorpus::document(int64_t d) const {
  WEFT_CHECK(d >= 0 && d < num_documents(), "document {} is out of range 0..{}", d,
             num_documents() - 1);
  return std::span<const int32_t>(tokens).subspan(static_cast<size_t>(offsets[d]),
                                                  static_cast<size_t>(offsets[d + 1] - offsets[d]));
}

void TokenizedCorpus::Add(std::span<const int32_t> ids, int32_t bos_id, int32_t eos_id) {
  tokens.push_back(bos_id);
  tokens.insert(tokens.end(), ids.begin(), ids.end());
  tokens.push_back(eos_id);
  offsets.push_back(static_cast<int64_t>(tokens.size()));
}

TokenizedCorpus TokenizeDocuments(std::span<const Document> documents, const Tokenizer& tokenizer) {
  std::vector<std::vector<int32_t>> ids(documents.size());
  ThreadPool::Global().ParallelFor(static_cast<int64_t>(documents.size()), [&](int64_t d, int) {
    ids[d] = tokenizer.Encode(documents[d].text);
  });
  TokenizedCorpus corpus;
  for (const auto& document_ids : ids) {
    corpus.Add(document_ids, tokenizer.bos_id(), tokenizer.eos_id());
  }
  return corpus;
}

uint64_t EpochSeed(uint64_t seed, int64_t epoch, int which) {
  return Mix(Mix(seed) ^ Mix(static_cast<uint64_t>(epoch) * 2 + static_cast<uint64_t>(which)));
}

PackedEpoch::PackedEpoch(const TokenizedCorpus& corpus, int64_t seq_len, uint64_t seed,
                         int64_t epoch, int32_t pad_id)
    : corpus_(&corpus), seq_len_(seq_len), pad_id_(pad_id) {
  WEFT_CHECK(seq_len > 0, "seq_len must be positive, got {}", seq_len);
  WEFT_CHECK(corpus.num_tokens() > 0, "cannot pack an empty corpus; give documents with text");
  document_order_ = ShuffledIndices(corpus.num_documents(), EpochSeed(seed, epoch, 0));
  stream_starts_.reserve(document_order_.size() + 1);
  int64_t offset = 0;
  for (int64_t d : document_order_) {
    stream_starts_.push_back(offset);
    offset += corpus.offsets[d + 1] - corpus.offsets[d];
  }
  stream_starts_.push_back(offset);
  int64_t rows = (offset + seq_len - 1) / seq_len;
  row_order_ = ShuffledIndices(rows, EpochSeed(seed, epoch, 1));
}

void PackedEpoch::FillRow(int64_t i, Batch& batch, int64_t b) const {
  WEFT_CHECK(i >= 0 && i < num_rows(), "row {} is out of range for an epoch of {} rows", i,
             num_rows());
  FillStreamRow(row_order_[i], batch, b);
}

void PackedEpoch::FillStreamRow(int64_t r, Batch& batch, int64_t b) const {
  WEFT_CHECK(batch.seq_len == seq_len_ && b >= 0 && b < batch.batch_size,
             "internal: row {} of a batch [{}, {}] for seq_len {}", b, batch.batch_size,
             batch.seq_len, seq_len_);
  const int64_t row_start = r * seq_len_;
  const int64_t stream_end = stream_starts_.back();
  // The ordered document holding row_start.
  auto k = static_cast<int64_t>(
      std::upper_bound(stream_starts_.begin(), stream_starts_.end(), row_start) -
      stream_starts_.begin() - 1);
  int32_t segment = 0;
  int64_t segment_start = row_start;
  for (int64_t i = 0; i < seq_len_; ++i) {
    const int64_t t = row_start + i;
    const size_t out = static_cast<size_t>(b * seq_len_ + i);
    if (t >= stream_end) {
      batch.tokens[out] = pad_id_;
      batch.targets[out] = pad_id_;
      batch.loss_mask[out] = 0.0f;
      batch.segment_ids[out] = 0;
      batch.positions[out] = 0;
      continue;
    }
    while (t >= stream_starts_[k + 1]) ++k;  // skips zero-length documents too
    if (i == 0 || t == stream_starts_[k]) {
      ++segment;
      segment_start = t;
    }
    const int64_t document_base = corpus_->offsets[document_order_[k]];
    const int64_t within = t - stream_starts_[k];
    batch.tokens[out] = corpus_->tokens[document_base + within];
    const bool has_next = t + 1 < stream_starts_[k + 1];
    batch.targets[out] = has_next ? corpus_->tokens[document_base + within + 1] : pad_id_;
    batch.loss_mask[out] = has_next ? 1.0f : 0.0f;
    batch.segment_ids[out] = segment;
    batch.positions[out] = static_cast<int32_t>(t - segment_start);
  }
}

}  // namespace weft
