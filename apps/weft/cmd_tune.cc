// `weft tune attention`: search the kernel configurations that fit this
// machine and cache the fastest (see include/weft/kernels/tune_cache.h).
#include <memory>
#include <sstream>

#include "bench.h"
#include "commands.h"
#include "weft/base/error.h"

namespace weft::cli {

void AddTune(CLI::App& app) {
  auto* tune = app.add_subcommand("tune", "Tune kernel configurations and cache the winners");
  tune->require_subcommand(1);
  auto* attn = tune->add_subcommand(
      "attention",
      "Time the flex attention configurations whose working set fits the cache limit (L2, or "
      "WEFT_CACHE_LIMIT) and store the fastest in the tune cache (WEFT_TUNE_CACHE or "
      "$XDG_CACHE_HOME/weft/attention_tune.json)");
  auto opt = std::make_shared<bench::TuneOptions>();
  auto shape = std::make_shared<std::string>("1,8,4096,128");
  attn->add_option("--shape", *shape, "B,H,S,D")->capture_default_str();
  attn->add_option("--dtype", opt->dtype, "f32 or bf16")->capture_default_str();
  attn->add_option("--mask", opt->mask, "none, causal, sliding_window, document")
      ->capture_default_str();
  attn->add_flag("--explain", opt->explain,
                 "List every candidate: working set, limit, accepted or rejected and why");
  attn->add_flag("--json", opt->json, "Print JSON instead of a table");
  attn->callback([opt, shape] {
    SetAction([opt, shape] {
      std::vector<int64_t> v;
      std::stringstream ss(*shape);
      std::string part;
      while (std::getline(ss, part, ',')) {
        try {
          size_t used = 0;
          v.push_back(std::stoll(part, &used));
          if (used != part.size()) throw std::invalid_argument(part);
        } catch (const std::exception&) {
          Fail(
              "weft tune attention: --shape {} must be four integers B,H,S,D, e.g. "
              "1,8,4096,128",
              *shape);
        }
      }
      WEFT_CHECK(v.size() == 4,
                 "weft tune attention: --shape {} must be four integers B,H,S,D, e.g. 1,8,4096,128",
                 *shape);
      opt->batch = v[0];
      opt->heads = v[1];
      opt->seq = v[2];
      opt->head_dim = v[3];
      return bench::RunTuneAttention(*opt);
    });
  });
}

}  // namespace weft::cli
