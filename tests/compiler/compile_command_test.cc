// `weft compile` (RunCompileCommand): prints the per-device program, which
// the parser reads back, with the summary as comments; --fuse fuses; --out
// writes the file whole; unreadable files, bad device counts and modules
// sharded for another device count are refused naming what to change.
#include "weft/compiler/compile_command.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "weft/base/error.h"
#include "weft/hlo/parser.h"

namespace weft::compiler {
namespace {

const char* kModule = R"(HloModule m
ENTRY main {
  a = f32[8,6] parameter(0), sharding={devices=[4,1]<=[4]}
  b = f32[8,6] parameter(1), sharding={devices=[4,1]<=[4]}
  n = f32[8,6] negate(a)
  t = f32[8,6] tanh(b)
  ROOT s = f32[8,6] add(n, t), sharding={replicated}
}
)";

// Elementwise chains on each device: what loop fusion groups.
const char* kChain = R"(HloModule chain
ENTRY main {
  a = f32[8,6] parameter(0), sharding={devices=[4,1]<=[4]}
  b = f32[8,6] parameter(1), sharding={devices=[4,1]<=[4]}
  n = f32[8,6] negate(a)
  t = f32[8,6] tanh(b)
  m = f32[8,6] multiply(n, t)
  e = f32[8,6] exponential(m)
  ROOT s = f32[8,6] add(e, a), sharding={devices=[4,1]<=[4]}
}
)";

std::filesystem::path WriteTemp(const std::string& name, const std::string& text) {
  const auto path = std::filesystem::temp_directory_path() / name;
  std::ofstream(path) << text;
  return path;
}

std::string Compile(CompileCommandOptions options) {
  std::ostringstream out;
  options.out = &out;
  EXPECT_EQ(RunCompileCommand(options), 0);
  return out.str();
}

std::string CompileError(CompileCommandOptions options) {
  std::ostringstream out;
  options.out = &out;
  try {
    RunCompileCommand(options);
    return "accepted";
  } catch (const Error& e) {
    return e.what();
  }
}

TEST(CompileCommandTest, PrintsThePerDeviceProgramAndASummary) {
  const auto input = WriteTemp("weft_compile_in.hlo", kModule);
  CompileCommandOptions options;
  options.input = input.string();
  const std::string text = Compile(options);
  std::unique_ptr<HloModule> module = ParseHloModule(text);  // comments and all
  EXPECT_EQ(module->num_partitions(), 4);
  EXPECT_EQ(module->entry_computation()->GetInstruction("a")->shape().ToString(), "f32[2,6]");
  EXPECT_NE(text.find("// weft compile: 4 devices"), std::string::npos) << text;
  EXPECT_NE(text.find("0 fusions"), std::string::npos) << text;
  EXPECT_EQ(text.find(" fusion("), std::string::npos) << text;
  std::filesystem::remove(input);
}

TEST(CompileCommandTest, IndependentGathersPrintAsOneVariadicAllGather) {
  // Both operands are gathered whole for the replicated products: one
  // all-gather moves both, and parses back.
  const auto input = WriteTemp("weft_compile_gathers.hlo", R"(HloModule gathers
ENTRY main {
  a = f32[8,6] parameter(0), sharding={devices=[4,1]<=[4]}
  b = f32[8,6] parameter(1), sharding={devices=[4,1]<=[4]}
  ta = f32[6,8] transpose(a), dimensions={1,0}, sharding={replicated}
  tb = f32[6,8] transpose(b), dimensions={1,0}, sharding={replicated}
  ROOT d = f32[6,6] dot(ta, tb), lhs_contracting_dims={1}, rhs_contracting_dims={1}, sharding={replicated}
}
)");
  CompileCommandOptions options;
  options.input = input.string();
  const std::string text = Compile(options);
  std::unique_ptr<HloModule> module = ParseHloModule(text);
  EXPECT_NE(text.find("// 2 collectives combined into 1 variadic one"), std::string::npos) << text;
  EXPECT_NE(text.find("(f32[8,6], f32[8,6]) all-gather("), std::string::npos) << text;
  std::filesystem::remove(input);
}

TEST(CompileCommandTest, FuseMakesFusionsThatParseBack) {
  const auto input = WriteTemp("weft_compile_fuse.hlo", kChain);
  CompileCommandOptions options;
  options.input = input.string();
  options.fuse = true;
  const std::string text = Compile(options);
  EXPECT_NE(text.find("fusion("), std::string::npos) << text;
  EXPECT_NE(text.find("kind=kLoop"), std::string::npos) << text;
  EXPECT_EQ(text.find("// 0 fusions"), std::string::npos) << text;
  std::unique_ptr<HloModule> module = ParseHloModule(text);
  EXPECT_EQ(module->num_partitions(), 4);
  std::filesystem::remove(input);
}

TEST(CompileCommandTest, PropagatesAnUnshardedModuleForTheGivenDevices) {
  const auto input = WriteTemp("weft_compile_plain.hlo",
                               "HloModule p\nENTRY main {\n  a = f32[4] parameter(0)\n"
                               "  ROOT n = f32[4] negate(a)\n}\n");
  CompileCommandOptions options;
  options.input = input.string();
  options.num_devices = 2;
  const std::string text = Compile(options);
  EXPECT_NE(text.find("// weft compile: 2 devices, shardings propagated"), std::string::npos)
      << text;
  ParseHloModule(text);
  std::filesystem::remove(input);
}

TEST(CompileCommandTest, WritesTheOutputFileWhole) {
  const auto input = WriteTemp("weft_compile_in2.hlo", kChain);
  const auto output = std::filesystem::temp_directory_path() / "weft_compile_out.hlo";
  CompileCommandOptions options;
  options.input = input.string();
  options.output = output.string();
  options.num_devices = 4;
  options.fuse = true;
  std::ostringstream out;
  options.out = &out;
  EXPECT_EQ(RunCompileCommand(options), 0);
  EXPECT_EQ(out.str(), "");
  std::ifstream in(output);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_EQ(ParseHloModule(text.str())->num_partitions(), 4);
  for (const auto& entry : std::filesystem::directory_iterator(output.parent_path())) {
    EXPECT_EQ(entry.path().string().find("weft_compile_out.hlo.tmp"), std::string::npos);
  }
  std::filesystem::remove(input);
  std::filesystem::remove(output);
}

TEST(CompileCommandTest, RefusesWithAClearMessage) {
  CompileCommandOptions options;
  options.input = "/nonexistent/model.hlo";
  EXPECT_NE(CompileError(options).find("cannot read '/nonexistent/model.hlo'"), std::string::npos);

  const auto input = WriteTemp("weft_compile_bad.hlo", kModule);
  options.input = input.string();
  // 0 is refused like a negative count (it read as "from the module").
  for (int64_t n : {int64_t{-1}, int64_t{0}, int64_t{1} << 20}) {
    options.num_devices = n;
    EXPECT_NE(CompileError(options).find("--num-devices must be between 1 and 65536"),
              std::string::npos);
  }
  options.num_devices = 2;
  const std::string other = CompileError(options);
  EXPECT_NE(other.find("is sharded for 4 devices, not 2"), std::string::npos) << other;
  EXPECT_NE(other.find("--num-devices 4"), std::string::npos) << other;

  const auto broken = WriteTemp("weft_compile_broken.hlo",
                                "HloModule m\nENTRY main {\n  ROOT x = f32[ parameter(0)\n}\n");
  options.input = broken.string();
  options.num_devices.reset();
  EXPECT_NE(CompileError(options).find("weft_compile_broken.hlo:3:"), std::string::npos);
  std::filesystem::remove(input);
  std::filesystem::remove(broken);
}

}  // namespace
}  // namespace weft::compiler
