#include "bench_plan.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "timer.h"
#include "weft/base/data_files.h"
#include "weft/base/error.h"
#include "weft/train/plan_search.h"
#include "weft/train/planner.h"
#include "weft/train/program.h"

namespace weft::bench {
namespace {

std::filesystem::path FindConfig(const char* name) {
  return FindDataFile(std::string("configs/") + name);
}

// `weft plan --auto` of Llama 3.1 8B on 256 v6e chips (batch 1024 x 8192):
// every candidate planned once, one thread.
struct AutoCase {
  static constexpr double kTargetPerMinute = 500;
  int64_t candidates = 0, fit = 0;
  double seconds = 0;
  double per_minute() const { return 60 * static_cast<double>(candidates) / seconds; }
};

AutoCase RunAutoCase() {
  AutoPlanOptions o;
  o.chip = "v6e";
  o.chips = 256;
  o.batch_size = 1024;
  const AutoPlan p = SearchPlans(LoadRunConfig(FindConfig("llama3.1-8b.toml")), o);
  AutoCase c;
  c.candidates = static_cast<int64_t>(p.candidates.size());
  c.fit = p.ranked;
  c.seconds = p.seconds;
  return c;
}

struct Case {
  std::string remat;
  bool shard_as;
  // Each the best of the runs (the parts need not come from the fastest run).
  double seconds = 0, compile = 1e30, analysis = 1e30;
  double peak = 0;
  bool fits = false;
};

// The same step on 65,536 chips (fsdp=8192 x tensor=8, batch 8192, 256
// v6e slices): planning is one per-device program, so its time should not
// grow with the chip count beyond the program's own per-device tables.
struct LargeCase {
  static constexpr int64_t kDevices = 65536;
  static constexpr double kTarget = 2.0;
  double seconds = 0, compile = 0, analysis = 0, peak = 0;
  int64_t slices = 0;
};

LargeCase RunLargeCase(const RunConfig& config) {
  PlanOptions o;
  o.chip = "v6e";
  o.mesh = ParseMeshFlag("fsdp=8192,tensor=8");
  o.batch_size = 8192;
  o.seq_len = 8192;
  o.remat = "full";
  LargeCase c;
  // One run: it is the slow case this measures.
  c.seconds = BestSeconds(1, [&] {
    const StepPlan p = PlanTrainingStep(config, o);
    c.compile = p.compile_seconds;
    c.analysis = p.analysis_seconds;
    c.peak = static_cast<double>(p.peak_bytes());
    c.slices = p.slices;
  });
  return c;
}

}  // namespace

int RunPlanBench(bool json) {
  const RunConfig config = LoadRunConfig(FindConfig("llama3.1-405b.toml"));
  std::vector<Case> cases = {{"full", true}, {"offload", true}, {"full", false}};
  constexpr double kTarget = 3.0;
  for (Case& c : cases) {
    PlanOptions o;
    o.chip = "v6e";
    o.mesh = ParseMeshFlag("fsdp=64,tensor=4");
    o.batch_size = 64;
    o.seq_len = 8192;
    o.remat = c.remat;
    o.shard_as = c.shard_as;
    c.seconds = BestSeconds(3, [&] {
      const StepPlan p = PlanTrainingStep(config, o);
      c.compile = std::min(c.compile, p.compile_seconds);
      c.analysis = std::min(c.analysis, p.analysis_seconds);
      c.peak = static_cast<double>(p.peak_bytes());
      c.fits = p.fits();
    });
  }
  const LargeCase large = RunLargeCase(config);
  const AutoCase automatic = RunAutoCase();
  if (json) {
    std::printf(
        "{\"bench\": \"plan\", \"model\": \"llama3.1-405b\", \"chip\": \"v6e\", "
        "\"devices\": 256, \"target_seconds\": %.1f, \"cases\": [",
        kTarget);
    for (size_t i = 0; i < cases.size(); ++i) {
      const Case& c = cases[i];
      std::printf(
          "%s{\"remat\": \"%s\", \"shard_as\": %s, \"seconds\": %.3f, \"compile_seconds\": "
          "%.3f, \"analysis_seconds\": %.3f, \"ratio_to_target\": %.3f, \"peak_bytes\": "
          "%.0f, \"fits\": %s}",
          i ? ", " : "", c.remat.c_str(), c.shard_as ? "true" : "false", c.seconds, c.compile,
          c.analysis, c.seconds / kTarget, c.peak, c.fits ? "true" : "false");
    }
    std::printf(
        "], \"large_mesh\": {\"devices\": %lld, \"mesh\": \"fsdp=8192,tensor=8\", \"batch\": "
        "8192, \"slices\": %lld, \"target_seconds\": %.1f, \"seconds\": %.3f, "
        "\"compile_seconds\": %.3f, \"analysis_seconds\": %.3f, \"ratio_to_target\": %.3f, "
        "\"peak_bytes\": %.0f}, \"auto\": {\"model\": \"llama3.1-8b\", \"chips\": 256, "
        "\"candidates\": %lld, \"fit\": %lld, \"seconds\": %.3f, \"candidates_per_minute\": "
        "%.0f, \"target_per_minute\": %.0f}}\n",
        static_cast<long long>(LargeCase::kDevices), static_cast<long long>(large.slices),
        LargeCase::kTarget, large.seconds, large.compile, large.analysis,
        large.seconds / LargeCase::kTarget, large.peak,
        static_cast<long long>(automatic.candidates), static_cast<long long>(automatic.fit),
        automatic.seconds, automatic.per_minute(), AutoCase::kTargetPerMinute);
    return 0;
  }
  std::printf(
      "weft plan: Llama 3.1 405B, batch 64 x seq 8192, v6e-256 (fsdp 64 x tensor 4), one "
      "thread, best of 3 (each column)\n");
  std::printf("  %-24s %10s %10s %10s %10s %12s\n", "case", "total", "compile", "analysis", "/ 3 s",
              "peak/chip");
  for (const Case& c : cases) {
    const std::string name = "remat " + c.remat + (c.shard_as ? "" : ", no shard_as");
    std::printf("  %-24s %8.3f s %8.3f s %8.3f s %9.1f%% %9.1f GB%s\n", name.c_str(), c.seconds,
                c.compile, c.analysis, 100 * c.seconds / kTarget, c.peak / 1e9,
                c.fits ? "" : " (does not fit)");
  }
  std::printf(
      "weft plan: the same step on 65,536 v6e chips (fsdp 8192 x tensor 8, batch 8192, %lld "
      "slices), remat full, one run\n",
      static_cast<long long>(large.slices));
  std::printf("  %-24s %8.3f s %8.3f s %8.3f s %9.1f%% %9.1f GB   (target %.0f s)\n",
              "65,536 chips", large.seconds, large.compile, large.analysis,
              100 * large.seconds / LargeCase::kTarget, large.peak / 1e9, LargeCase::kTarget);
  std::printf(
      "weft plan --auto: Llama 3.1 8B on 256 v6e chips, batch 1024 x 8192, every candidate once\n");
  std::printf("  %lld candidates (%lld fit) in %.1f s: %.0f per minute (target %.0f, %.1fx)\n",
              static_cast<long long>(automatic.candidates), static_cast<long long>(automatic.fit),
              automatic.seconds, automatic.per_minute(), AutoCase::kTargetPerMinute,
              automatic.per_minute() / AutoCase::kTargetPerMinute);
  return 0;
}

}  // namespace weft::bench
