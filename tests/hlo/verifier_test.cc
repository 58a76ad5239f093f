#include "weft/hlo/verifier.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <string>

#include "error_of.h"
#include "hostile_hlo.h"
#include "weft/base/error.h"
#include "weft/hlo/builder.h"
#include "weft/hlo/parser.h"

namespace weft {
namespace {

using weft::testing::Mentions;

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
  // The parser gives each leaf a tuple-shaped instruction's one sharding (as
  // XLA's); one set on a tuple by code is refused.
  auto tiled_on_tuple = Unverified(R"(HloModule m
ENTRY main {
  ROOT x = (f32[4], f32[2]) parameter(0)
})");
  tiled_on_tuple->entry_computation()->root_instruction()->set_sharding(
      HloSharding::Parse("{devices=[2]0,1}"));
  EXPECT_NE(FirstProblem(*tiled_on_tuple).find("give one per element"), std::string::npos);
  auto leaf_rank = Unverified(R"(HloModule m
ENTRY main {
  ROOT x = (f32[4], f32[2,2]) parameter(0), sharding={devices=[2]0,1}
})");
  EXPECT_NE(FirstProblem(*leaf_rank), "");
  auto replicated_on_tuple = Unverified(R"(HloModule m
ENTRY main {
  ROOT x = (f32[4], f32[2]) parameter(0), sharding={replicated}
})");
  EXPECT_EQ(FirstProblem(*replicated_on_tuple), "");
  // An outfeed's tuple sharding covers (data, token), or the data alone, as
  // XLA writes them.
  const std::string outfeed = R"(HloModule m, num_partitions=2
ENTRY main {
  p = f32[4,2] parameter(0)
  t = (f32[4,2]) tuple(p)
  a = token[] after-all()
  ROOT o = token[] outfeed(t, a), outfeed_shape=(f32[4,2]), sharding=SHARDING
})";
  auto with = [&](const std::string& sharding) {
    std::string text = outfeed;
    text.replace(text.find("SHARDING"), 8, sharding);
    return Unverified(text.c_str());
  };
  EXPECT_EQ(FirstProblem(*with("{{devices=[2,1]0,1}, {maximal device=0}}")), "");
  EXPECT_EQ(FirstProblem(*with("{maximal device=0}")), "");
  EXPECT_EQ(FirstProblem(*with("{{devices=[2,1]0,1}}")), "");  // the data alone
  EXPECT_NE(FirstProblem(*with("{{devices=[2,1]0,1}, {replicated}, {replicated}}")), "");
  EXPECT_NE(FirstProblem(*with("{{devices=[2,1,1]0,1}, {maximal device=0}}")), "");
}

// Hostile input: `weft partition` printed a module whose all-reduce named
// device 99 of num_partitions=4 (weft run refused it only in its planner).
// Every device id an instruction names — replica groups, permute pairs,
// shardings — is checked against the devices the module declares, by the
// verifier, so every command refuses it when it parses the module; a module
// that declares none is checked against the count it is partitioned for
// (CheckDeviceIds, in PartitionModule).
std::string AllReduceModule(const std::string& header, const std::string& attrs) {
  return fmt::format(R"(HloModule m{}
add {{
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  ROOT s = f32[] add(x, y)
}}
ENTRY main {{
  p = f32[8] parameter(0)
  ROOT ar = f32[8] all-reduce(p), {}, to_apply=add
}})",
                     header, attrs);
}

TEST(VerifierTest, DeviceIdsMustBeTheModulesDevices) {
  const std::string header = ", num_partitions=4";
  auto problem = [](const std::string& text) { return FirstProblem(*Unverified(text.c_str())); };
  EXPECT_EQ(problem(AllReduceModule(header, "replica_groups={{0,1},{2,3}}")), "");
  EXPECT_EQ(problem(AllReduceModule(header, "replica_groups={}")), "");
  const std::string far = problem(AllReduceModule(header, "replica_groups={{0,1},{2,99}}"));
  EXPECT_TRUE(Mentions(far,
                       "9:3: 'ar' (all-reduce): replica_groups {{0,1},{2,99}} name device "
                       "99, but the program has 4 devices, ids 0..3 (the module's "
                       "num_partitions=4 x replica_count=1)"))
      << far;
  EXPECT_THROW(ParseHloModule(AllReduceModule(header, "replica_groups={{0,1},{2,99}}")), Error);
  // The communicators need every device in exactly one group.
  const std::string short_groups = problem(AllReduceModule(header, "replica_groups={{0,1}}"));
  EXPECT_TRUE(Mentions(short_groups, "leave out device 2; the groups must cover all 4 devices"))
      << short_groups;
  // XLA's modes: with partitions and replicas, a channel_id names
  // partitions, none names replicas, use_global_device_ids every device.
  const std::string both = ", num_partitions=2, replica_count=3";
  EXPECT_EQ(problem(AllReduceModule(both, "channel_id=1, replica_groups={{0,1}}")), "");
  EXPECT_EQ(problem(AllReduceModule(both, "replica_groups={{0,1,2}}")), "");
  EXPECT_EQ(problem(AllReduceModule(both,
                                    "channel_id=1, replica_groups={{0,1,2},{3,4,5}}, "
                                    "use_global_device_ids=true")),
            "");
  const std::string partition =
      problem(AllReduceModule(both, "channel_id=1, replica_groups={{0,1,2}}"));
  EXPECT_TRUE(Mentions(partition, "name partition 2, but the program has 2 partitions"))
      << partition;
  EXPECT_TRUE(
      Mentions(problem(AllReduceModule(both, "replica_groups={{0,1}}")), "leave out replica 2"));
  // Collective-permute pairs.
  auto permute = Unverified(R"(HloModule m, num_partitions=4
ENTRY main {
  p = f32[8] parameter(0)
  ROOT cp = f32[8] collective-permute(p), source_target_pairs={{0,1},{1,7}}
})");
  EXPECT_TRUE(Mentions(FirstProblem(*permute),
                       "'cp' (collective-permute): source_target_pairs "
                       "name device 7, but the program has 4 devices"))
      << FirstProblem(*permute);
  // A module that declares no devices: checked for the count it runs on.
  auto undeclared = Unverified(AllReduceModule("", "replica_groups={{0,1},{2,99}}").c_str());
  EXPECT_EQ(FirstProblem(*undeclared), "");
  const std::string asked =
      testing::ErrorOf([&] { CheckDeviceIds(*undeclared, 4, "--num-partitions 4"); });
  EXPECT_TRUE(Mentions(asked,
                       "'ar' (all-reduce): replica_groups {{0,1},{2,99}} name device 99, "
                       "but the program has 4 devices, ids 0..3 (--num-partitions 4)"))
      << asked;
  EXPECT_TRUE(Mentions(testing::ErrorOf([&] { CheckDeviceIds(*undeclared, 100, "x"); }),
                       "leave out device 3; the groups must cover all 100 devices (x)"));
  auto maximal = Unverified(R"(HloModule m
ENTRY main {
  ROOT p = f32[8] parameter(0), sharding={maximal device=99}
})");
  const std::string device = testing::ErrorOf([&] { CheckDeviceIds(*maximal, 4, "asked"); });
  EXPECT_TRUE(Mentions(device,
                       "'p' (parameter): sharding {maximal device=99} names device 99 "
                       "but only 4 devices exist (asked)"))
      << device;
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

// ---------------------------------------------------------------------------
// The call graph.

using hostile_hlo::CallChainModule;
using hostile_hlo::ChainKind;

std::string ErrorOf(const std::string& text) {
  try {
    ParseHloModule(text);
  } catch (const Error& e) {
    return e.what();
  }
  return "accepted";
}

// The one recursion check (CheckCallGraph) runs in the verifier, so every
// command that parses a module refuses these with the cycle named.
TEST(VerifierTest, EveryKindOfRecursionIsRefusedNamingTheCycle) {
  for (const hostile_hlo::RecursiveModule& m : hostile_hlo::RecursiveModules()) {
    const std::string error = ErrorOf(m.text);
    EXPECT_TRUE(Mentions(error, "calls itself")) << m.name << ": " << error;
    EXPECT_TRUE(Mentions(error, m.cycle)) << m.name << ": " << error;
    EXPECT_TRUE(Mentions(error, "HLO has no recursion")) << m.name << ": " << error;
    // Also without the parser: the problem list and the post order.
    HloParseOptions no_verify;
    no_verify.verify = false;
    const auto module = ParseHloModule(m.text, no_verify);
    const std::vector<std::string> problems = FindHloModuleProblems(*module);
    ASSERT_FALSE(problems.empty()) << m.name;
    EXPECT_TRUE(Mentions(problems.back(), m.cycle)) << problems.back();
    EXPECT_THROW(CheckCallGraph(*module), Error) << m.name;
    EXPECT_THROW(module->MakeComputationPostOrder(), Error) << m.name;
  }
}

TEST(VerifierTest, TheCycleNamesTheCallingInstruction) {
  const std::string error = ErrorOf(hostile_hlo::RecursiveModules()[1].text);  // mutual
  EXPECT_TRUE(Mentions(error, "computation 'g' calls itself: g -> f -> g")) << error;
  EXPECT_TRUE(Mentions(error, "'f' calls 'g' ('c' (call) at 8:3)")) << error;
}

// Calls may nest kMaxCallDepth deep; one more is refused with the chain,
// and a chain of 10,000 (which overflowed the stack of `weft partition` and
// `weft run`) is refused, walking it without recursion. (No time bound: the
// sanitizer build on a busy machine took 6 to 13 s to parse it.)
TEST(VerifierTest, CallChainsAreBoundedAndNamed) {
  for (ChainKind kind : {ChainKind::kCall, ChainKind::kWhile}) {
    EXPECT_NO_THROW(ParseHloModule(CallChainModule(kMaxCallDepth, kind)));
    const std::string over = ErrorOf(CallChainModule(kMaxCallDepth + 1, kind));
    EXPECT_TRUE(Mentions(over, fmt::format("calls nest {} deep from computation 'e', more than "
                                           "weft's limit of {}",
                                           kMaxCallDepth + 1, kMaxCallDepth)))
        << over;
    const std::string top = fmt::format("e -> f{} -> f{}", kMaxCallDepth, kMaxCallDepth - 1);
    EXPECT_TRUE(Mentions(over, top)) << over;
    EXPECT_TRUE(Mentions(over, "-> f2 -> f1 -> ")) << over;  // then f0, or cond
  }
  const std::string deep = ErrorOf(CallChainModule(10000, ChainKind::kCall));
  EXPECT_TRUE(Mentions(deep, "calls nest 10000 deep from computation 'e'")) << deep;
  EXPECT_TRUE(Mentions(deep,
                       "e -> f9999 -> f9998 -> f9997 -> ... (9993 more) ... -> f3 -> f2 "
                       "-> f1 -> f0"))
      << deep;
}

// The depth is the longest chain, wherever it starts: a computation reached
// first by a short path and later by a long one is counted by the long one.
TEST(VerifierTest, TheDepthIsTheLongestChain) {
  HloModule module("m");
  std::vector<HloComputation*> chain;
  for (int64_t i = 0; i <= kMaxCallDepth; ++i) {
    HloComputationBuilder b(fmt::format("f{}", i));
    HloInstruction* x = b.Parameter(0, Shape::Scalar(PrimitiveType::kF32));
    if (i == 0) {
      b.Unary(HloOpcode::kNegate, x);
    } else {
      b.Call({x}, chain.back());
    }
    chain.push_back(module.AddComputation(b.Build()));
  }
  // The entry calls the bottom of the chain first (short), then the top.
  HloComputationBuilder e("e");
  HloInstruction* p = e.Parameter(0, Shape::Scalar(PrimitiveType::kF32));
  e.Call({e.Call({p}, chain.front())}, chain.back());
  module.AddEntryComputation(e.Build());
  try {
    CheckCallGraph(module);
    FAIL() << "accepted";
  } catch (const Error& error) {
    EXPECT_TRUE(Mentions(error.what(), fmt::format("calls nest {} deep", kMaxCallDepth + 1)))
        << error.what();
  }
}

}  // namespace
}  // namespace weft
