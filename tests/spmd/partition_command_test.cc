#include "weft/spmd/partition_command.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "weft/base/error.h"
#include "weft/hlo/parser.h"

namespace weft {
namespace {

const char* kModule = R"(HloModule m
ENTRY main {
  a = f32[8,6] parameter(0), sharding={devices=[4,1]<=[4]}
  ROOT n = f32[8,6] negate(a), sharding={replicated}
}
)";

std::filesystem::path WriteTemp(const std::string& name, const std::string& text) {
  const auto path = std::filesystem::temp_directory_path() / name;
  std::ofstream(path) << text;
  return path;
}

TEST(PartitionCommandTest, PrintsThePerDeviceProgram) {
  const auto input = WriteTemp("weft_partition_in.hlo", kModule);
  std::ostringstream out;
  PartitionCommandOptions options;
  options.input = input.string();
  options.out = &out;
  EXPECT_EQ(RunPartitionCommand(options), 0);
  auto module = ParseHloModule(out.str());
  EXPECT_EQ(module->num_partitions(), 4);
  EXPECT_EQ(module->entry_computation()->GetInstruction("a")->shape().ToString(), "f32[2,6]");
  EXPECT_NE(out.str().find("all-gather"), std::string::npos);
  std::filesystem::remove(input);
}

TEST(PartitionCommandTest, WritesTheOutputFileWhole) {
  const auto input = WriteTemp("weft_partition_in2.hlo", kModule);
  const auto output = std::filesystem::temp_directory_path() / "weft_partition_out.hlo";
  PartitionCommandOptions options;
  options.input = input.string();
  options.output = output.string();
  options.num_partitions = 4;
  EXPECT_EQ(RunPartitionCommand(options), 0);
  std::ifstream in(output);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_EQ(ParseHloModule(text.str())->num_partitions(), 4);
  for (const auto& entry : std::filesystem::directory_iterator(output.parent_path())) {
    EXPECT_EQ(entry.path().string().find("weft_partition_out.hlo.tmp"), std::string::npos);
  }
  std::filesystem::remove(input);
  std::filesystem::remove(output);
}

TEST(PartitionCommandTest, BadInputNamesTheFile) {
  PartitionCommandOptions options;
  options.input = "/nonexistent/model.hlo";
  try {
    RunPartitionCommand(options);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/model.hlo"), std::string::npos);
  }
  const auto input = WriteTemp("weft_partition_bad.hlo", "HloModule m\nENTRY main {\n  ROOT x = f32[ parameter(0)\n}\n");
  options.input = input.string();
  try {
    RunPartitionCommand(options);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("weft_partition_bad.hlo:3:"), std::string::npos) << e.what();
  }
  std::filesystem::remove(input);
}

}  // namespace
}  // namespace weft
