#include "weft/hlo/printer.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "weft/base/error.h"
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

// A loop fusion as XLA prints it (fused computations first, %names, operand
// shapes, layouts, signatures): parsed, then printed back the same, in both
// styles; every fusion kind parses.
TEST(PrinterTest, FusionRoundTripsInXlaStyle) {
  constexpr const char* kXla =
      R"(HloModule m, entry_computation_layout={(f32[8,128]{1,0}, f32[128]{0})->f32[8,128]{1,0}}

%fused_computation.3 (param_0: f32[8,128], param_1: f32[128]) -> f32[8,128] {
  %param_0 = f32[8,128]{1,0} parameter(0)
  %param_1 = f32[128]{0} parameter(1)
  %broadcast.1 = f32[8,128]{1,0} broadcast(f32[128]{0} %param_1), dimensions={1}
  ROOT %add.2 = f32[8,128]{1,0} add(f32[8,128]{1,0} %param_0, f32[8,128]{1,0} %broadcast.1)
}

ENTRY %main (a: f32[8,128], b: f32[128]) -> f32[8,128] {
  %a = f32[8,128]{1,0} parameter(0)
  %b = f32[128]{0} parameter(1)
  ROOT %fusion.3 = f32[8,128]{1,0} fusion(f32[8,128]{1,0} %a, f32[128]{0} %b), kind=kLoop, calls=%fused_computation.3
}
)";
  std::unique_ptr<HloModule> module = ParseHloModule(kXla);
  // weft's XLA style adds layouts to signatures; everything else is as XLA
  // printed it, and it parses back to the same module.
  std::string want = kXla;
  for (const auto& [from, to] : std::vector<std::pair<std::string, std::string>>{
           {"(param_0: f32[8,128], param_1: f32[128]) -> f32[8,128] {",
            "(param_0: f32[8,128]{1,0}, param_1: f32[128]{0}) -> f32[8,128]{1,0} {"},
           {"(a: f32[8,128], b: f32[128]) -> f32[8,128] {",
            "(a: f32[8,128]{1,0}, b: f32[128]{0}) -> f32[8,128]{1,0} {"}}) {
    want.replace(want.find(from), from.size(), to);
  }
  const std::string xla_style = PrintModule(*module, HloPrintOptions::XlaStyle());
  EXPECT_EQ(xla_style, want);
  EXPECT_EQ(ParseHloModule(xla_style)->ToString(), module->ToString());
  const HloInstruction* fusion = module->entry_computation()->root_instruction();
  ASSERT_EQ(fusion->opcode(), HloOpcode::kFusion);
  EXPECT_EQ(fusion->attrs().fusion_kind, FusionKind::kLoop);
  EXPECT_EQ(fusion->fused_computation()->name(), "fused_computation.3");
  const std::string canonical = module->ToString();
  EXPECT_NE(canonical.find("ROOT fusion.3 = f32[8,128] fusion(a, b), kind=kLoop, "
                           "calls=fused_computation.3"),
            std::string::npos)
      << canonical;
  EXPECT_EQ(ParseHloModule(canonical)->ToString(), canonical);
  for (const char* kind : {"kInput", "kOutput", "kCustom"}) {
    std::string text = canonical;
    text.replace(text.find("kLoop"), 5, kind);
    std::unique_ptr<HloModule> other = ParseHloModule(text);
    EXPECT_EQ(FusionKindString(other->entry_computation()->root_instruction()->attrs().fusion_kind),
              kind);
    EXPECT_EQ(other->ToString(), text);
  }
}

// The verifier (run by the parser) rejects a fusion whose operands do not
// match its fused computation's parameters, and an unknown kind.
TEST(PrinterTest, FusionOperandsMustMatchTheFusedComputation) {
  const std::string fused = R"(HloModule m
fc {
  p0 = f32[8] parameter(0)
  p1 = f32[8] parameter(1)
  ROOT s = f32[8] add(p0, p1)
}
)";
  auto expect_error = [&](const std::string& entry, const std::string& want) {
    try {
      ParseHloModule(fused + entry);
      ADD_FAILURE() << "accepted:\n" << entry;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
  };
  expect_error(R"(ENTRY main {
  x = f32[8] parameter(0)
  ROOT f = f32[8] fusion(x), kind=kLoop, calls=fc
})",
               "fusion passes 1 operands to fused computation 'fc' which takes 2");
  expect_error(R"(ENTRY main {
  x = f32[8] parameter(0)
  y = f32[4] parameter(1)
  ROOT f = f32[8] fusion(x, y), kind=kLoop, calls=fc
})",
               "fusion operand 1 is f32[4] but parameter 1 of 'fc' is f32[8]");
  expect_error(R"(ENTRY main {
  x = f32[8] parameter(0)
  ROOT f = f32[4] fusion(x, x), kind=kLoop, calls=fc
})",
               "does not match f32[8] inferred");
  expect_error(R"(ENTRY main {
  x = f32[8] parameter(0)
  ROOT f = f32[8] fusion(x, x), kind=kFast, calls=fc
})",
               "fusion kind must be one of kLoop, kInput, kOutput, kCustom");
  expect_error(R"(ENTRY main {
  x = f32[8] parameter(0)
  ROOT f = f32[8] fusion(x, x), kind=kLoop
})",
               "missing attribute calls=");
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

// XLA's text round-trips: window parts (negative padding and reversal
// included), dim_labels, group counts and operand_precision.
TEST(PrinterTest, ConvolutionRoundTrips) {
  const char* text = R"(HloModule convs

ENTRY e {
  x = f32[8,32,32,16] parameter(0)
  w = f32[3,3,16,64] parameter(1)
  c = f32[8,32,32,64] convolution(x, w), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f
  y = f32[2,4,10,7] parameter(2)
  v = f32[6,4,3,2] parameter(3)
  d = f32[2,6,7,4] convolution(y, v), window={size=3x2 stride=2x2 pad=-1_0x2_-1 lhs_dilate=2x1 rhs_dilate=2x1 rhs_reversal=1x0}, dim_labels=bf01_oi01->bf01, operand_precision={highest,highest}
  g = f32[3,3,8,64] parameter(4)
  gc = f32[8,30,30,64] convolution(x, g), window={size=3x3}, dim_labels=b01f_01io->b01f, feature_group_count=2
  k = f32[3,3,16,64] parameter(5)
  bc = f32[4,30,30,64] convolution(x, k), window={size=3x3}, dim_labels=b01f_01io->b01f, batch_group_count=2
  a = f32[4,6] parameter(6)
  b = f32[6,5] parameter(7)
  ROOT dc = f32[4,5] convolution(a, b), dim_labels=bf_io->bf
}
)";
  std::unique_ptr<HloModule> module = ParseHloModule(text);
  EXPECT_EQ(PrintModule(*module), text);
  const HloInstruction* d = module->entry_computation()->GetInstruction("d");
  EXPECT_EQ(d->attrs().window[0].padding_low, -1);
  EXPECT_EQ(d->attrs().window[1].padding_high, -1);
  EXPECT_TRUE(d->attrs().window[0].window_reversal);
  EXPECT_FALSE(d->attrs().window[1].window_reversal);
  EXPECT_EQ(module->entry_computation()->GetInstruction("gc")->attrs().feature_group_count, 2);
  EXPECT_EQ(module->entry_computation()->GetInstruction("bc")->attrs().batch_group_count, 2);
  // XLA writes operand shapes before the names; the shape may be left out.
  std::unique_ptr<HloModule> written = ParseHloModule(R"(HloModule m
ENTRY e {
  %lhs = f32[8,32,32,16]{3,2,1,0} parameter(0)
  %rhs = f32[3,3,16,64]{3,2,1,0} parameter(1)
  ROOT %conv = convolution(f32[8,32,32,16]{3,2,1,0} %lhs, f32[3,3,16,64]{3,2,1,0} %rhs), window={size=3x3 stride=2x2 pad=0_1x0_1}, dim_labels=b01f_01io->b01f
})");
  EXPECT_EQ(written->entry_computation()->root_instruction()->shape().ToString(),
            "f32[8,16,16,64]");
}

}  // namespace
}  // namespace weft
