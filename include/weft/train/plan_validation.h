// `weft plan-validate`: `weft plan` against published training runs
// (configs/published_runs.toml, docs/PLANNER.md). Each run names the model
// config, chip, mesh, batch, sequence and remat of a run someone measured,
// and the tokens/s per chip they measured; the planner plans it and the
// error is predicted / published - 1.
//
//   [[run]]
//   name = "Llama 3.1 8B, v6e-256, MaxText"
//   source = "https://..."           # where the measurement is published
//   config = "llama3.1-8b.toml"      # beside the runs file
//   chip = "v6e"
//   mesh = "data=1,fsdp=256,tensor=1"  # as --mesh (per slice)
//   dcn = "fsdp=2"                   # optional, as --dcn
//   batch = 1024                     # global sequences per step
//   seq = 8192
//   remat = "full"                   # as --remat
//   tokens_per_s_per_chip = 7207.3   # published
//   fitted = true                    # the chip's matrix_efficiency was fitted on it
//   band = 0.35                      # optional: this run's own band (say why in note)
//   note = "..."                     # optional: what differs from the source
//
// Unknown keys and missing required ones are errors naming file:line.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "weft/train/planner.h"

namespace weft {

struct PublishedRun {
  std::string name, source, config, chip, mesh, dcn, remat, note;
  int64_t batch = 0, seq = 0;
  double tokens_per_s_per_chip = 0;
  bool fitted = false;
  double band = 0;  // 0: the file's band
};

struct PublishedRuns {
  std::filesystem::path file;
  double band = 0.15;  // the error a run may have before the test fails
  std::vector<PublishedRun> runs;
};

PublishedRuns LoadPublishedRuns(const std::filesystem::path& path);

struct ValidatedRun {
  PublishedRun run;
  double predicted_tokens_per_s_per_chip = 0;
  double error = 0;  // predicted / published - 1
  double mfu = 0;    // predicted
  double peak_bytes = 0, hbm_bytes = 0;
  bool fits = false;
  double exposed_communication_s = 0, step_s = 0;
};

struct Validation {
  std::vector<ValidatedRun> runs;
  // Over the runs not used for fitting: how many, how many within the
  // file's band, the median of |error|.
  int64_t reported = 0, within_band = 0;
  double median_abs_error = 0;
  int64_t fitting = 0;  // runs whose verdict is "fits"
};

Validation ValidatePublishedRuns(const PublishedRuns& runs);

// Each chip's matrix_efficiency fitted on its runs marked `fitted`: the value
// at which the mean log ratio of predicted to published tokens/s is zero
// (within kFitTolerance), found by secant steps on log(efficiency). Fails,
// naming the chip, when even an efficiency of 1 predicts less than published.
inline constexpr double kFitTolerance = 1e-4;
struct FittedEfficiency {
  std::string chip;
  std::vector<std::string> runs;  // the fitted runs' names
  double table = 1;               // the chips file's value
  double fitted = 1;
  int64_t evaluations = 0;  // plans per fitted run
};
std::vector<FittedEfficiency> FitMatrixEfficiency(const PublishedRuns& runs);
std::string FormatFitMarkdown(const std::vector<FittedEfficiency>& fits);
std::string FormatValidationMarkdown(const PublishedRuns& runs, const Validation& v);

}  // namespace weft
