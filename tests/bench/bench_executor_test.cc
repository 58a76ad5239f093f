// `weft bench executor --hlo` and `--gemm`: runs the weft binary on a small
// HLO module and on small dots and checks what it reports (structure and
// sanity, never speed), and that bad input is refused by name.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "run_weft.h"

namespace {

using weft::testing::Output;
using weft::testing::RunWeft;

// Writes `text` to a fresh file under the temp directory.
std::string WriteTemp(const std::string& name, const std::string& text) {
  const std::filesystem::path path =
      std::filesystem::temp_directory_path() / (std::to_string(::getpid()) + "_" + name);
  std::ofstream(path) << text;
  return path.string();
}

// A bf16 SiLU-like chain: the logistic has two users (the multiply and the
// root), so it stays an instruction of its own; the multiplies fuse.
constexpr const char* kModule = R"(HloModule silu

ENTRY main {
  g = bf16[64,256] parameter(0)
  up = bf16[64,256] parameter(1)
  s = bf16[64,256] logistic(g)
  m = bf16[64,256] multiply(g, s)
  y = bf16[64,256] multiply(m, up)
  ROOT t = (bf16[64,256], bf16[64,256]) tuple(s, y)
}
)";

TEST(BenchExecutorTest, ModuleJsonListsItsSlowestInstructionsWithinTheRunsTime) {
  const std::string path = WriteTemp("silu.hlo", kModule);
  const Output o = RunWeft("bench executor --hlo '" + path + "' --reps 3 --top 4 --json");
  std::filesystem::remove(path);
  ASSERT_EQ(o.exit_code, 0) << o.err << o.out;
  const nlohmann::json j = nlohmann::json::parse(o.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << "not one JSON object:\n" << o.out;
  EXPECT_EQ(j.at("benchmark"), "executor_module");
  EXPECT_EQ(j.at("reps"), 3);
  const double total = j.at("seconds").get<double>();
  EXPECT_GT(total, 0);
  const nlohmann::json& list = j.at("instructions");
  ASSERT_FALSE(list.empty());
  EXPECT_LE(list.size(), 4u);
  double listed = 0, previous = 1e9;
  bool logistic = false;
  for (const auto& row : list) {
    const double s = row.at("seconds").get<double>();
    EXPECT_GE(s, 0);
    EXPECT_LE(s, previous) << "not sorted by time";
    previous = s;
    listed += s;
    logistic = logistic || row.at("instruction") == "s";
  }
  EXPECT_TRUE(logistic) << o.out;  // the largest op of the module is listed
  // Medians of parts can exceed the median of wholes only by noise.
  EXPECT_LE(listed, 2 * total);
}

TEST(BenchExecutorTest, ModuleTableNamesTheFusion) {
  const std::string path = WriteTemp("silu_table.hlo", kModule);
  const Output o = RunWeft("bench executor --hlo '" + path + "' --reps 1");
  std::filesystem::remove(path);
  ASSERT_EQ(o.exit_code, 0) << o.err << o.out;
  EXPECT_NE(o.out.find("fused; median of 1 runs"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("fusion(kLoop: multiply)"), std::string::npos) << o.out;
}

// --gemm times each shape as [M,K] x [K,N] and as a weight gradient (the
// lhs stored [K,M]: weft's register block), both as positive GFLOP/s.
TEST(BenchExecutorTest, GemmJsonReportsThePlainAndTheTransposedLhsProduct) {
  const Output o = RunWeft("bench executor --gemm --gemm-shape 64x96x32 40x24x48 --reps 1 --json");
  ASSERT_EQ(o.exit_code, 0) << o.err << o.out;
  const nlohmann::json j = nlohmann::json::parse(o.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << "not one JSON object:\n" << o.out;
  EXPECT_EQ(j.at("benchmark"), "executor_gemm");
  const nlohmann::json& rows = j.at("results");
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].at("m"), 64);
  EXPECT_EQ(rows[1].at("n"), 48);
  for (const auto& row : rows) {
    EXPECT_GT(row.at("f32_gflops").get<double>(), 0) << row;
    EXPECT_GT(row.at("f32_transposed_lhs_gflops").get<double>(), 0) << row;
  }
}

TEST(BenchExecutorTest, BadInputIsRefusedByName) {
  Output o = RunWeft("bench executor --hlo /nonexistent/weft.hlo");
  EXPECT_EQ(o.exit_code, 2) << o.err << o.out;
  EXPECT_NE(o.err.find("/nonexistent/weft.hlo"), std::string::npos) << o.err;

  const std::string path = WriteTemp("bad.hlo", "HloModule bad\n\nENTRY main {\n  ROOT x = \n}\n");
  o = RunWeft("bench executor --hlo '" + path + "'");
  EXPECT_EQ(o.exit_code, 2) << o.err << o.out;
  EXPECT_NE(o.err.find("bad.hlo"), std::string::npos) << o.err;

  o = RunWeft("bench executor --hlo '" + path + "' --gemm");
  std::filesystem::remove(path);
  EXPECT_EQ(o.exit_code, 2) << o.err << o.out;
  EXPECT_NE(o.err.find("--hlo"), std::string::npos) << o.err;
}

}  // namespace
