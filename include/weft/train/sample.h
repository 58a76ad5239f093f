// `weft sample`: text from a `weft train` checkpoint.
//
// The sampler rebuilds the Llama from the checkpoint's "model.*" extras
// (state.json), builds its logits module (models/llama.h, LlamaOutput::kLogits)
// under a precision policy (the run's train.precision by default, which
// state.json records; f32 for checkpoints from before it did) for one row of
// model.seq_len tokens and runs it with the executor on one
// device. Each new token takes one forward over the window (no KV cache):
// the row holds the context as one document (segment ids all 0, positions
// 0..S-1), padded with the pad id after the last real token (the causal mask
// makes the padding irrelevant), and the logits at the last real position
// give the next token.
//
// The prompt is framed as training frames documents (data/packing.h): BOS
// first. Generation stops at EOS or after max_tokens tokens. When the context
// outgrows the window it slides: the row keeps the last S tokens at positions
// 0..S-1, which is how training sees a document that continues from the
// previous row (no BOS, positions from 0 at the row start).
//
// Sampling: temperature 0 is greedy (argmax, the lowest id on ties);
// otherwise softmax(logits / T) over the top_k largest logits (all when 0),
// drawn with a std::mt19937_64 seeded by `seed` (our own [0, 1) conversion,
// so draws match across standard libraries).
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "weft/data/tokenizer.h"
#include "weft/models/llama_config.h"
#include "weft/train/safetensors.h"

namespace weft {

struct SampleOptions {
  std::string prompt;
  int64_t max_tokens = 64;   // new tokens at most
  double temperature = 0.8;  // 0: greedy
  int64_t top_k = 0;         // 0: the whole vocabulary
  uint64_t seed = 0;
  // Called with each new piece of the text (the prompt first, then the
  // continuation as tokens arrive), cut at whole UTF-8 characters; the
  // pieces concatenate to SampleResult::text.
  std::function<void(std::string_view)> on_text;
};

enum class StopReason { kEos, kMaxTokens };

struct SampleResult {
  std::vector<int32_t> prompt_ids;  // BOS + the encoded prompt
  std::vector<int32_t> ids;         // the generated tokens (without EOS)
  std::string text;                 // the prompt and its continuation, decoded
  std::string continuation;         // the part of `text` after the prompt
  StopReason stop = StopReason::kMaxTokens;
};

// Where a run directory (or its checkpoint/, the tokenizer then beside it or
// in its parent) keeps its checkpoint and tokenizer.model. Throws
// weft::Error naming the directory and what to do.
struct RunFiles {
  std::filesystem::path checkpoint;
  std::filesystem::path tokenizer;
};
RunFiles LocateRunFiles(const std::filesystem::path& dir);

// The tokenizer.model at `path`, refused unless it is the one the checkpoint
// was trained with: `weft train` records its CRC-32C and vocabulary size in
// state.json's extra ("tokenizer.crc32c", "tokenizer.vocab_size"), and
// another run's tokenizer would turn the model's ids into other words. A
// checkpoint written before that record is checked by vocabulary size only:
// the tokenizer's pieces must fit the model's `model_vocab_size`
// embeddings. Throws weft::Error naming the file, the checkpoint (`what`)
// and both records.
Tokenizer LoadCheckpointTokenizer(const std::filesystem::path& path, const Metadata& extra,
                                  int64_t model_vocab_size, std::string_view what);

// The model the "model.*" extras of a checkpoint's state.json describe
// (what `weft train` writes); `what` names the checkpoint in errors.
LlamaConfig LlamaConfigFromExtras(const Metadata& extra, std::string_view what);
// The precision the run trained in ("train.precision" among the extras; f32
// when absent).
Precision TrainedPrecision(const Metadata& extra, std::string_view what);

// One draw from `logits` (see the file comment). Throws weft::Error for a
// negative or non-finite temperature or a negative top_k.
int32_t SampleToken(std::span<const float> logits, double temperature, int64_t top_k,
                    std::mt19937_64& rng);

class Sampler {
 public:
  // `dir`: a run directory (with checkpoint/ and tokenizer.model) or the
  // checkpoint directory itself (tokenizer.model then beside it or in its
  // parent). Errors name the directory and what to do.
  // `precision` unset: the one the run trained in (TrainedPrecision).
  static Sampler Load(const std::filesystem::path& dir,
                      std::optional<Precision> precision = std::nullopt);
  // From weights in memory (by name, as in models/llama.h); for tests.
  Sampler(const LlamaConfig& config, const TensorMap& weights, Tokenizer tokenizer,
          Precision precision = Precision::kF32, std::string what = "weights");
  Sampler(Sampler&&) noexcept;
  Sampler& operator=(Sampler&&) noexcept;
  ~Sampler();

  // The logits [vocab] of the token after `context` (its last seq_len ids).
  std::vector<float> NextTokenLogits(std::span<const int32_t> context);
  // [n, vocab], row-major: the logits after each of the last n = min(size,
  // seq_len) ids of `context` (NextTokenLogits is the last row).
  std::vector<float> WindowLogits(std::span<const int32_t> context);
  // Throws weft::Error for an empty prompt, a bad temperature or top_k, or a
  // negative max_tokens.
  SampleResult Generate(const SampleOptions& options);

  const LlamaConfig& config() const;
  const Tokenizer& tokenizer() const;
  // The checkpoint's step (0 when built from weights in memory).
  int64_t step() const;
  // Where the checkpoint and the tokenizer came from (empty from memory).
  const std::filesystem::path& checkpoint_dir() const;
  const std::filesystem::path& tokenizer_path() const;

 private:
  struct Impl;
  explicit Sampler(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace weft
