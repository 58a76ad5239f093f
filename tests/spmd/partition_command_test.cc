#include "weft/spmd/partition_command.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "../hlo/hostile_hlo.h"
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
  const auto input = WriteTemp("weft_partition_bad.hlo",
                               "HloModule m\nENTRY main {\n  ROOT x = f32[ parameter(0)\n}\n");
  options.input = input.string();
  try {
    RunPartitionCommand(options);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("weft_partition_bad.hlo:3:"), std::string::npos)
        << e.what();
  }
  std::filesystem::remove(input);
}

// Hostile input. A computation that called itself overflowed the stack of
// `weft partition` (propagate and run refused it); now one check, in the
// verifier, refuses it for every command. So are call chains deeper than
// kMaxCallDepth (10,000 overflowed the stack too), while the deepest allowed
// partitions.
std::string PartitionError(const std::string& text,
                           std::optional<int64_t> num_partitions = std::nullopt) {
  const auto input = WriteTemp("weft_partition_hostile.hlo", text);
  PartitionCommandOptions options;
  options.input = input.string();
  options.num_partitions = num_partitions;
  std::ostringstream out;
  options.out = &out;
  try {
    RunPartitionCommand(options);
    return "accepted";
  } catch (const Error& e) {
    return e.what();
  }
}

TEST(PartitionCommandTest, RecursionIsRefusedNamingTheCycle) {
  for (const hostile_hlo::RecursiveModule& m : hostile_hlo::RecursiveModules()) {
    const std::string error = PartitionError(m.text);
    EXPECT_NE(error.find("weft_partition_hostile.hlo: computation"), std::string::npos)
        << m.name << ": " << error;
    EXPECT_NE(error.find(std::string("calls itself: ") + m.cycle), std::string::npos)
        << m.name << ": " << error;
  }
}

TEST(PartitionCommandTest, CallChainsAreBoundedAndTheDeepestAllowedPartitions) {
  for (hostile_hlo::ChainKind kind :
       {hostile_hlo::ChainKind::kCall, hostile_hlo::ChainKind::kWhile}) {
    const int64_t depth = hostile_hlo::OverDeepChain(kind);
    const std::string error = PartitionError(hostile_hlo::CallChainModule(depth, kind), 2);
    EXPECT_NE(error.find(fmt::format("calls nest {} deep from computation 'e'", depth)),
              std::string::npos)
        << error;
    EXPECT_EQ(PartitionError(hostile_hlo::CallChainModule(kMaxCallDepth, kind), 2), "accepted");
  }
}

TEST(PartitionCommandTest, DeviceCountsAreBounded) {
  // 0 read as "from the module" while negatives were refused; both are
  // refused now (leaving the flag out is the default).
  for (int64_t n : {int64_t{1000000000}, int64_t{0}, int64_t{-1}}) {
    EXPECT_NE(PartitionError(kModule, n).find("--num-partitions must be between 1 and 65536"),
              std::string::npos)
        << n;
  }
  EXPECT_NE(PartitionError(kModule, 0).find("got 0"), std::string::npos);
  const std::string giant = PartitionError(
      "HloModule m\nENTRY e {\n  ROOT p = f32[8] parameter(0), "
      "sharding={devices=[1000000000]<=[1000000000]}\n}");
  EXPECT_NE(giant.find("weft_partition_hostile.hlo:3:51: bad sharding: tile assignment "
                       "[1000000000] spans more than 65536 devices"),
            std::string::npos)
      << giant;
}

// Hostile input: a module naming device 99 in replica_groups with
// num_partitions=4 was partitioned and printed (exit 0) while weft run
// refused it. Now the parser's verifier refuses it for every command, and a
// module that declares no count is checked against --num-partitions (the
// same check, hlo/verifier.h CheckDeviceIds), naming the instruction.
TEST(PartitionCommandTest, DeviceIdsOutsideTheProgramAreRefused) {
  const std::string body = R"(
add {
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  ROOT s = f32[] add(x, y)
}
ENTRY main {
  a = f32[8,6] parameter(0), sharding={devices=[4,1]<=[4]}
  ROOT ar = f32[8,6] all-reduce(a), replica_groups={{0,1},{2,99}}, to_apply=add
}
)";
  const std::string declared = PartitionError("HloModule m, num_partitions=4" + body);
  EXPECT_NE(declared.find("weft_partition_hostile.hlo:9:3: 'ar' (all-reduce): replica_groups "
                          "{{0,1},{2,99}} name device 99, but the program has 4 devices"),
            std::string::npos)
      << declared;
  const std::string asked = PartitionError("HloModule m" + body, 4);
  EXPECT_NE(asked.find("9:3: 'ar' (all-reduce): replica_groups {{0,1},{2,99}} name device 99, "
                       "but the program has 4 devices, ids 0..3 (partitioned for 4 as asked)"),
            std::string::npos)
      << asked;
  const std::string spanned = PartitionError("HloModule m" + body);
  EXPECT_NE(spanned.find("(the 4 devices the module's shardings span)"), std::string::npos)
      << spanned;
}

}  // namespace
}  // namespace weft
