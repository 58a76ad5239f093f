#include "weft/data/tokenizer.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <algorithm>
#include <system_error>
#include <unordered_map>

#include "weft/base/atomic_file.h"
#include "weft/base/data_files.h"
#include "weft/base/env.h"
#include "weft/base/error.h"
#include "weft/data/shuffle.h"

namespace weft {
namespace {

// Bump when the training recipe changes, so old cache files are not reused.
constexpr std::string_view kRecipeVersion = "weft-spm-bpe-v1";
constexpr uint64_t kSampleSeed = 0x5745465453504d31;  // "WEFTSPM1"
// SentencePiece skips training sentences longer than max_sentence_length.
constexpr size_t kMaxSentenceBytes = 4096;
constexpr int kMinVocabSize = 4 + 256 + 1 + 16;

class Fnv1a64 {
 public:
  void Add(std::string_view bytes) {
    for (unsigned char c : bytes) hash_ = (hash_ ^ c) * 0x100000001b3ULL;
  }
  void AddInt(uint64_t value) {
    for (int i = 0; i < 8; ++i) Add(std::string_view(reinterpret_cast<char*>(&value) + i, 1));
  }
  uint64_t value() const { return hash_; }

 private:
  uint64_t hash_ = 0xcbf29ce484222325ULL;
};

// Splits documents into lines, chunks over-long lines at UTF-8 boundaries.
std::vector<std::string> TrainingSentences(std::span<const Document> corpus, int64_t max_count) {
  std::vector<std::string> lines;
  for (const auto& document : corpus) {
    std::string_view text = document.text;
    size_t start = 0;
    while (start <= text.size()) {
      size_t end = text.find('\n', start);
      if (end == std::string_view::npos) end = text.size();
      std::string_view line = text.substr(start, end - start);
      while (!line.empty()) {
        size_t take = std::min(line.size(), kMaxSentenceBytes);
        while (take < line.size() && take > 0 &&
               (static_cast<unsigned char>(line[take]) & 0xC0) == 0x80) {
          --take;
        }
        lines.emplace_back(line.substr(0, take));
        line.remove_prefix(take);
      }
      start = end + 1;
    }
  }
  if (static_cast<int64_t>(lines.size()) <= max_count) return lines;
  std::vector<int64_t> order = ShuffledIndices(static_cast<int64_t>(lines.size()), kSampleSeed);
  order.resize(static_cast<size_t>(max_count));
  std::sort(order.begin(), order.end());
  std::vector<std::string> sample;
  sample.reserve(order.size());
  for (int64_t i : order) sample.push_back(std::move(lines[static_cast<size_t>(i)]));
  return sample;
}

class VectorSentenceIterator : public sentencepiece::SentenceIterator {
 public:
  explicit VectorSentenceIterator(const std::vector<std::string>& sentences)
      : sentences_(sentences) {}
  bool done() const override { return index_ >= sentences_.size(); }
  void Next() override { ++index_; }
  const std::string& value() const override { return sentences_[index_]; }
  sentencepiece::util::Status status() const override { return {}; }

 private:
  const std::vector<std::string>& sentences_;
  size_t index_ = 0;
};

void CheckOptions(const TokenizerOptions& options) {
  WEFT_CHECK(options.vocab_size >= kMinVocabSize && options.vocab_size <= 1000000,
             "tokenizer vocab_size {} is out of range; use at least {} (4 special, 256 byte and "
             "a newline piece, plus learned pieces), e.g. 1024",
             options.vocab_size, kMinVocabSize);
  WEFT_CHECK(options.max_training_sentences > 0,
             "tokenizer max_training_sentences must be positive, got {}",
             options.max_training_sentences);
}

}  // namespace

std::filesystem::path DefaultCacheDir() {
  if (auto dir = GetEnv("WEFT_CACHE_DIR")) return *dir;
  if (auto dir = GetEnv("XDG_CACHE_HOME")) return std::filesystem::path(*dir) / "weft";
  if (auto home = GetEnv("HOME")) return std::filesystem::path(*home) / ".cache" / "weft";
  Fail("no cache directory: HOME is not set; set WEFT_CACHE_DIR to a writable directory");
}

std::string TokenizerCacheKey(std::span<const Document> corpus, const TokenizerOptions& options) {
  Fnv1a64 hash;
  hash.Add(kRecipeVersion);
  hash.AddInt(static_cast<uint64_t>(options.vocab_size));
  hash.AddInt(static_cast<uint64_t>(options.max_training_sentences));
  hash.AddInt(corpus.size());
  for (const auto& document : corpus) {
    hash.AddInt(document.text.size());  // lengths keep document boundaries in the key
    hash.Add(document.text);
  }
  return fmt::format("{:016x}", hash.value());
}

Tokenizer Tokenizer::Train(std::span<const Document> corpus, const TokenizerOptions& options) {
  CheckOptions(options);
  std::vector<std::string> sentences = TrainingSentences(corpus, options.max_training_sentences);
  WEFT_CHECK(!sentences.empty(),
             "cannot train a tokenizer on an empty corpus ({} documents, no text); give documents "
             "with text",
             corpus.size());
  const std::unordered_map<std::string, std::string> args = {
      {"model_type", "bpe"},
      {"vocab_size", std::to_string(options.vocab_size)},
      {"pad_id", std::to_string(kPadId)},
      {"unk_id", std::to_string(kUnkId)},
      {"bos_id", std::to_string(kBosId)},
      {"eos_id", std::to_string(kEosId)},
      {"byte_fallback", "true"},
      {"user_defined_symbols", "\n"},
      {"normalization_rule_name", "identity"},
      {"remove_extra_whitespaces", "false"},
      {"allow_whitespace_only_pieces", "true"},
      {"input_sentence_size", "0"},  // we sample ourselves, deterministically
      {"max_sentence_length", std::to_string(kMaxSentenceBytes)},
      {"num_threads", "2"},
      {"minloglevel", "2"},  // SentencePiece's progress log is noise here
  };
  VectorSentenceIterator iterator(sentences);
  std::string model;
  auto status = sentencepiece::SentencePieceTrainer::Train(args, &iterator, &model);
  if (!status.ok()) {
    Fail(
        "training the tokenizer (BPE, vocab_size {}) on {} lines failed: {}; a small corpus "
        "needs a smaller vocab_size",
        options.vocab_size, sentences.size(), status.ToString());
  }
  return FromSerializedModel(std::move(model), "the freshly trained tokenizer");
}

Tokenizer Tokenizer::TrainOrLoad(std::span<const Document> corpus,
                                 const TokenizerOptions& options) {
  CheckOptions(options);
  std::filesystem::path dir =
      (options.cache_dir.empty() ? DefaultCacheDir() : options.cache_dir) / "tokenizers";
  std::filesystem::path path =
      dir / fmt::format("bpe{}-{}.model", options.vocab_size, TokenizerCacheKey(corpus, options));
  std::error_code error;
  if (std::filesystem::exists(path, error)) {
    try {
      Tokenizer tokenizer = Load(path);
      if (tokenizer.vocab_size() == options.vocab_size) {
        tokenizer.loaded_from_cache_ = true;
        return tokenizer;
      }
    } catch (const Error&) {
      // An unreadable cache entry is replaced below, not fatal.
    }
  }
  Tokenizer tokenizer = Train(corpus, options);
  std::filesystem::create_directories(dir, error);
  if (error) {
    Fail(
        "cannot create the tokenizer cache directory {}: {}; set WEFT_CACHE_DIR to a writable "
        "directory",
        dir.string(), error.message());
  }
  WriteFileAtomically(path, tokenizer.serialized_model());
  tokenizer.cache_path_ = path;
  return tokenizer;
}

Tokenizer Tokenizer::FromSerializedModel(std::string model, std::string_view what) {
  auto processor = std::make_shared<sentencepiece::SentencePieceProcessor>();
  auto status = processor->LoadFromSerializedProto(model);
  if (!status.ok()) {
    Fail("{} is not a SentencePiece model: {}; delete it to retrain", what, status.ToString());
  }
  // Packing relies on these ids; a model trained elsewhere may differ.
  WEFT_CHECK(processor->pad_id() == kPadId && processor->unk_id() == kUnkId &&
                 processor->bos_id() == kBosId && processor->eos_id() == kEosId,
             "{} has special ids pad={} unk={} bos={} eos={}; weft needs pad=0 unk=1 bos=2 eos=3 "
             "(train it with weft)",
             what, processor->pad_id(), processor->unk_id(), processor->bos_id(),
             processor->eos_id());
  Tokenizer tokenizer;
  tokenizer.newline_id_ = processor->PieceToId("\n");
  WEFT_CHECK(tokenizer.newline_id_ != kUnkId,
             "{} has no newline piece; weft tokenizers have one (train it with weft)", what);
  tokenizer.processor_ = std::move(processor);
  tokenizer.model_ = std::make_shared<const std::string>(std::move(model));
  return tokenizer;
}

Tokenizer Tokenizer::Load(const std::filesystem::path& path) {
  // A SentencePiece model is a few MiB: a device or a file over 1 GiB is
  // refused unread.
  Tokenizer tokenizer =
      FromSerializedModel(ReadInputFile(path, "tokenizer model", int64_t{1} << 30), path.string());
  tokenizer.cache_path_ = path;
  return tokenizer;
}

// Lines are encoded one by one and joined by the newline piece, so every line
// starts with SentencePiece's dummy-prefix space, as the training lines did
// ("▁And" after a newline, not "And"); Decode removes that space again.
std::vector<int32_t> Tokenizer::Encode(std::string_view text) const {
  std::vector<int32_t> out;
  std::vector<int> ids;
  size_t start = 0;
  while (true) {
    size_t end = text.find('\n', start);
    std::string_view line =
        text.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start);
    if (!line.empty()) {
      auto status = processor_->Encode(line, &ids);
      if (!status.ok()) Fail("cannot tokenize text: {}", status.ToString());
      out.insert(out.end(), ids.begin(), ids.end());
    }
    if (end == std::string_view::npos) break;
    out.push_back(newline_id_);
    start = end + 1;
  }
  return out;
}

std::string Tokenizer::Decode(std::span<const int32_t> ids) const {
  int32_t size = vocab_size();
  for (size_t i = 0; i < ids.size(); ++i) {
    WEFT_CHECK(ids[i] >= 0 && ids[i] < size,
               "cannot decode token id {} at index {}: the vocabulary has ids 0..{}", ids[i], i,
               size - 1);
  }
  std::string decoded;
  auto status = processor_->Decode(std::vector<int>(ids.begin(), ids.end()), &decoded);
  if (!status.ok()) Fail("cannot decode tokens: {}", status.ToString());
  std::string text;
  text.reserve(decoded.size());
  for (size_t i = 0; i < decoded.size(); ++i) {
    text += decoded[i];
    // The dummy-prefix space of the next line (see Encode).
    if (decoded[i] == '\n' && i + 1 < decoded.size() && decoded[i + 1] == ' ') ++i;
  }
  return text;
}

int32_t Tokenizer::vocab_size() const { return processor_->GetPieceSize(); }

std::string Tokenizer::piece(int32_t id) const {
  WEFT_CHECK(id >= 0 && id < vocab_size(), "token id {} is out of range 0..{}", id,
             vocab_size() - 1);
  return processor_->IdToPiece(id);
}

}  // namespace weft
