#include "weft/data/batch_iterator.h"

#include "weft/base/error.h"

namespace weft {

BatchIterator::BatchIterator(std::shared_ptr<const TokenizedCorpus> corpus,
                             const BatchIteratorOptions& options)
    : corpus_(std::move(corpus)), options_(options) {
  WEFT_INTERNAL_CHECK(corpus_ != nullptr, "BatchIterator without a corpus");
  WEFT_CHECK(options.batch_size > 0, "batch_size must be positive, got {}", options.batch_size);
  WEFT_CHECK(options.seq_len > 0, "seq_len must be positive, got {}", options.seq_len);
  WEFT_CHECK(options.num_steps >= 0, "num_steps must not be negative, got {}", options.num_steps);
  rows_per_epoch_ = Epoch(0).num_rows();
}

const PackedEpoch& BatchIterator::Epoch(int64_t epoch) {
  if (epoch != current_epoch_) {
    current_.emplace(*corpus_, options_.seq_len, options_.seed, epoch);
    current_epoch_ = epoch;
  }
  return *current_;
}

bool BatchIterator::HasNext() const {
  return options_.num_steps == 0 || steps_done() < options_.num_steps;
}

Batch BatchIterator::Next() {
  WEFT_CHECK(HasNext(), "the batch iterator is exhausted after {} steps", options_.num_steps);
  Batch batch = Batch::Zeros(options_.batch_size, options_.seq_len);
  for (int64_t b = 0; b < options_.batch_size; ++b, ++position_) {
    Epoch(position_ / rows_per_epoch_).FillRow(position_ % rows_per_epoch_, batch, b);
  }
  return batch;
}

void BatchIterator::Seek(int64_t position) {
  WEFT_CHECK(position >= 0 && position % options_.batch_size == 0,
             "cannot resume the batch iterator at row {}: it must be a non-negative multiple of "
             "batch_size {} (was the checkpoint written with another batch size?)",
             position, options_.batch_size);
  position_ = position;
}

}  // namespace weft
