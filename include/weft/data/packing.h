// Packing documents into fixed-length rows for causal LM training.
//
// An epoch is a stream: the documents in a seeded order, each framed as
// BOS + tokens + EOS, concatenated, then cut into rows of seq_len tokens
// (the last row padded). For stream position t in a row:
//   tokens[t]      the token;
//   targets[t]     the next token of the same document, loss_mask 1; where the
//                  next token belongs to another document, or t is padding,
//                  targets is pad and loss_mask 0. A document that runs past
//                  the row's end keeps its target (the next row's first token)
//                  so no prediction is lost;
//   segment_ids[t] 1, 2, 3… for the documents in the row, in order; 0 for
//                  padding. A document split across rows continues in another
//                  row as a new segment (it cannot attend to its first part);
//   positions[t]   the offset within the document's part in this row: 0 at
//                  each document start and at each row start.
// Rows are then visited in a seeded order too, so consecutive rows of a long
// document do not fill one batch. Shuffles use our own Fisher–Yates on
// std::mt19937_64 (see shuffle.h), so orders match across standard libraries.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "weft/data/corpus.h"
#include "weft/data/tokenizer.h"

namespace weft {

// B rows of S tokens, row-major [B, S].
struct Batch {
  int64_t batch_size = 0;
  int64_t seq_len = 0;
  std::vector<int32_t> tokens;
  std::vector<int32_t> targets;
  std::vector<float> loss_mask;
  std::vector<int32_t> segment_ids;
  std::vector<int32_t> positions;

  static Batch Zeros(int64_t batch_size, int64_t seq_len);
  // Number of targets that count (sum of loss_mask).
  int64_t num_loss_tokens() const;
};

// Rows [shard_index * B/n, (shard_index + 1) * B/n) of `batch`: the rows of one
// data-parallel shard. Throws weft::Error if B is not divisible by n.
Batch ShardRows(const Batch& batch, int64_t shard_index, int64_t num_shards);

// Documents as framed token sequences (BOS + tokens + EOS), stored flat.
struct TokenizedCorpus {
  std::vector<int32_t> tokens;
  std::vector<int64_t> offsets{0};  // document d is tokens[offsets[d], offsets[d+1])

  int64_t num_documents() const { return static_cast<int64_t>(offsets.size()) - 1; }
  int64_t num_tokens() const { return static_cast<int64_t>(tokens.size()); }
  std::span<const int32_t> document(int64_t d) const;
  // Appends BOS + `ids` + EOS.
  void Add(std::span<const int32_t> ids, int32_t bos_id, int32_t eos_id);
};

TokenizedCorpus TokenizeDocuments(std::span<const Document> documents, const Tokenizer& tokenizer);

// One epoch's packing: the document order, the stream it makes, and the order
// in which rows are visited; any row can be produced on demand.
class PackedEpoch {
 public:
  // The orders come from `seed` and `epoch`; the same pair gives the same
  // epoch. `corpus` must outlive this object.
  PackedEpoch(const TokenizedCorpus& corpus, int64_t seq_len, uint64_t seed, int64_t epoch,
              int32_t pad_id = Tokenizer::kPadId);

  // ceil(corpus tokens / seq_len): the same for every epoch.
  int64_t num_rows() const { return static_cast<int64_t>(row_order_.size()); }
  int64_t seq_len() const { return seq_len_; }
  const std::vector<int64_t>& document_order() const { return document_order_; }
  // Writes the i-th row visited in this epoch into row `b` of `batch`.
  void FillRow(int64_t i, Batch& batch, int64_t b) const;
  // Row `r` of the stream (before row shuffling) into row `b` of `batch`.
  void FillStreamRow(int64_t r, Batch& batch, int64_t b) const;

 private:
  const TokenizedCorpus* corpus_;  // a pointer keeps PackedEpoch assignable
  int64_t seq_len_;
  int32_t pad_id_;
  std::vector<int64_t> document_order_;
  std::vector<int64_t> stream_starts_;  // stream offset of each ordered document, plus the end
  std::vector<int64_t> row_order_;
};

// Seeds of an epoch's two shuffles (documents, rows), mixed from the run seed.
uint64_t EpochSeed(uint64_t seed, int64_t epoch, int which);

}  // namespace weft
