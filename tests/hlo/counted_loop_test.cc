// The counter of a counted loop: which state element counts, from where,
// by how much and how many times, forward and backward, with the bound on
// either side of the compare; and the reason when a loop is not counted.
#include "weft/hlo/counted_loop.h"

#include <gtest/gtest.h>

#include <string>

#include "weft/hlo/parser.h"

namespace weft {
namespace {

// A loop whose state is (f32[3], s32[]): the counter is element 1, starts
// at INIT, runs while COMPARE holds and becomes NEXT.
std::string Loop(int init, const std::string& compare, const std::string& next) {
  return "HloModule m\n"
         "cond {\n"
         "  s = (f32[3], s32[]) parameter(0)\n"
         "  i = s32[] get-tuple-element(s), index=1\n"
         "  n = s32[] constant(10)\n"
         "  zero = s32[] constant(0)\n"
         "  ROOT c = pred[] " +
         compare +
         "\n"
         "}\n"
         "body {\n"
         "  s = (f32[3], s32[]) parameter(0)\n"
         "  x = f32[3] get-tuple-element(s), index=0\n"
         "  i = s32[] get-tuple-element(s), index=1\n"
         "  k = s32[] constant(3)\n"
         "  y = f32[3] negate(x)\n"
         "  i2 = s32[] " +
         next +
         "\n"
         "  ROOT t = (f32[3], s32[]) tuple(y, i2)\n"
         "}\n"
         "ENTRY e {\n"
         "  x = f32[3] parameter(0)\n"
         "  z = s32[] constant(" +
         std::to_string(init) +
         ")\n"
         "  init = (f32[3], s32[]) tuple(x, z)\n"
         "  ROOT w = (f32[3], s32[]) while(init), condition=cond, body=body\n"
         "}\n";
}

std::optional<CountedLoop> Analyze(const std::string& text, std::string* why = nullptr) {
  std::unique_ptr<HloModule> m = ParseHloModule(text);
  return AnalyzeCountedLoop(*m->entry_computation()->root_instruction(), why);
}

TEST(CountedLoop, ForwardLoopCountsFromItsInitByItsStep) {
  const std::optional<CountedLoop> loop =
      Analyze(Loop(1, "compare(i, n), direction=LT", "add(i, k)"));
  ASSERT_TRUE(loop.has_value());
  EXPECT_EQ(loop->counter_index, 1);
  EXPECT_EQ(loop->init, 1);
  EXPECT_EQ(loop->step, 3);
  EXPECT_EQ(loop->trips, 3);  // 1, 4, 7
  EXPECT_EQ(loop->ValueAt(0), 1);
  EXPECT_EQ(loop->ValueAt(2), 7);
}

TEST(CountedLoop, BackwardLoopAndABoundOnTheLeft) {
  // i >= 0: i = 9, 6, 3, 0 with the step subtracted.
  const std::optional<CountedLoop> down =
      Analyze(Loop(9, "compare(i, zero), direction=GE", "subtract(i, k)"));
  ASSERT_TRUE(down.has_value());
  EXPECT_EQ(down->step, -3);
  EXPECT_EQ(down->trips, 4);
  EXPECT_EQ(down->ValueAt(3), 0);
  // The bound on the left (10 > i) and the constant first (k + i).
  const std::optional<CountedLoop> flipped =
      Analyze(Loop(0, "compare(n, i), direction=GT", "add(k, i)"));
  ASSERT_TRUE(flipped.has_value());
  EXPECT_EQ(flipped->trips, 4);  // 0, 3, 6, 9
  // A loop that never runs is counted: zero trips.
  const std::optional<CountedLoop> none =
      Analyze(Loop(12, "compare(i, n), direction=LT", "add(i, k)"));
  ASSERT_TRUE(none.has_value());
  EXPECT_EQ(none->trips, 0);
}

TEST(CountedLoop, UncountedLoopsSayWhy) {
  std::string why;
  EXPECT_FALSE(Analyze(Loop(0, "compare(i, i), direction=LT", "add(i, k)"), &why));
  EXPECT_EQ(why, "the compare is not state element vs constant");
  EXPECT_FALSE(Analyze(Loop(0, "compare(i, n), direction=LT", "multiply(i, k)"), &why));
  EXPECT_EQ(why, "the counter does not change by a constant each trip");
  EXPECT_FALSE(Analyze(Loop(0, "compare(i, n), direction=LT", "subtract(i, k)"), &why));
  EXPECT_EQ(why, "it runs more than 2^26 times, or never stops");
  std::string text = Loop(0, "compare(i, n), direction=LT", "add(i, k)");
  const std::string init = "  z = s32[] constant(0)\n";
  text.replace(text.find(init), init.size(), "  z = s32[] parameter(1)\n");
  text.replace(text.find("x = f32[3] parameter(0)"), 0, "");
  EXPECT_FALSE(Analyze(text, &why));
  EXPECT_EQ(why, "the counter's initial value is not a constant");
}

}  // namespace
}  // namespace weft
