#include "weft/spmd/propagate_command.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "../hlo/hostile_hlo.h"
#include "weft/base/error.h"
#include "weft/hlo/module.h"

namespace weft {
namespace {

std::string WriteTemp(const std::string& name, const std::string& text) {
  const std::string path = (std::filesystem::temp_directory_path() / name).string();
  std::ofstream(path) << text;
  return path;
}

constexpr const char* kModule = R"(HloModule m, num_partitions=4

ENTRY main {
  p = f32[8,16] parameter(0), sharding={devices=[4,1]<=[4]}
  e = f32[8,16] exponential(p)
  ROOT n = f32[8,16] negate(e)
}
)";

TEST(PropagateCommandTest, PrintsEveryShardingAndHonoursAllowOutput) {
  std::ostringstream out;
  PropagateCommandOptions options;
  options.input = WriteTemp("weft_propagate_in.hlo", kModule);
  options.allow_output = "true";
  options.out = &out;
  EXPECT_EQ(RunPropagateCommand(options), 0);
  EXPECT_NE(out.str().find("e = f32[8,16] exponential(p), sharding={devices=[4,1]<=[4]}"),
            std::string::npos)
      << out.str();
  EXPECT_NE(out.str().find("negate(e), sharding={devices=[4,1]<=[4]}"), std::string::npos);
}

TEST(PropagateCommandTest, WritesOutputFileAndExplains) {
  std::ostringstream out;
  PropagateCommandOptions options;
  options.input = WriteTemp("weft_propagate_in2.hlo", kModule);
  options.output = (std::filesystem::temp_directory_path() / "weft_propagate_out.hlo").string();
  options.explain = "e";
  options.out = &out;
  RunPropagateCommand(options);
  std::ifstream file(options.output);
  std::stringstream written;
  written << file.rdbuf();
  EXPECT_NE(written.str().find("negate(e), sharding={replicated}"), std::string::npos)
      << written.str();
  EXPECT_NE(out.str().find("forward from operand p"), std::string::npos) << out.str();
}

TEST(PropagateCommandTest, BadInputIsAClearError) {
  EXPECT_THROW(ParseBoolList("true,maybe", "--allow-output"), Error);
  EXPECT_EQ(ParseBoolList("true, false,1", "--allow-params"),
            (std::vector<bool>{true, false, true}));
  PropagateCommandOptions options;
  options.input = WriteTemp("weft_propagate_bad.hlo",
                            "HloModule m\n\nENTRY main {\n  p = f32[4 parameter(0)\n}\n");
  try {
    RunPropagateCommand(options);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("weft_propagate_bad.hlo:4:"), std::string::npos)
        << e.what();
  }
  options.input = "/nonexistent/x.hlo";
  EXPECT_THROW(RunPropagateCommand(options), Error);
}

// Hostile input: recursion and over-deep call chains are refused by the
// verifier's one check (CheckCallGraph), as for every command.
std::string PropagateError(const std::string& text) {
  PropagateCommandOptions options;
  options.input = WriteTemp("weft_propagate_hostile.hlo", text);
  std::ostringstream out;
  options.out = &out;
  try {
    RunPropagateCommand(options);
    return "accepted";
  } catch (const Error& e) {
    return e.what();
  }
}

TEST(PropagateCommandTest, RecursionAndOverDeepCallChainsAreRefused) {
  for (const hostile_hlo::RecursiveModule& m : hostile_hlo::RecursiveModules()) {
    const std::string error = PropagateError(m.text);
    EXPECT_NE(error.find(std::string("calls itself: ") + m.cycle), std::string::npos)
        << m.name << ": " << error;
  }
  for (hostile_hlo::ChainKind kind :
       {hostile_hlo::ChainKind::kCall, hostile_hlo::ChainKind::kWhile}) {
    const int64_t depth = hostile_hlo::OverDeepChain(kind);
    EXPECT_NE(PropagateError(hostile_hlo::CallChainModule(depth, kind))
                  .find(fmt::format("calls nest {} deep from computation 'e'", depth)),
              std::string::npos);
    EXPECT_EQ(PropagateError(hostile_hlo::CallChainModule(kMaxCallDepth, kind)), "accepted");
  }
}

}  // namespace
}  // namespace weft
