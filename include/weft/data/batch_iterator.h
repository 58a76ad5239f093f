// Batches for training steps: rows of PackedEpoch in visiting order, epoch
// after epoch (each epoch reshuffled from the seed). A batch may straddle two
// epochs. The position (rows handed out so far) is the iterator's whole
// state, so a checkpoint stores one integer and Seek() resumes exactly.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>

#include "weft/data/packing.h"

namespace weft {

struct BatchIteratorOptions {
  int64_t batch_size = 8;
  int64_t seq_len = 256;
  uint64_t seed = 0;
  // Stop after this many batches (0: never).
  int64_t num_steps = 0;
};

class BatchIterator {
 public:
  BatchIterator(std::shared_ptr<const TokenizedCorpus> corpus, const BatchIteratorOptions& options);

  // False once num_steps batches have been handed out (never when 0).
  bool HasNext() const;
  // The next batch; throws weft::Error past num_steps.
  Batch Next();

  // Rows handed out so far (batches * batch_size).
  int64_t position() const { return position_; }
  // Resume at a position taken from position().
  void Seek(int64_t position);

  int64_t rows_per_epoch() const { return rows_per_epoch_; }
  // The epoch the next row comes from.
  int64_t epoch() const { return position_ / rows_per_epoch_; }
  int64_t steps_done() const { return position_ / options_.batch_size; }

 private:
  const PackedEpoch& Epoch(int64_t epoch);

  std::shared_ptr<const TokenizedCorpus> corpus_;
  BatchIteratorOptions options_;
  int64_t rows_per_epoch_ = 0;
  int64_t position_ = 0;
  std::optional<PackedEpoch> current_;
  int64_t current_epoch_ = -1;
};

}  // namespace weft
