// `weft plan --auto` on a small config: every candidate is planned once,
// the ranked ones fit within the headroom and come fastest first, the
// others say why they lost, and bad options are errors.
#include "weft/train/plan_search.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <set>

#include "../analysis/tiny_step.h"
#include "weft/base/error.h"

namespace weft {
namespace {

RunConfig Tiny() { return LoadRunConfig(analysis::testing::kSource / "configs/tiny.toml"); }

AutoPlanOptions FourChips() {
  AutoPlanOptions o;
  o.chip = "v6e";
  o.chips = 4;
  o.batch_size = 16;
  return o;
}

TEST(PlanSearchTest, EveryCandidateIsPlannedAndTheFittingOnesRankFastestFirst) {
  AutoPlanOptions o = FourChips();
  o.remats = {"none", "full", "save_dots"};
  const AutoPlan p = SearchPlans(Tiny(), o);
  // Meshes of 4 chips: tensor 1 (fsdp 1, 2, 4), tensor 2 (fsdp 1, 2), tensor 4.
  EXPECT_EQ(p.candidates.size(), 6 * 3 * 4);
  EXPECT_EQ(p.ranked + p.does_not_fit + p.invalid, static_cast<int64_t>(p.candidates.size()));
  ASSERT_GT(p.ranked, 0);
  std::set<std::string> seen;
  for (size_t i = 0; i < p.candidates.size(); ++i) {
    const AutoCandidate& c = p.candidates[i];
    EXPECT_TRUE(
        seen.insert(MeshText(c.mesh) + " " + c.remat + " " + std::to_string(c.grad_accum)).second);
    if (static_cast<int64_t>(i) < p.ranked) {
      EXPECT_EQ(c.outcome, AutoCandidate::Outcome::kRanked);
      EXPECT_LE(static_cast<double>(c.peak_bytes), p.budget_bytes);
      EXPECT_GT(c.tokens_per_s_per_chip, 0);
      if (i > 0) {
        EXPECT_LE(c.tokens_per_s_per_chip, p.candidates[i - 1].tokens_per_s_per_chip);
      }
    } else {
      EXPECT_NE(c.outcome, AutoCandidate::Outcome::kRanked);
      EXPECT_FALSE(c.why.empty());
    }
  }
  // A 16-sequence batch does not split 8 ways over 4 data-parallel devices.
  bool batch_refused = false;
  for (const AutoCandidate& c : p.candidates) {
    batch_refused =
        batch_refused || (c.outcome == AutoCandidate::Outcome::kInvalid && c.grad_accum == 8 &&
                          c.why.find("the micro-batch, --batch 16 / 8") != std::string::npos);
  }
  EXPECT_TRUE(batch_refused);
  const std::string text = FormatAutoPlanText(p, 5);
  EXPECT_NE(text.find("VERDICT: best"), std::string::npos) << text;
  EXPECT_NE(text.find("Why the others lost"), std::string::npos) << text;
  const nlohmann::json j = nlohmann::json::parse(FormatAutoPlanJson(p));
  EXPECT_EQ(j["schema"], "weft.plan-auto/1");
  EXPECT_EQ(j["candidates"].size(), p.candidates.size());
  EXPECT_EQ(j["candidates"][0]["outcome"], "fits");
}

TEST(PlanSearchTest, TheHeadroomDecidesWhatFits) {
  AutoPlanOptions o = FourChips();
  o.remats = {"none", "full"};
  o.grad_accums = {1};
  const AutoPlan loose = SearchPlans(Tiny(), o);
  ASSERT_GT(loose.ranked, 0);
  // A budget just below the smallest fitting peak: nothing fits.
  int64_t smallest = loose.candidates[0].peak_bytes;
  for (int64_t i = 0; i < loose.ranked; ++i) {
    smallest = std::min(smallest, loose.candidates[i].peak_bytes);
  }
  o.headroom = 1 - 0.999 * static_cast<double>(smallest) / loose.chip.hbm_bytes;
  const AutoPlan tight = SearchPlans(Tiny(), o);
  EXPECT_EQ(tight.ranked, 0);
  EXPECT_EQ(tight.does_not_fit, loose.ranked + loose.does_not_fit);
  EXPECT_NE(FormatAutoPlanText(tight, 10).find("no candidate fits"), std::string::npos);
}

TEST(PlanSearchTest, BadOptionsAreErrors) {
  AutoPlanOptions o = FourChips();
  o.chips = 0;
  EXPECT_THROW(SearchPlans(Tiny(), o), Error);
  o = FourChips();
  o.headroom = 1;
  EXPECT_THROW(SearchPlans(Tiny(), o), Error);
  o = FourChips();
  o.slices = 3;
  try {
    SearchPlans(Tiny(), o);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--slices 3"), std::string::npos) << e.what();
  }
  o = FourChips();
  o.chip = "v9";
  EXPECT_THROW(SearchPlans(Tiny(), o), Error);
  // A billion chips was blamed on --dcn, which was never given.
  o = FourChips();
  o.chips = 1000000000;
  try {
    SearchPlans(Tiny(), o);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--chips 1000000000: more than 65536 chips"),
              std::string::npos)
        << e.what();
    EXPECT_EQ(std::string(e.what()).find("--dcn"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace weft
