#include "weft/train/sample.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "weft/base/crc32c.h"
#include "weft/base/error.h"
#include "weft/models/llama.h"
#include "weft/runtime/executor.h"
#include "weft/train/checkpoint.h"

namespace weft {
namespace {

namespace fs = std::filesystem;
using Tensor = runtime::HostTensor;

// Bytes at the end of `text` that start an incomplete UTF-8 character, or
// the replacement character a byte-fallback decoder emits for one.
size_t IncompleteTail(std::string_view text) {
  if (text.ends_with("\xEF\xBF\xBD")) return 3;
  size_t n = 0;
  while (n < text.size() && n < 4) {
    const auto c = static_cast<unsigned char>(text[text.size() - 1 - n]);
    if ((c & 0xC0) != 0x80) {
      const size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
      return need > n + 1 ? n + 1 : 0;
    }
    ++n;
  }
  return 0;
}

}  // namespace

RunFiles LocateRunFiles(const fs::path& dir) {
  std::error_code error;
  WEFT_CHECK(fs::exists(dir, error),
             "{} does not exist; give a `weft train` output directory (--out) or its "
             "checkpoint/",
             dir.string());
  WEFT_CHECK(fs::is_directory(dir, error),
             "{} is not a directory; give a `weft train` output directory (--out) or its "
             "checkpoint/",
             dir.string());
  RunFiles files;
  std::vector<fs::path> tokenizer_candidates;
  if (CheckpointExists(dir / "checkpoint")) {
    files.checkpoint = dir / "checkpoint";
    tokenizer_candidates = {dir / "tokenizer.model"};
  } else if (CheckpointExists(dir)) {
    files.checkpoint = dir;
    fs::path normal = fs::absolute(dir).lexically_normal();
    if (!normal.has_filename()) normal = normal.parent_path();  // "run/checkpoint/"
    tokenizer_candidates = {dir / "tokenizer.model", normal.parent_path() / "tokenizer.model"};
  } else {
    Fail(
        "{} holds no checkpoint (neither {} nor {} has a state.json); train first "
        "(`weft train --out {}`) or give the run's output directory",
        dir.string(), (dir / "checkpoint").string(), dir.string(), dir.string());
  }
  for (const fs::path& p : tokenizer_candidates) {
    if (fs::is_regular_file(p, error)) {
      files.tokenizer = p;
      return files;
    }
  }
  std::vector<std::string> names;
  for (const fs::path& p : tokenizer_candidates) names.push_back(p.string());
  Fail(
      "no tokenizer for the checkpoint {}: looked for {}; copy the run's tokenizer.model "
      "(written by `weft train` into its output directory) there",
      files.checkpoint.string(), fmt::join(names, " and "));
}

Tokenizer LoadCheckpointTokenizer(const fs::path& path, const Metadata& extra,
                                  int64_t model_vocab_size, std::string_view what) {
  Tokenizer tokenizer = Tokenizer::Load(path);
  const std::string crc = Crc32cText(Crc32c(tokenizer.serialized_model()));
  const std::string vocab = std::to_string(tokenizer.vocab_size());
  const auto recorded_crc = extra.find("tokenizer.crc32c");
  const auto recorded_vocab = extra.find("tokenizer.vocab_size");
  const bool crc_ok = recorded_crc == extra.end() || recorded_crc->second == crc;
  const bool vocab_ok = recorded_vocab == extra.end() || recorded_vocab->second == vocab;
  WEFT_CHECK(crc_ok && vocab_ok,
             "{} is not the tokenizer {} was trained with: its state.json records {} pieces, {}; "
             "this file has {} pieces, {}. Its token ids would mean other words: give the "
             "tokenizer.model `weft train` wrote into that run's output directory",
             path.string(), what,
             recorded_vocab == extra.end() ? std::string("?") : recorded_vocab->second,
             recorded_crc == extra.end() ? std::string("no checksum") : recorded_crc->second, vocab,
             crc);
  WEFT_CHECK(tokenizer.vocab_size() <= model_vocab_size,
             "{}: the tokenizer {} has {} pieces but the model only {} embeddings; give the "
             "tokenizer.model of the run that wrote the checkpoint",
             what, path.string(), tokenizer.vocab_size(), model_vocab_size);
  return tokenizer;
}

LlamaConfig LlamaConfigFromExtras(const Metadata& extra, std::string_view what) {
  return ParseModelConfigFields(extra, fmt::format("{}: state.json's extra", what));
}

int32_t SampleToken(std::span<const float> logits, double temperature, int64_t top_k,
                    std::mt19937_64& rng) {
  WEFT_CHECK(std::isfinite(temperature) && temperature >= 0,
             "temperature {} must be a number >= 0 (0: greedy)", temperature);
  WEFT_CHECK(top_k >= 0, "top-k {} must be >= 0 (0: the whole vocabulary)", top_k);
  WEFT_CHECK(!logits.empty(), "no logits to sample from");
  const int64_t n = static_cast<int64_t>(logits.size());
  // Ids by descending logit, the lower id first on ties (NaN last).
  auto before = [&](int32_t a, int32_t b) {
    const float x = logits[a], y = logits[b];
    if (std::isnan(x) != std::isnan(y)) return std::isnan(y);
    if (x != y) return x > y;
    return a < b;
  };
  if (temperature == 0) {
    int32_t best = 0;
    for (int32_t i = 1; i < n; ++i) {
      if (before(i, best)) best = i;
    }
    return best;
  }
  const int64_t k = top_k == 0 ? n : std::min(top_k, n);
  std::vector<int32_t> ids(n);
  std::iota(ids.begin(), ids.end(), 0);
  std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), before);
  ids.resize(k);
  const double top = logits[ids[0]];
  WEFT_CHECK(std::isfinite(top),
             "the model's logits are not finite ({}); the checkpoint is "
             "damaged or diverged",
             top);
  std::vector<double> weights(k);
  double total = 0;
  for (int64_t i = 0; i < k; ++i) {
    const double z = (static_cast<double>(logits[ids[i]]) - top) / temperature;
    weights[i] = std::isnan(z) ? 0.0 : std::exp(z);
    total += weights[i];
  }
  // 53 random bits as a double in [0, 1): the same draw under any library.
  const double u = static_cast<double>(rng() >> 11) * 0x1.0p-53 * total;
  double acc = 0;
  for (int64_t i = 0; i < k; ++i) {
    acc += weights[i];
    if (u < acc) return ids[i];
  }
  return ids[0];  // u rounded up to total: the most likely id
}

struct Sampler::Impl {
  LlamaConfig config;
  Tokenizer tokenizer;
  LlamaForward forward;
  std::unique_ptr<runtime::Executor> executor;
  std::vector<Tensor> weights;  // in parameter order (shared with each run)
  int64_t step = 0;
  fs::path checkpoint_dir, tokenizer_path;

  Impl(const LlamaConfig& c, const TensorMap& named, Tokenizer t, Precision precision,
       const std::string& what)
      : config(c), tokenizer(std::move(t)) {
    WEFT_CHECK(tokenizer.vocab_size() <= config.vocab_size,
               "{}: the tokenizer has {} pieces but the model only {} embeddings; use the "
               "tokenizer.model of the run that wrote the checkpoint",
               what, tokenizer.vocab_size(), config.vocab_size);
    LlamaBuildOptions build;
    build.batch_size = 1;
    build.seq_len = config.seq_len;
    build.output = LlamaOutput::kLogits;
    build.precision = precision;
    forward = BuildLlamaForward(config, build);
    for (const LlamaWeight& w : forward.weights) {
      const auto it = named.find(w.name);
      WEFT_CHECK(it != named.end(), "{}: no weight \"{}\" (the model needs {} {})", what, w.name,
                 w.name, w.shape.ToString());
      const Tensor& t = it->second;
      WEFT_CHECK(
          (t.element_type() == PrimitiveType::kF32 || t.element_type() == PrimitiveType::kBF16) &&
              t.dimensions() == w.shape.dimensions(),
          "{}: weight \"{}\" is {}, but the model in state.json needs {}", what, w.name,
          t.shape().ToString(), w.shape.ToString());
      weights.push_back(AsF32Tensor(t));
    }
    executor = std::make_unique<runtime::Executor>(*forward.module);
  }

  std::vector<float> Logits(std::span<const int32_t> context) {
    std::vector<float> all = WindowLogits(context);
    const int64_t V = config.vocab_size;
    return std::vector<float>(all.end() - V, all.end());
  }

  // [n, V]: the logits after each of the window's n tokens (the last seq_len
  // of `context`).
  std::vector<float> WindowLogits(std::span<const int32_t> context) {
    const int64_t S = config.seq_len;
    WEFT_CHECK(!context.empty(), "no context to continue");
    // The window: the last S tokens.
    if (static_cast<int64_t>(context.size()) > S) context = context.last(S);
    const int64_t n = static_cast<int64_t>(context.size());
    std::vector<int32_t> tokens(S, Tokenizer::kPadId), zeros(S, 0), positions(S);
    std::copy(context.begin(), context.end(), tokens.begin());
    std::iota(positions.begin(), positions.end(), 0);
    std::vector<Tensor> inputs = {
        Tensor::FromVector<int32_t>(PrimitiveType::kS32, {1, S}, tokens),
        Tensor::FromVector<int32_t>(PrimitiveType::kS32, {1, S}, zeros),  // targets: unused
        Tensor(Shape(PrimitiveType::kF32, {1, S})),                       // loss_mask: unused
        Tensor::FromVector<int32_t>(PrimitiveType::kS32, {1, S}, zeros),  // one document
        Tensor::FromVector<int32_t>(PrimitiveType::kS32, {1, S}, positions)};
    for (const Tensor& w : weights) inputs.push_back(w);  // shared: only read
    const std::vector<Tensor> out = executor->Run(std::move(inputs));
    const int64_t V = config.vocab_size;
    const float* rows = out.at(0).data<float>();
    return std::vector<float>(rows, rows + n * V);
  }
};

Sampler::Sampler(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Sampler::Sampler(const LlamaConfig& config, const TensorMap& weights, Tokenizer tokenizer,
                 Precision precision, std::string what)
    : impl_(std::make_unique<Impl>(config, weights, std::move(tokenizer), precision, what)) {}
Sampler::Sampler(Sampler&&) noexcept = default;
Sampler& Sampler::operator=(Sampler&&) noexcept = default;
Sampler::~Sampler() = default;

Precision TrainedPrecision(const Metadata& extra, std::string_view what) {
  const auto it = extra.find("train.precision");
  if (it == extra.end()) return Precision::kF32;  // written before runs had a policy
  return ParsePrecision(it->second, fmt::format("{}: state.json extra \"train.precision\"", what));
}

Sampler Sampler::Load(const fs::path& dir, std::optional<Precision> precision) {
  const RunFiles files = LocateRunFiles(dir);
  const Checkpoint checkpoint = LoadCheckpoint(files.checkpoint);
  const std::string what = fmt::format("checkpoint {}", files.checkpoint.string());
  const LlamaConfig config = LlamaConfigFromExtras(checkpoint.state.extra, what);
  auto impl = std::make_unique<Impl>(
      config, checkpoint.model,
      LoadCheckpointTokenizer(files.tokenizer, checkpoint.state.extra, config.vocab_size, what),
      precision.value_or(TrainedPrecision(checkpoint.state.extra, what)), what);
  impl->step = checkpoint.state.step;
  impl->checkpoint_dir = files.checkpoint;
  impl->tokenizer_path = files.tokenizer;
  return Sampler(std::move(impl));
}

std::vector<float> Sampler::NextTokenLogits(std::span<const int32_t> context) {
  return impl_->Logits(context);
}

std::vector<float> Sampler::WindowLogits(std::span<const int32_t> context) {
  return impl_->WindowLogits(context);
}

SampleResult Sampler::Generate(const SampleOptions& o) {
  WEFT_CHECK(!o.prompt.empty(), "the prompt is empty; give the text to continue (--prompt)");
  WEFT_CHECK(std::isfinite(o.temperature) && o.temperature >= 0,
             "temperature {} must be a number >= 0 (0: greedy)", o.temperature);
  WEFT_CHECK(o.top_k >= 0, "top-k {} must be >= 0 (0: the whole vocabulary)", o.top_k);
  WEFT_CHECK(o.max_tokens >= 0, "the number of tokens {} must be >= 0", o.max_tokens);
  const Tokenizer& tok = impl_->tokenizer;
  SampleResult r;
  r.prompt_ids.push_back(tok.bos_id());
  for (int32_t id : tok.Encode(o.prompt)) r.prompt_ids.push_back(id);

  std::vector<int32_t> all = r.prompt_ids;
  // The decoded text (without BOS) and how much of it went to on_text.
  auto decode = [&] { return tok.Decode(std::span<const int32_t>(all).subspan(1)); };
  const std::string prompt_text = decode();
  // Decoding all tokens again each time keeps the text exact at the seams
  // (a word's leading space, a line's dummy prefix, bytes of one character).
  std::string emitted;
  auto emit = [&](const std::string& text, bool final) {
    if (!o.on_text || !text.starts_with(emitted)) return;
    const size_t end = final ? text.size() : text.size() - IncompleteTail(text);
    if (end > emitted.size()) {
      o.on_text(std::string_view(text).substr(emitted.size(), end - emitted.size()));
      emitted = text.substr(0, end);
    }
  };
  emit(prompt_text, false);

  std::mt19937_64 rng(o.seed);
  std::string text = prompt_text;
  while (static_cast<int64_t>(r.ids.size()) < o.max_tokens) {
    const std::vector<float> logits = impl_->Logits(all);
    // Only ids the tokenizer can decode (a model may have spare embeddings).
    const int32_t next = SampleToken(std::span<const float>(logits).first(tok.vocab_size()),
                                     o.temperature, o.top_k, rng);
    if (next == tok.eos_id()) {
      r.stop = StopReason::kEos;
      break;
    }
    r.ids.push_back(next);
    all.push_back(next);
    text = decode();
    emit(text, false);
  }
  emit(text, true);
  r.text = text;
  r.continuation = text.starts_with(prompt_text) ? text.substr(prompt_text.size()) : text;
  return r;
}

const LlamaConfig& Sampler::config() const { return impl_->config; }
const Tokenizer& Sampler::tokenizer() const { return impl_->tokenizer; }
int64_t Sampler::step() const { return impl_->step; }
const fs::path& Sampler::checkpoint_dir() const { return impl_->checkpoint_dir; }
const fs::path& Sampler::tokenizer_path() const { return impl_->tokenizer_path; }

}  // namespace weft
