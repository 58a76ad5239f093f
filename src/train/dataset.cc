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
  auto corpus = std::make_shared<const TokenizedCorpus>(TokenizeDocuments(documents, tokenizer));
  return Dataset{std::move(documents), std::move(tokenizer), std::move(corpus)};
}

BatchIterator MakeBatchIterator(const Dataset& dataset, const RunConfig& config) {
  return BatchIterator(dataset.corpus, {.batch_size = config.train.batch_size,
                                        .seq_len = config.model.seq_len,
                                        .seed = config.train.seed,
                                        .num_steps = config.train.steps});
}

}  // namespace weft
