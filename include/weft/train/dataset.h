// The training data a RunConfig describes: its documents, the tokenizer
// (trained on first use and cached), the tokenized corpus, and batch
// iterators over it. The one place where [data] settings are interpreted.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <vector>

#include "weft/data/batch_iterator.h"
#include "weft/data/corpus.h"
#include "weft/data/tokenizer.h"
#include "weft/models/llama_config.h"

namespace weft {

struct Dataset {
  std::vector<Document> documents;  // after max_documents, without the held-out ones
  Tokenizer tokenizer;
  std::shared_ptr<const TokenizedCorpus> corpus;  // `documents`: what the batches hold
  // train.validation_documents of the configured documents (HeldOutDocuments),
  // tokenized alike; none, and a null corpus, without validation.
  std::vector<Document> validation_documents;
  std::shared_ptr<const TokenizedCorpus> validation;
};

// Which of `count` documents are held out for validation when `held` are:
// held indices spread evenly over them (floor((2i + 1) * count / (2 * held))
// for i < held, the middle of each of `held` equal stretches), so a source
// in order (the Bible's books or chapters) gives a sample of all of it, the
// same whatever the seed. 0 <= held < count.
std::vector<int64_t> HeldOutDocuments(int64_t count, int64_t held);

// The config's documents, in source order, cut to data.max_documents:
// "kjv" (by data.kjv_unit), "files" (one per file or per paragraph), or
// "inline" (named "inline#1", …).
std::vector<Document> LoadConfiguredDocuments(const DataConfig& data);

// Documents, then a tokenizer of exactly model.vocab_size pieces trained on
// them (tokenizer_corpus = "data"; all of them, the held-out ones too, so
// holding documents out leaves the vocabulary as it was) or on the whole
// Bible by book (tokenizer_corpus = "kjv"), cached under `cache_dir` (empty:
// the default cache), then the tokenized corpus, and the validation set apart
// (train.validation_documents; refused unless at least one document is left
// to train on). A given `tokenizer` (a fine-tuned
// model's, `weft train --init-from`) is used instead; it may have fewer
// pieces than model.vocab_size (a padded embedding table), not more.
Dataset LoadDataset(const RunConfig& config, const std::filesystem::path& cache_dir = {},
                    std::optional<Tokenizer> tokenizer = std::nullopt);

// Batches of train.batch_size rows of model.seq_len tokens for train.steps
// steps, shuffled from train.seed.
BatchIterator MakeBatchIterator(const Dataset& dataset, const RunConfig& config);

}  // namespace weft
