// The report's three forms: JSON with every documented key and consistent
// numbers, a text that fits a terminal and names what matters, and an SVG.
#include "weft/train/plan_report.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <sstream>

#include "../analysis/tiny_step.h"

namespace weft {
namespace {

StepPlan TinyPlan() {
  const RunConfig config = LoadRunConfig(analysis::testing::kSource / "configs/tiny.toml");
  PlanOptions o;
  o.chip = "local-cpu";
  o.batch_size = 4;
  o.seq_len = 64;
  return PlanTrainingStep(config, o);
}

StepPlan BigPlanWithoutShardAs() {
  const RunConfig config = LoadRunConfig(analysis::testing::kSource / "configs/llama3.1-405b.toml");
  PlanOptions o;
  o.chip = "v6e";
  o.mesh = ParseMeshFlag("fsdp=64,tensor=4");
  o.batch_size = 64;
  o.seq_len = 8192;
  o.remat = "full";
  o.shard_as = false;
  return PlanTrainingStep(config, o);
}

TEST(ReportTest, JsonFollowsTheDocumentedSchema) {
  const StepPlan p = TinyPlan();
  const nlohmann::json j = nlohmann::json::parse(FormatPlanJson(p));
  EXPECT_EQ(j["schema"], "weft.plan/2");
  for (const char* key :
       {"config", "chip", "chips_file", "mesh", "precision", "remat", "shard_as", "batch_size",
        "seq_len", "tokens_per_step", "parameters", "memory", "collectives", "compute", "time",
        "verdict", "warnings", "plan_seconds"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  for (const char* key : {"name", "description", "hbm_bytes", "peak_flops", "ici_bytes_per_s",
                          "dcn_bytes_per_s", "host_bytes_per_s", "max_slice_chips", "source"}) {
    EXPECT_TRUE(j["chip"].contains(key)) << key;
  }
  const nlohmann::json& m = j["memory"];
  for (const char* key :
       {"hbm_bytes", "peak_bytes", "program_peak_bytes", "static_bytes", "parameter_bytes",
        "gradient_bytes", "optimizer_bytes", "host_bytes", "saved_bytes", "fits", "margin_bytes",
        "peak_breakdown", "peak_at", "largest_buffers", "timeline", "unsplit_stacked"}) {
    EXPECT_TRUE(m.contains(key)) << key;
  }
  EXPECT_EQ(j["precision"], "bf16");  // tiny.toml does not say: weft train's default
  EXPECT_EQ(j["mesh"]["devices"], 4);
  EXPECT_EQ(j["mesh"]["axes"][0]["name"], "fsdp");
  int64_t sum = 0;
  for (const auto& [k, v] : m["peak_breakdown"].items()) sum += v.get<int64_t>();
  EXPECT_EQ(sum, m["peak_bytes"].get<int64_t>());
  EXPECT_EQ(m["peak_bytes"].get<int64_t>(),
            m["program_peak_bytes"].get<int64_t>() + m["optimizer_bytes"].get<int64_t>());
  EXPECT_EQ(j["verdict"], m["fits"].get<bool>() ? "fits" : "does not fit");
  const nlohmann::json& largest = m["largest_buffers"];
  ASSERT_EQ(largest.size(), 10u);
  for (size_t i = 0; i < largest.size(); ++i) {
    for (const char* key : {"instruction", "computation", "role", "category", "bytes", "dtype",
                            "local_shape", "global_shape", "sharding", "split_axes"}) {
      EXPECT_TRUE(largest[i].contains(key)) << key;
    }
    if (i > 0) {
      EXPECT_LE(largest[i]["bytes"], largest[i - 1]["bytes"]);
    }
  }
  const nlohmann::json& tl = m["timeline"];
  EXPECT_EQ(tl["steps"].size(), tl["total"].size());
  EXPECT_EQ(tl["by_category"]["saved"].size(), tl["total"].size());
  int64_t highest = 0;
  for (const auto& v : tl["total"]) highest = std::max(highest, v.get<int64_t>());
  // The timeline counts live bytes; on local-cpu the program's peak is the
  // executor's buffer assignment, which adds its packing and scratch.
  EXPECT_EQ(highest, m["live_peak_bytes"].get<int64_t>());
  EXPECT_LE(highest, m["program_peak_bytes"].get<int64_t>());
  EXPECT_EQ(j["collectives"]["by_kind"].size(), 5u);
  EXPECT_GT(j["collectives"]["bytes"].get<int64_t>(), 0);
  EXPECT_GT(j["time"]["step_s"].get<double>(), 0);
}

// A config path need not be UTF-8; the JSON report still prints (the bytes
// replaced), never the JSON library's exception.
TEST(ReportTest, JsonOfAPathThatIsNotUtf8) {
  StepPlan p = TinyPlan();
  p.config_source = "configs/caf\xe9.toml";
  const nlohmann::json j = nlohmann::json::parse(FormatPlanJson(p));
  EXPECT_EQ(j["config"], "configs/caf\xef\xbf\xbd.toml");
}

TEST(ReportTest, TextFitsATerminalAndNamesTheLargestBuffers) {
  const StepPlan p = BigPlanWithoutShardAs();
  const std::string text = FormatPlanText(p);
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) EXPECT_LE(line.size(), 110u) << line;
  EXPECT_NE(text.find("VERDICT: does not fit"), std::string::npos);
  EXPECT_NE(text.find("grad layers.feed_forward.w1"), std::string::npos);
  EXPECT_NE(text.find("not split along fsdp"), std::string::npos);
  for (const PeakBuffer& b : p.top_buffers) {
    EXPECT_NE(text.find(b.buffer.instruction), std::string::npos) << b.buffer.instruction;
  }
}

TEST(ReportTest, SvgDrawsTheBreakdownAndTheTimeline) {
  const StepPlan p = TinyPlan();
  const std::string svg = RenderPlanSvg(p);
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_EQ(svg.substr(svg.size() - 7), "</svg>\n");
  EXPECT_NE(svg.find("<polygon"), std::string::npos);
  EXPECT_NE(svg.find("HBM"), std::string::npos);
  EXPECT_NE(svg.find("optimizer state"), std::string::npos);
  EXPECT_EQ(std::count(svg.begin(), svg.end(), '<'), std::count(svg.begin(), svg.end(), '>'));
  // The simulated step's streams, with the compute stream's busy intervals.
  EXPECT_NE(svg.find("Simulated step"), std::string::npos);
  for (const char* lane : {">compute<", ">ici<", ">dcn<"}) {
    EXPECT_NE(svg.find(lane), std::string::npos) << lane;
  }
  ASSERT_FALSE(p.time.busy[0].empty());
  EXPECT_NE(svg.find("fill=\"#4e79a7\"/>"), std::string::npos);
}

TEST(ReportTest, TheVerdictComesFirstThenTheSimulatedStep) {
  const StepPlan p = BigPlanWithoutShardAs();
  const std::string text = FormatPlanText(p);
  const size_t verdict = text.find("VERDICT:"), step = text.find("Step time "),
               memory = text.find("Memory per chip");
  ASSERT_NE(verdict, std::string::npos);
  ASSERT_NE(step, std::string::npos);
  ASSERT_NE(memory, std::string::npos);
  EXPECT_LT(verdict, step);
  EXPECT_LT(step, memory);
  EXPECT_NE(text.find("critical path  compute"), std::string::npos) << text;
  EXPECT_NE(text.find("tokens/s per chip"), std::string::npos);
  const nlohmann::json j = nlohmann::json::parse(FormatPlanJson(p));
  const nlohmann::json& t = j["time"];
  EXPECT_NEAR(t["step_s"].get<double>(),
              t["compute_s"].get<double>() + t["exposed_ici_s"].get<double>() +
                  t["exposed_dcn_s"].get<double>() + t["exposed_host_s"].get<double>(),
              1e-9 * t["step_s"].get<double>());
  EXPECT_NEAR(t["tokens_per_s_per_chip"].get<double>(),
              64.0 * 8192 / 256 / t["step_s"].get<double>(), 1e-6);
  EXPECT_FALSE(t["top"].empty());
  EXPECT_GT(t["ici_s"].get<double>(), 0);
}

TEST(ReportTest, BytesUseDecimalUnits) {
  EXPECT_EQ(FormatBytes(25.37e9), "25.37 GB");
  EXPECT_EQ(FormatBytes(512), "512 B");
  EXPECT_EQ(FormatBytes(-2.5e6), "-2.50 MB");
}

}  // namespace
}  // namespace weft
