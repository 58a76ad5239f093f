// A SentencePiece BPE tokenizer trained on the corpus on first use and cached
// on disk, keyed by a hash of the corpus and the options.
//
// Choices (all part of the cache key):
//  - ids: pad 0, unk 1, bos 2, eos 3; then 256 byte pieces (byte fallback),
//    a piece for "\n", and the learned pieces.
//  - no normalization (identity rules, whitespace kept), byte fallback and a
//    newline piece, so Decode(Encode(text)) == text for any UTF-8 text.
//  - each line is encoded as SentencePiece encodes a sentence (with its
//    dummy-prefix "▁"), lines joined by the newline piece: a word at a line
//    start gets the same pieces as elsewhere.
//  - trained on the corpus's lines (documents split at '\n'), at most
//    max_training_sentences of them, sampled with a fixed seed.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "weft/data/corpus.h"

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace weft {

struct TokenizerOptions {
  // Total pieces, including the 4 special, 256 byte and newline pieces.
  int vocab_size = 1024;
  // Caps training time: lines beyond this are sampled (seeded).
  int64_t max_training_sentences = 100000;
  // Empty: DefaultCacheDir().
  std::filesystem::path cache_dir;
};

// $WEFT_CACHE_DIR, else $XDG_CACHE_HOME/weft, else $HOME/.cache/weft.
std::filesystem::path DefaultCacheDir();

// The cache key of (corpus, options): 16 hex digits.
std::string TokenizerCacheKey(std::span<const Document> corpus, const TokenizerOptions& options);

class Tokenizer {
 public:
  static constexpr int32_t kPadId = 0, kUnkId = 1, kBosId = 2, kEosId = 3;

  // The cached model for (corpus, options); trains and caches it (atomically)
  // when there is none. Errors name the cache file and the corpus problem.
  static Tokenizer TrainOrLoad(std::span<const Document> corpus, const TokenizerOptions& options);
  // Trains without touching the cache.
  static Tokenizer Train(std::span<const Document> corpus, const TokenizerOptions& options);
  // From a serialized SentencePiece ModelProto (a .model file's bytes);
  // `what` names the source in errors.
  static Tokenizer FromSerializedModel(std::string model, std::string_view what);
  static Tokenizer Load(const std::filesystem::path& path);

  // Text to ids, without BOS/EOS.
  std::vector<int32_t> Encode(std::string_view text) const;
  std::string Decode(std::span<const int32_t> ids) const;

  int32_t vocab_size() const;
  int32_t pad_id() const { return kPadId; }
  int32_t bos_id() const { return kBosId; }
  int32_t eos_id() const { return kEosId; }
  // The piece's text ("▁the", "<0x0A>", "<s>"); throws for an id out of range.
  std::string piece(int32_t id) const;
  const std::string& serialized_model() const { return *model_; }
  // Where TrainOrLoad found or put the model; empty otherwise.
  const std::filesystem::path& cache_path() const { return cache_path_; }
  bool loaded_from_cache() const { return loaded_from_cache_; }

 private:
  Tokenizer() = default;
  std::shared_ptr<const sentencepiece::SentencePieceProcessor> processor_;
  std::shared_ptr<const std::string> model_;
  std::filesystem::path cache_path_;
  bool loaded_from_cache_ = false;
  int32_t newline_id_ = 0;
};

}  // namespace weft
