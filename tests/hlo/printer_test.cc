#include "weft/hlo/printer.h"

#include <gtest/gtest.h>

#include "weft/hlo/builder.h"
#include "weft/hlo/parser.h"

namespace weft {
namespace {

constexpr const char* kModule = R"(HloModule m, num_partitions=2

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

ENTRY main {
  x = f32[4,8] parameter(0), sharding={devices=[2,1]<=[2]}
  t = (f32[4,8], s32[]) parameter(1)
  zero = f32[] constant(0)
  r = f32[4] reduce(x, zero), dimensions={1}, to_apply=add
  ROOT out = (f32[4], f32[4,8]) tuple(r, x)
}
)";

TEST(PrinterTest, CanonicalIsTheDefault) {
  std::unique_ptr<HloModule> module = ParseHloModule(kModule);
  EXPECT_EQ(PrintModule(*module), kModule);
  EXPECT_EQ(module->ToString(), kModule);
  EXPECT_EQ(PrintModule(*module, HloPrintOptions::Canonical()), kModule);
}

TEST(PrinterTest, XlaStyle) {
  std::unique_ptr<HloModule> module = ParseHloModule(kModule);
  EXPECT_EQ(
      PrintModule(*module, HloPrintOptions::XlaStyle()),
      R"(HloModule m, entry_computation_layout={(f32[4,8]{1,0}, (f32[4,8]{1,0}, s32[]))->(f32[4]{0}, f32[4,8]{1,0})}, num_partitions=2

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(f32[] %a, f32[] %b)
}

ENTRY %main (x: f32[4,8]{1,0}, t: (f32[4,8]{1,0}, s32[])) -> (f32[4]{0}, f32[4,8]{1,0}) {
  %x = f32[4,8]{1,0} parameter(0), sharding={devices=[2,1]<=[2]}
  %t = (f32[4,8]{1,0}, s32[]) parameter(1)
  %zero = f32[] constant(0)
  %r = f32[4]{0} reduce(f32[4,8]{1,0} %x, f32[] %zero), dimensions={1}, to_apply=%add
  ROOT %out = (f32[4]{0}, f32[4,8]{1,0}) tuple(f32[4]{0} %r, f32[4,8]{1,0} %x)
}
)");
}

TEST(PrinterTest, InstructionLines) {
  std::unique_ptr<HloModule> module = ParseHloModule(kModule);
  HloComputation* entry = module->entry_computation();
  EXPECT_EQ(PrintInstruction(*entry->GetInstruction("r")),
            "r = f32[4] reduce(x, zero), dimensions={1}, to_apply=add");
  EXPECT_EQ(entry->GetInstruction("out")->ToString(), "ROOT out = (f32[4], f32[4,8]) tuple(r, x)");
  EXPECT_EQ(PrintComputation(*module->GetComputation("add")),
            "add {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n"
            "  ROOT s = f32[] add(a, b)\n}\n");
}

TEST(PrinterTest, AttributePieces) {
  EXPECT_EQ(ReplicaGroupsToString({}), "{}");
  EXPECT_EQ(ReplicaGroupsToString({{0, 2}, {1, 3}}), "{{0,2},{1,3}}");
  EXPECT_EQ(PaddingToString({{0, 0, 0}, {1, -2, 0}}), "0_0x1_-2");
  EXPECT_EQ(PaddingToString({{0, 0, 1}, {1, 2, 0}}), "0_0_1x1_2_0");
}

TEST(PrinterTest, BackendConfigQuotingAndEscapes) {
  HloModule module("m");
  HloComputationBuilder b("main");
  HloInstruction* p = b.Parameter(0, Shape(PrimitiveType::kF32, {2}), "p");
  b.CustomCall({p}, Shape(PrimitiveType::kF32, {2}), "say", "a \"quoted\"\nline\\");
  module.AddEntryComputation(b.Build());
  const std::string text = PrintModule(module);
  EXPECT_NE(text.find(R"(backend_config="a \"quoted\"\nline\\")"), std::string::npos) << text;
  std::unique_ptr<HloModule> back = ParseHloModule(text);
  EXPECT_EQ(back->entry_computation()->root_instruction()->attrs().backend_config,
            "a \"quoted\"\nline\\");
}

}  // namespace
}  // namespace weft
