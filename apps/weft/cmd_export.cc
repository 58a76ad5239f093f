// `weft export hf RUN_DIR OUT_DIR [--dtype f32|bf16] [--max-shard-size SIZE]`:
// a run's checkpoint as a Hugging Face Llama directory that transformers'
// LlamaForCausalLM loads (train/hf_checkpoint.h, docs/HUGGINGFACE.md).
#include <fmt/format.h>

#include <memory>
#include <string>

#include "commands.h"
#include "weft/base/env.h"
#include "weft/base/error.h"
#include "weft/train/hf_checkpoint.h"

namespace weft::cli {
namespace {

struct ExportFlags {
  std::string run_dir, out_dir;
  std::string dtype = "f32";
  std::string max_shard_size = "5G";
};

int RunExportHf(const ExportFlags& f) {
  HfExportOptions o;
  WEFT_CHECK(f.dtype == "f32" || f.dtype == "bf16",
             "--dtype '{}': expected f32 (the checkpoint's float32 weights, exactly) or bf16",
             f.dtype);
  o.dtype = f.dtype == "f32" ? PrimitiveType::kF32 : PrimitiveType::kBF16;
  o.max_shard_bytes = ParseByteSize(f.max_shard_size, "--max-shard-size");
  ExportRunToHf(f.run_dir, f.out_dir, o);
  fmt::print("wrote {} (Hugging Face LlamaForCausalLM, {})\n", f.out_dir, f.dtype);
  return 0;
}

}  // namespace

void AddExport(CLI::App& app) {
  auto* cmd = app.add_subcommand("export", "Write a trained model in another format");
  cmd->require_subcommand(1);
  auto* hf = cmd->add_subcommand(
      "hf",
      "A run's checkpoint as a Hugging Face Llama directory (config.json, safetensors, "
      "tokenizer), loadable by transformers' LlamaForCausalLM");
  auto f = std::make_shared<ExportFlags>();
  hf->add_option("run_dir", f->run_dir, "Run directory (weft train --out) or its checkpoint/")
      ->required();
  hf->add_option("out_dir", f->out_dir, "New directory to write (must not exist, or be empty)")
      ->required();
  hf->add_option("--dtype", f->dtype,
                 "f32 (default: the checkpoint's float32 weights, exactly) or bf16 (rounded to "
                 "nearest even, as a bf16 run casts them)");
  hf->add_option("--max-shard-size", f->max_shard_size,
                 "Weights above this size are split into model-0000k-of-0000n.safetensors shards "
                 "with model.safetensors.index.json (default 5G; units K, M, G are powers of "
                 "1024)");
  hf->callback([f] { SetAction([f] { return RunExportHf(*f); }); });
}

}  // namespace weft::cli
