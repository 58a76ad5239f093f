// `weft eval DIR --data FILE... [--seq N] [--batch N] [--mesh ..] [--config FILE]
// [--precision bf16|f32] [--json]`: the mean cross-entropy per predicted
// token, the perplexity and the number of predicted tokens of a model (a run
// directory or a Hugging Face Llama directory) on text files, one document
// each (train/eval.h).
#include <fmt/format.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "commands.h"
#include "weft/base/error.h"
#include "weft/train/eval.h"
#include "weft/train/program.h"

namespace weft::cli {
namespace {

struct EvalFlags {
  std::string dir;
  std::vector<std::string> data;
  std::optional<int64_t> seq;    // unset: the model's seq_len
  std::optional<int64_t> batch;  // unset: 8, rounded up to the batch axes
  std::string mesh, config, precision;
  bool json = false;
};

int RunEval(const EvalFlags& f) {
  // Flags first: nothing is read for a command that will be refused.
  EvalOptions o;
  for (const std::string& file : f.data) o.data_files.emplace_back(file);
  o.seq_len = f.seq;
  o.batch_size = f.batch;
  CheckEvalOptions(o);
  if (!f.mesh.empty()) o.mesh = ParseMeshFlag(f.mesh);
  if (!f.precision.empty()) o.precision = ParsePrecision(f.precision, "--precision");
  if (!f.config.empty()) o.layout = LoadRunConfig(f.config);
  const EvalModel model = LoadEvalModel(f.dir);
  const EvalResult r = Evaluate(model, o);
  if (f.json) {
    const nlohmann::json j = {{"loss", r.loss}, {"perplexity", r.perplexity}, {"tokens", r.tokens}};
    fmt::print("{}\n", j.dump());
    return 0;
  }
  fmt::print("{}: {} windows of up to {} tokens, {} per run on {} device(s)\n", model.what,
             r.windows, r.seq_len, r.batch_size, r.num_devices);
  fmt::print("loss {:.6f}  perplexity {:.4f}  tokens {}\n", r.loss, r.perplexity, r.tokens);
  return 0;
}

}  // namespace

void AddEval(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "eval",
      "Mean cross-entropy and perplexity of a model (a run directory or a Hugging Face "
      "Llama directory) on text files");
  auto f = std::make_shared<EvalFlags>();
  cmd->add_option("dir", f->dir,
                  "Run directory (weft train --out) or its checkpoint/, or a Hugging Face Llama "
                  "directory (config.json, safetensors, tokenizer.model)")
      ->required();
  cmd->add_option("--data", f->data, "UTF-8 text files, one document each")->required();
  cmd->add_option("--seq", f->seq, "Window length in tokens (default: the model's seq_len)");
  cmd->add_option("--batch", f->batch,
                  "Windows per program run (default 8, rounded up to the mesh's batch axes)");
  cmd->add_option("--mesh", f->mesh, "Mesh axes, major to minor, e.g. fsdp=2,tensor=2");
  cmd->add_option("--config", f->config,
                  "Run config whose [mesh] and [sharding] to use (its [model] and [train] are "
                  "not)");
  cmd->add_option("--precision", f->precision,
                  "bf16 or f32 (default: a run's train.precision; f32 for a Hugging Face "
                  "directory)");
  cmd->add_flag("--json", f->json, "Print {\"loss\": …, \"perplexity\": …, \"tokens\": …}");
  cmd->callback([f] { SetAction([f] { return RunEval(*f); }); });
}

}  // namespace weft::cli
