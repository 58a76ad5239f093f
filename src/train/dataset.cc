#include "weft/train/dataset.h"

#include "weft/base/error.h"
#include "weft/data/kjv.h"

namespace weft {

std::vector<Document> LoadConfiguredDocuments(const DataConfig& data) {
  std::vector<Document> documents;
  if (data.source == "kjv") {
    documents = LoadKjvBible(ParseKjvUnit(data.kjv_unit, "data.kjv_unit"));
  } else if (data.source == "files") {
    documents = LoadTextFiles(data.files, {.split_on_blank_lines = data.split_on_blank_lines});
  } else if (data.source == "inline") {
    for (size_t i = 0; i < data.documents.size(); ++i) {
      CheckUtf8(data.documents[i], fmt::format("data.documents[{}]", i));
      documents.push_back({fmt::format("inline#{}", i + 1), data.documents[i]});
    }
  } else {
    Fail("data.source '{}' is not one of \"kjv\", \"files\", \"inline\"", data.source);
  }
  if (data.max_documents > 0 && static_cast<int64_t>(documents.size()) > data.max_documents) {
    documents.resize(static_cast<size_t>(data.max_documents));
  }
  WEFT_CHECK(!documents.empty(),
             "the [data] section yields no documents (source \"{}\"); check "
             "the files or documents it names",
             data.source);
  return documents;
}

std::vector<int64_t> HeldOutDocuments(int64_t count, int64_t held) {
  WEFT_INTERNAL_CHECK(held >= 0 && held < count, "holding {} of {} documents out", held, count);
  std::vector<int64_t> out;
  for (int64_t i = 0; i < held; ++i) {
    // (2i + 1) * count < 2 * held * count: no overflow for any vector's size.
    out.push_back(static_cast<int64_t>((static_cast<__int128>(2 * i + 1) * count) / (2 * held)));
  }
  return out;
}

Dataset LoadDataset(const RunConfig& config, const std::filesystem::path& cache_dir,
                    std::optional<Tokenizer> given) {
  std::vector<Document> documents = LoadConfiguredDocuments(config.data);
  if (given) {
    WEFT_CHECK(given->vocab_size() <= config.model.vocab_size,
               "{}: the model's tokenizer has {} pieces but model.vocab_size is only {}",
               config.source, given->vocab_size(), config.model.vocab_size);
  }
  TokenizerOptions options;
  options.vocab_size = static_cast<int>(config.model.vocab_size);
  options.cache_dir = cache_dir;
  Tokenizer tokenizer = given ? std::move(*given)
                        : config.data.tokenizer_corpus == "kjv"
                            ? Tokenizer::TrainOrLoad(LoadKjvBible(KjvUnit::kBook), options)
                            : Tokenizer::TrainOrLoad(documents, options);
  WEFT_CHECK(given || tokenizer.vocab_size() == config.model.vocab_size,
             "{}: the tokenizer has {} pieces but model.vocab_size is {}", config.source,
             tokenizer.vocab_size(), config.model.vocab_size);
  const int64_t count = static_cast<int64_t>(documents.size());
  const int64_t held = config.train.validation_documents;
  WEFT_CHECK(held < count,
             "{}: train.validation_documents = {} holds out every one of the {} documents the "
             "[data] section (or --data) yields, leaving none to train on; hold out fewer (a few "
             "are enough to measure the validation loss; weft train --validation-documents N), "
             "or 0 for no validation",
             config.source, held, count);
  std::vector<Document> trained, held_out;
  if (held > 0) {
    const std::vector<int64_t> out = HeldOutDocuments(count, held);
    size_t next = 0;
    for (int64_t d = 0; d < count; ++d) {
      const bool is_held = next < out.size() && out[next] == d;
      if (is_held) ++next;
      (is_held ? held_out : trained).push_back(std::move(documents[static_cast<size_t>(d)]));
    }
  } else {
    trained = std::move(documents);
  }
  auto corpus = std::make_shared<const TokenizedCorpus>(TokenizeDocuments(trained, tokenizer));
  std::shared_ptr<const TokenizedCorpus> validation;
  if (!held_out.empty()) {
    validation = std::make_shared<const TokenizedCorpus>(TokenizeDocuments(held_out, tokenizer));
  }
  return Dataset{std::move(trained), std::move(tokenizer), std::move(corpus), std::move(held_out),
                 std::move(validation)};
}

BatchIterator MakeBatchIterator(const Dataset& dataset, const RunConfig& config) {
  return BatchIterator(dataset.corpus, {.batch_size = config.train.batch_size,
                                        .seq_len = config.model.seq_len,
                                        .seed = config.train.seed,
                                        .num_steps = config.train.steps});
}

}  // namespace weft
