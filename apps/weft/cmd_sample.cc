// `weft sample DIR --prompt TEXT [--tokens N] [--temperature T] [--top-k K]
// [--seed S] [--logits FILE]`: continues TEXT with the model of a `weft train`
// checkpoint (train/sample.h). DIR is the run's output directory or its checkpoint/.
// The text (prompt, then the continuation as it is generated) goes to stdout;
// a line about the checkpoint and why generation stopped goes to stderr.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "commands.h"
#include "weft/base/atomic_file.h"
#include "weft/base/error.h"
#include "weft/train/sample.h"

namespace weft::cli {
namespace {

struct SampleFlags {
  std::string dir;
  std::string prompt;
  int64_t tokens = 64;
  double temperature = 0.8;
  int64_t top_k = 0;
  uint64_t seed = 0;
  std::string precision;  // empty: the run's
  std::string logits;     // --logits FILE
};

// The logits after each token of the prompt's window (BOS + the prompt's ids,
// its last seq_len), as safetensors: "tokens" I32 [n], "logits" F32 [n, vocab].
void WriteWindowLogits(Sampler& sampler, const std::string& prompt, const std::string& path) {
  const Tokenizer& tok = sampler.tokenizer();
  std::vector<int32_t> ids = {tok.bos_id()};
  for (int32_t id : tok.Encode(prompt)) ids.push_back(id);
  const int64_t n = std::min<int64_t>(ids.size(), sampler.config().seq_len);
  const std::vector<float> logits = sampler.WindowLogits(ids);
  const std::span<const int32_t> window = std::span<const int32_t>(ids).last(n);
  const TensorMap tensors = {{"tokens", I32Tensor({n}, window)},
                             {"logits", F32Tensor({n, sampler.config().vocab_size}, logits)}};
  // --logits is the user's path: a link is followed, /dev/stdout written in place.
  WriteFileAtomically(path, SerializeSafetensors(tensors, {}, path), OutputTarget::kUserPath);
}

int RunSample(const SampleFlags& f) {
  SampleOptions o;
  o.prompt = f.prompt;
  o.max_tokens = f.tokens;
  o.temperature = f.temperature;
  o.top_k = f.top_k;
  o.seed = f.seed;
  // Checked before the checkpoint is read, so bad flags fail fast.
  WEFT_CHECK(!o.prompt.empty(), "--prompt is empty; give the text to continue");
  WEFT_CHECK(std::isfinite(o.temperature) && o.temperature >= 0,
             "--temperature {} must be a number >= 0 (0: greedy)", o.temperature);
  WEFT_CHECK(o.top_k >= 0, "--top-k {} must be >= 0 (0: the whole vocabulary)", o.top_k);
  WEFT_CHECK(o.max_tokens >= 0, "--tokens {} must be >= 0", o.max_tokens);

  std::optional<Precision> precision;
  if (!f.precision.empty()) precision = ParsePrecision(f.precision, "--precision");
  Sampler sampler = Sampler::Load(f.dir, precision);
  const LlamaConfig& m = sampler.config();
  fmt::print(stderr, "checkpoint {} (step {}): {} layers, dim {}, window {} tokens\n",
             sampler.checkpoint_dir().string(), sampler.step(), m.n_layers, m.dim, m.seq_len);
  if (!f.logits.empty()) WriteWindowLogits(sampler, o.prompt, f.logits);
  o.on_text = [](std::string_view piece) {
    std::fwrite(piece.data(), 1, piece.size(), stdout);
    std::fflush(stdout);
  };
  const SampleResult r = sampler.Generate(o);
  std::fputc('\n', stdout);
  std::fflush(stdout);
  fmt::print(stderr, "{} tokens; stopped at {}\n", r.ids.size(),
             r.stop == StopReason::kEos ? "end of text" : "--tokens");
  return 0;
}

}  // namespace

void AddSample(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "sample", "Continue a prompt with a trained model (a `weft train` output directory)");
  auto f = std::make_shared<SampleFlags>();
  cmd->add_option("dir", f->dir,
                  "Run directory (with checkpoint/ and tokenizer.model) or its "
                  "checkpoint/")
      ->required();
  cmd->add_option("--prompt", f->prompt, "Text to continue")->required();
  cmd->add_option("--tokens", f->tokens, "New tokens at most (default 64)");
  cmd->add_option("--precision", f->precision,
                  "bf16 or f32: the forward's precision policy (default: the one the run "
                  "trained in)");
  cmd->add_option("--temperature", f->temperature, "Softmax temperature; 0 = greedy (default 0.8)");
  cmd->add_option("--top-k", f->top_k, "Sample among the K likeliest tokens (default: all)");
  cmd->add_option("--seed", f->seed, "Random seed (default 0)");
  cmd->add_option("--logits", f->logits,
                  "Also write the logits after each token of the prompt's window (BOS + prompt) "
                  "to this safetensors file: tokens I32 [n], logits F32 [n, vocab]");
  cmd->callback([f] { SetAction([f] { return RunSample(*f); }); });
}

}  // namespace weft::cli
