// Trip counts of counted loops (as the partitioner leaves them) and of scans,
// and how often each computation runs.
#include "weft/analysis/loops.h"

#include <gtest/gtest.h>

#include <string>

#include "weft/base/error.h"
#include "weft/hlo/parser.h"

namespace weft::analysis {
namespace {

// A loop over `i` from INIT while `i DIR BOUND`, i = i OP STEP.
std::string Loop(int init, const char* dir, int bound, const char* op, int step) {
  return "HloModule m\n"
         "cond {\n"
         "  s = (s32[], f32[4]) parameter(0)\n"
         "  i = s32[] get-tuple-element(s), index=0\n"
         "  n = s32[] constant(" +
         std::to_string(bound) +
         ")\n"
         "  ROOT c = pred[] compare(i, n), direction=" +
         dir +
         "\n"
         "}\n"
         "body {\n"
         "  s = (s32[], f32[4]) parameter(0)\n"
         "  i = s32[] get-tuple-element(s), index=0\n"
         "  x = f32[4] get-tuple-element(s), index=1\n"
         "  y = f32[4] negate(x)\n"
         "  k = s32[] constant(" +
         std::to_string(step) +
         ")\n"
         "  i2 = s32[] " +
         op +
         "(i, k)\n"
         "  ROOT t = (s32[], f32[4]) tuple(i2, y)\n"
         "}\n"
         "ENTRY e {\n"
         "  x = f32[4] parameter(0)\n"
         "  z = s32[] constant(" +
         std::to_string(init) +
         ")\n"
         "  init = (s32[], f32[4]) tuple(z, x)\n"
         "  w = (s32[], f32[4]) while(init), condition=cond, body=body\n"
         "  ROOT r = f32[4] get-tuple-element(w), index=1\n"
         "}\n";
}

const HloInstruction& TheWhile(const HloModule& m) {
  return *m.entry_computation()->GetInstruction("w");
}

TEST(LoopsTest, CountsForwardAndReverseLoops) {
  EXPECT_EQ(WhileTripCount(TheWhile(*ParseHloModule(Loop(0, "LT", 126, "add", 1)))), 126);
  EXPECT_EQ(WhileTripCount(TheWhile(*ParseHloModule(Loop(125, "GE", 0, "subtract", 1)))), 126);
  EXPECT_EQ(WhileTripCount(TheWhile(*ParseHloModule(Loop(0, "LT", 10, "add", 3)))), 4);
  EXPECT_EQ(WhileTripCount(TheWhile(*ParseHloModule(Loop(5, "LT", 5, "add", 1)))), 0);
  EXPECT_EQ(WhileTripCount(TheWhile(*ParseHloModule(Loop(0, "NE", 8, "add", 2)))), 4);
}

TEST(LoopsTest, ScanConfigGivesTheLength) {
  std::string text = Loop(0, "LT", 126, "add", 1);
  const std::string w = "condition=cond, body=body";
  text.replace(text.find(w), w.size(),
               w + ", backend_config={\"scan\":{\"length\":7,\"carry\":1,\"xs\":0,\"consts\":0,"
                   "\"ys\":0}}");
  EXPECT_EQ(WhileTripCount(TheWhile(*ParseHloModule(text))), 7);
}

TEST(LoopsTest, UncountedLoopsAreErrorsNamingTheWhile) {
  // A counter that never reaches the bound.
  try {
    WhileTripCount(TheWhile(*ParseHloModule(Loop(0, "LT", 10, "subtract", 1))));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'w'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("never stops"), std::string::npos) << e.what();
  }
  // A data-dependent step.
  std::string text = Loop(0, "LT", 10, "add", 1);
  text.replace(text.find("i2 = s32[] add(i, k)"), 20, "i2 = s32[] add(i, i)");
  try {
    WhileTripCount(TheWhile(*ParseHloModule(text)));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("does not change by a constant"), std::string::npos)
        << e.what();
  }
}

TEST(LoopsTest, RunCountsMultiplyThroughLoops) {
  auto m = ParseHloModule(Loop(0, "LT", 6, "add", 1));
  const auto runs = ComputationRunCounts(*m);
  EXPECT_EQ(runs.at(m->entry_computation()), 1);
  EXPECT_EQ(runs.at(m->GetComputation("body")), 6);
  EXPECT_EQ(runs.at(m->GetComputation("cond")), 7);
}

}  // namespace
}  // namespace weft::analysis
