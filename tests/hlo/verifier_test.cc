#include "weft/hlo/verifier.h"

#include <gtest/gtest.h>

#include "weft/hlo/builder.h"
#include "weft/hlo/parser.h"

namespace weft {
namespace {

std::unique_ptr<HloModule> Unverified(const char* text) {
  HloParseOptions options;
  options.verify = false;
  return ParseHloModule(text, options);
}

std::string FirstProblem(const HloModule& module) {
  std::vector<std::string> problems = FindHloModuleProblems(module);
  return problems.empty() ? "" : problems.front();
}

TEST(VerifierTest, ValidModuleHasNoProblems) {
  auto module = Unverified(R"(HloModule m, num_partitions=2
ENTRY main {
  x = f32[4,8] parameter(0), sharding={devices=[2,1]0,1}
  ROOT y = f32[8,4] transpose(x), dimensions={1,0}
})");
  EXPECT_TRUE(FindHloModuleProblems(*module).empty());
  EXPECT_NO_THROW(VerifyHloModule(*module));
}

TEST(VerifierTest, ShapeMismatchNamesInstructionAndLocation) {
  auto module = Unverified(R"(HloModule m
ENTRY main {
  x = f32[4,8] parameter(0)
  ROOT y = f32[4,8] transpose(x), dimensions={1,0}
})");
  EXPECT_EQ(FirstProblem(*module),
            "4:3: 'y' (transpose): result f32[4,8] does not match f32[8,4] inferred from the "
            "operands (f32[4,8])");
  EXPECT_THROW(VerifyHloModule(*module), Error);
}

TEST(VerifierTest, ReportsEveryProblem) {
  auto module = Unverified(R"(HloModule m
ENTRY main {
  x = f32[4] parameter(0)
  a = f32[5] negate(x)
  b = s32[4] abs(x)
  ROOT c = f32[4] exponential(x)
})");
  std::vector<std::string> problems = FindHloModuleProblems(*module);
  ASSERT_EQ(problems.size(), 2u);
  EXPECT_EQ(problems[0].rfind("4:3: 'a' (negate)", 0), 0u) << problems[0];
  EXPECT_EQ(problems[1].rfind("5:3: 'b' (abs)", 0), 0u) << problems[1];
}

TEST(VerifierTest, ShardingMustFitTheShape) {
  auto rank = Unverified(R"(HloModule m
ENTRY main {
  ROOT x = f32[4] parameter(0), sharding={devices=[2,1]0,1}
})");
  EXPECT_NE(FirstProblem(*rank).find("splits 2 dims but the array has rank 1"), std::string::npos)
      << FirstProblem(*rank);
  auto devices = Unverified(R"(HloModule m, num_partitions=8
ENTRY main {
  ROOT x = f32[4] parameter(0), sharding={devices=[4]<=[4]}
})");
  EXPECT_NE(FirstProblem(*devices).find("spans 4 devices but the program runs on 8"),
            std::string::npos)
      << FirstProblem(*devices);
  auto tuple = Unverified(R"(HloModule m
ENTRY main {
  ROOT x = (f32[4], f32[2]) parameter(0), sharding={{replicated}}
})");
  EXPECT_NE(FirstProblem(*tuple).find("tuple sharding has 1 elements but shape (f32[4], f32[2]) "
                                      "has 2 leaves"),
            std::string::npos)
      << FirstProblem(*tuple);
  auto tiled_on_tuple = Unverified(R"(HloModule m
ENTRY main {
  ROOT x = (f32[4], f32[2]) parameter(0), sharding={devices=[2]0,1}
})");
  EXPECT_NE(FirstProblem(*tiled_on_tuple).find("give one per element"), std::string::npos);
  auto replicated_on_tuple = Unverified(R"(HloModule m
ENTRY main {
  ROOT x = (f32[4], f32[2]) parameter(0), sharding={replicated}
})");
  EXPECT_EQ(FirstProblem(*replicated_on_tuple), "");
}

TEST(VerifierTest, StructuralProblemsInBuiltModules) {
  // A parameter gap.
  {
    HloModule module("m");
    HloComputationBuilder b("main");
    b.Parameter(1, Shape::Scalar(PrimitiveType::kF32));
    module.AddEntryComputation(b.Build());
    EXPECT_NE(FirstProblem(module).find("has parameters up to 1 but no parameter 0"),
              std::string::npos)
        << FirstProblem(module);
  }
  // Calling the entry computation.
  {
    HloModule module("m");
    HloComputationBuilder b("main");
    HloInstruction* p = b.Parameter(0, Shape::Scalar(PrimitiveType::kF32));
    HloComputation* entry = module.AddEntryComputation(b.Build());
    auto call = HloInstruction::Create(HloOpcode::kCall, p->shape(), {p}, {}, {entry}, "rec");
    entry->AddInstruction(std::move(call));
    EXPECT_NE(FirstProblem(module).find("'rec' (call): calls the entry computation 'main'"),
              std::string::npos)
        << FirstProblem(module);
  }
  // Shapes edited after building.
  {
    HloModule module("m");
    HloComputationBuilder b("main");
    HloInstruction* p = b.Parameter(0, Shape(PrimitiveType::kF32, {3}));
    HloInstruction* n = b.Unary(HloOpcode::kNegate, p);
    module.AddEntryComputation(b.Build());
    n->set_shape(Shape(PrimitiveType::kF32, {4}));
    EXPECT_EQ(FirstProblem(module),
              "computation 'main': 'negate' (negate): result f32[4] does not match f32[3] "
              "inferred from the operands (f32[3])");
  }
  // No entry.
  {
    HloModule module("m");
    EXPECT_EQ(FirstProblem(module), "module 'm' has no entry computation");
  }
}

}  // namespace
}  // namespace weft
