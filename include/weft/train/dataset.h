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
  std::vector<Document> documents;  // after max_documents
  Tokenizer tokenizer;
  std::shared_ptr<const TokenizedCorpus> corpus;
};

// The config's documents, in source order, cut to data.max_documents:
// "kjv" (by data.kjv_unit), "files" (one per file or per paragraph), or
// "inline" (named "inline#1", …).
std::vector<Document> LoadConfiguredDocuments(const DataConfig& data);

// Documents, then a tokenizer of exactly model.vocab_size pieces trained on
// them (tokenizer_corpus = "data") or on the whole Bible by book
// (tokenizer_corpus = "kjv"), cached under `cache_dir` (empty: the default
// cache), then the tokenized corpus. A given `tokenizer` (a fine-tuned
// model's, `weft train --init-from`) is used instead; it may have fewer
// pieces than model.vocab_size (a padded embedding table), not more.
Dataset LoadDataset(const RunConfig& config, const std::filesystem::path& cache_dir = {},
                    std::optional<Tokenizer> tokenizer = std::nullopt);

// Batches of train.batch_size rows of model.seq_len tokens for train.steps
// steps, shuffled from train.seed.
BatchIterator MakeBatchIterator(const Dataset& dataset, const RunConfig& config);

}  // namespace weft
