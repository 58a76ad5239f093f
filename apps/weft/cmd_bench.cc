// `weft bench peak|attention`.
#include <memory>

#include "bench.h"
#include "commands.h"

namespace weft::cli {

void AddBench(CLI::App& app) {
  auto* bench = app.add_subcommand(
      "bench", "Benchmarks; performance is reported as a ratio to this machine's measured peak");
  bench->require_subcommand(1);

  auto* peak = bench->add_subcommand("peak", "Measure this machine's float32 FMA peak");
  auto peak_json = std::make_shared<bool>(false);
  peak->add_flag("--json", *peak_json, "Print JSON instead of a table");
  peak->callback([peak_json] { SetAction([peak_json] { return bench::RunPeak(*peak_json); }); });

  auto* attn = bench->add_subcommand(
      "attention",
      "Flex attention forward and backward: time, GFLOP/s over unmasked pairs (4*B*H*pairs*D "
      "forward, 2.5x that backward) and percent of the measured peak");
  auto opt = std::make_shared<bench::AttentionBenchOptions>();
  attn->add_flag("--json", opt->json, "Print JSON instead of a table");
  attn->add_option("--seq", opt->seq_lens, "Sequence lengths")->capture_default_str();
  attn->add_option("--dim", opt->head_dims, "Head dims")->capture_default_str();
  attn->add_option("--mask", opt->masks, "Masks: none, causal, sliding_window, document")
      ->capture_default_str();
  attn->add_option("--heads", opt->heads, "Heads")->capture_default_str();
  attn->add_option("--batch", opt->batch, "Batch")->capture_default_str();
  auto forward_only = std::make_shared<bool>(false);
  attn->add_flag("--forward-only", *forward_only, "Skip the backward pass");
  attn->callback([opt, forward_only] {
    opt->backward = !*forward_only;
    SetAction([opt] { return bench::RunAttention(*opt); });
  });
}

}  // namespace weft::cli
