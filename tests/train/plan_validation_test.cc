// weft plan against the published runs of configs/published_runs.toml: each
// run within its band, the aggregate targets, and the file's errors.
#include "weft/train/plan_validation.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>

#include "../common/scratch_dir.h"
#include "weft/base/error.h"
#include "weft/train/planner.h"
#include "weft/train/program.h"

namespace weft {
namespace {

const std::filesystem::path kRuns =
    std::filesystem::path(WEFT_SOURCE_DIR) / "configs/published_runs.toml";

TEST(PlanValidationTest, EveryPublishedRunIsPredictedWithinItsBand) {
  const PublishedRuns runs = LoadPublishedRuns(kRuns);
  ASSERT_GE(runs.runs.size(), 12u);
  const Validation v = ValidatePublishedRuns(runs);
  ASSERT_EQ(v.runs.size(), runs.runs.size());
  for (const ValidatedRun& r : v.runs) {
    const double band = r.run.band > 0 ? r.run.band : runs.band;
    EXPECT_LE(std::fabs(r.error), band)
        << r.run.name << ": predicted " << r.predicted_tokens_per_s_per_chip
        << " tokens/s per chip, published " << r.run.tokens_per_s_per_chip;
    EXPECT_GT(r.mfu, 0.05) << r.run.name;
    EXPECT_LT(r.mfu, 0.9) << r.run.name;
    // They ran: the verdict must be "fits".
    EXPECT_TRUE(r.fits) << r.run.name << ": planned peak " << r.peak_bytes << " of " << r.hbm_bytes;
  }
  // The issue's targets, over the runs not used for fitting: at least 3 in
  // 4 within 15%, median error at most 12%.
  ASSERT_GE(v.reported, 10);
  EXPECT_GE(4 * v.within_band, 3 * v.reported) << v.within_band << " of " << v.reported;
  EXPECT_LE(v.median_abs_error, 0.12);
  // Each chip with a fitted efficiency has exactly one fitted run.
  std::map<std::string, int> fitted;
  for (const PublishedRun& r : runs.runs) fitted[r.chip] += r.fitted ? 1 : 0;
  for (const auto& [chip, n] : fitted) EXPECT_EQ(n, 1) << chip;
}

TEST(PlanValidationTest, TheTableListsEveryRunAndTheSummary) {
  const PublishedRuns runs = LoadPublishedRuns(kRuns);
  const std::string table = FormatValidationMarkdown(runs, ValidatePublishedRuns(runs));
  for (const PublishedRun& r : runs.runs) EXPECT_NE(table.find(r.name), std::string::npos);
  EXPECT_NE(table.find("runs not used for fitting within 15%"), std::string::npos) << table;
}

TEST(PlanValidationTest, TheChipsFileHoldsTheEfficienciesFittedOnTheRunsMarkedFitted) {
  // Stale when the planner changes: `weft plan-validate --fit` prints the
  // values to write into configs/chips.toml (and docs/PLANNER.md's table).
  const PublishedRuns runs = LoadPublishedRuns(kRuns);
  const std::vector<FittedEfficiency> fits = FitMatrixEfficiency(runs);
  ASSERT_EQ(fits.size(), 3u);
  for (const FittedEfficiency& f : fits) {
    EXPECT_NEAR(f.table, f.fitted, 0.0015)
        << f.chip << ": weft plan-validate --fit gives matrix_efficiency = " << f.fitted;
    EXPECT_EQ(f.runs.size(), 1u) << f.chip;
  }
}

// A runs file in `dir` with one run of Llama 3.1 8B on 8 v6e chips marked fitted,
// published at `tokens` per chip, beside copies of its config and the chips file.
PublishedRuns ModelRuns(const std::filesystem::path& dir, double tokens) {
  const std::filesystem::path configs = std::filesystem::path(WEFT_SOURCE_DIR) / "configs";
  std::filesystem::copy_file(configs / "llama3.1-8b.toml", dir / "llama3.1-8b.toml",
                             std::filesystem::copy_options::overwrite_existing);
  std::filesystem::copy_file(configs / "chips.toml", dir / "chips.toml",
                             std::filesystem::copy_options::overwrite_existing);
  std::ofstream(dir / "runs.toml") << fmt::format(R"([[run]]
name = "Llama 3.1 8B on 8 chips"
source = "this test"
config = "llama3.1-8b.toml"
chip = "v6e"
mesh = "data=1,fsdp=8,tensor=1"
batch = 16
seq = 4096
remat = "full"
tokens_per_s_per_chip = {}
fitted = true
)",
                                                  tokens);
  return LoadPublishedRuns(dir / "runs.toml");
}

// What the planner predicts for ModelRuns' run at `efficiency`.
double ModelTokensPerChip(const std::filesystem::path& dir, double efficiency) {
  PlanOptions o;
  o.chip = "v6e";
  o.mesh = ParseMeshFlag("data=1,fsdp=8,tensor=1");
  o.batch_size = 16;
  o.seq_len = 4096;
  o.remat = "full";
  o.matrix_efficiency = efficiency;
  return PlanTrainingStep(LoadRunConfig((dir / "llama3.1-8b.toml").string()), o)
      .tokens_per_s_per_chip();
}

TEST(PlanValidationTest, FittingRecoversTheEfficiencyThatGaveThePublishedFigure) {
  testing::ScratchDir dir("weft_plan_fit");
  ModelRuns(dir.path(), 1);  // the config copies
  for (double efficiency : {0.23, 0.71}) {
    const double published = ModelTokensPerChip(dir.path(), efficiency);
    const std::vector<FittedEfficiency> fits =
        FitMatrixEfficiency(ModelRuns(dir.path(), published));
    ASSERT_EQ(fits.size(), 1u);
    EXPECT_EQ(fits[0].chip, "v6e");
    EXPECT_NEAR(fits[0].fitted, efficiency, 2e-3 * efficiency);
    EXPECT_LE(fits[0].evaluations, 12);
  }
}

TEST(PlanValidationTest, FittingFailsWhenEvenFullEfficiencyIsTooSlow) {
  testing::ScratchDir dir("weft_plan_fit");
  ModelRuns(dir.path(), 1);
  const double too_fast = 1.5 * ModelTokensPerChip(dir.path(), 1);
  try {
    FitMatrixEfficiency(ModelRuns(dir.path(), too_fast));
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("chip 'v6e' reaches only 66."), std::string::npos)
        << e.what();
  }
}

std::string ErrorOf(const std::string& text) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "weft_plan_validation";
  std::filesystem::create_directories(dir);
  const std::filesystem::path file = dir / "runs.toml";
  std::ofstream(file) << text;
  try {
    LoadPublishedRuns(file);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(PlanValidationTest, BadRunsFilesNameTheLineAndTheKey) {
  const std::string good = R"([[run]]
name = "x"
source = "s"
config = "c.toml"
chip = "v6e"
mesh = "fsdp=8"
batch = 8
seq = 1024
remat = "full"
tokens_per_s_per_chip = 100
)";
  EXPECT_EQ(ErrorOf(good), "(no error)");
  EXPECT_NE(ErrorOf(good + "speed = 1\n").find("unknown key 'speed'"), std::string::npos);
  std::string missing = good;
  missing.erase(missing.find("chip = "), std::string("chip = \"v6e\"\n").size());
  EXPECT_NE(ErrorOf(missing).find("missing 'chip'"), std::string::npos) << ErrorOf(missing);
  std::string negative = good;
  negative.replace(negative.find("= 100"), 5, "= -3");
  EXPECT_NE(ErrorOf(negative).find("runs.toml:10: 'tokens_per_s_per_chip' must be a positive"),
            std::string::npos)
      << ErrorOf(negative);
  EXPECT_NE(ErrorOf("band = 2\n" + good).find("band must be a fraction"), std::string::npos);
  EXPECT_NE(ErrorOf("").find("no [[run]] tables"), std::string::npos);
}

}  // namespace
}  // namespace weft
