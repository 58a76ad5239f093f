// Loop inits that nothing reads: a stacked buffer the loop writes row by row
// loses its zero fill (it becomes an AllocateBuffer) exactly when every row
// is written before anything reads the buffer, and the program still
// computes the same values — run twice, so that the second run's buffer
// holds the first run's bytes, not fresh zeros.
#include "weft/compiler/dead_loop_init.h"

#include <gtest/gtest.h>

#include <random>
#include <string>

#include "count_opcode.h"
#include "weft/hlo/custom_call_targets.h"
#include "weft/hlo/parser.h"
#include "weft/hlo/printer.h"
#include "weft/hlo/verifier.h"
#include "weft/runtime/executor.h"

namespace weft::compiler {
namespace {

using runtime::HostTensor;
using weft::testing::CountOpcode;

// A loop that stacks x * (i + 1) into ys [rows, 4], `update_rows` rows at a
// time at start `index` (an expression of the counter i), and returns ys
// and the carried x. The counter starts at `init`, runs while `i dir
// bound` and changes by `step`. `extra` is spliced into the body (it may
// read ys) and `cond_extra` into the condition.
struct Loop {
  int rows = 5;
  int update_rows = 1;
  int init = 0;
  const char* dir = "LT";
  int bound = 5;
  int step = 1;
  std::string index = "i";
  std::string extra;
  std::string root_ys = "ys2";  // what the body returns as ys
  std::string cond_extra;
  std::string cond_root = "c = pred[] compare(i, n), direction=";
  float fill = 0;
  bool fill_also_output = false;

  std::string Text() const {
    const std::string ys = "f32[" + std::to_string(rows) + ",4]";
    const std::string up = "f32[" + std::to_string(update_rows) + ",4]";
    const std::string state = "(s32[], f32[4], " + ys + ")";
    std::string t = "HloModule m\n\ncond {\n  s = " + state + " parameter(0)\n";
    t += "  i = s32[] get-tuple-element(s), index=0\n";
    t += "  n = s32[] constant(" + std::to_string(bound) + ")\n" + cond_extra;
    t += "  ROOT " + cond_root + (cond_root.find("direction=") != std::string::npos ? dir : "") +
         "\n}\n\n";
    t += "body {\n  s = " + state + " parameter(0)\n";
    t += "  i = s32[] get-tuple-element(s), index=0\n";
    t += "  x = f32[4] get-tuple-element(s), index=1\n";
    t += "  ys = " + ys + " get-tuple-element(s), index=2\n";
    t += "  one = s32[] constant(1)\n  i1 = s32[] add(i, one)\n";
    t += "  f = f32[] convert(i1)\n  fb = f32[4] broadcast(f), dimensions={}\n";
    t += "  v = f32[4] multiply(x, fb)\n";
    t += "  vb = " + up + " broadcast(v), dimensions={1}\n";
    t += "  z = s32[] constant(0)\n" + extra;
    t += "  ys2 = " + ys + " dynamic-update-slice(ys, vb, " + index + ", z)\n";
    t += "  k = s32[] constant(" + std::to_string(step < 0 ? -step : step) + ")\n";
    t += std::string("  inext = s32[] ") + (step < 0 ? "subtract" : "add") + "(i, k)\n";
    t += "  ROOT r = " + state + " tuple(inext, x, " + root_ys + ")\n}\n\n";
    t += "ENTRY e {\n  x = f32[4] parameter(0)\n";
    t += "  i0 = s32[] constant(" + std::to_string(init) + ")\n";
    t += "  zero = f32[] constant(" + std::to_string(fill) + ")\n";
    t += "  fill = " + ys + " broadcast(zero), dimensions={}\n";
    t += "  init = " + state + " tuple(i0, x, fill)\n";
    t += "  w = " + state + " while(init), condition=cond, body=body\n";
    t += "  out = " + ys + " get-tuple-element(w), index=2\n";
    if (fill_also_output) {
      t += "  ROOT t = (" + ys + ", " + ys + ") tuple(out, fill)\n}\n";
    } else {
      t += "  ROOT t = (" + ys + ") tuple(out)\n}\n";
    }
    return t;
  }
};

int64_t Replaced(const Loop& loop) {
  std::unique_ptr<HloModule> m = ParseHloModule(loop.Text());
  return ElideDeadLoopInits(*m).inits_replaced;
}

std::vector<HostTensor> RandomInputs(const HloModule& m, std::mt19937& rng) {
  std::vector<HostTensor> inputs;
  for (const HloInstruction* p : m.entry_computation()->parameter_instructions()) {
    std::vector<double> v(static_cast<size_t>(p->shape().ElementsCount()));
    for (double& x : v) x = std::uniform_real_distribution<double>(0.5, 2.0)(rng);
    inputs.push_back(HostTensor::FromDoubles(p->shape(), v));
  }
  return inputs;
}

// The rewritten loop replaces its one fill, prints and parses back, and
// gives the unrewritten loop's values on two runs of fresh random inputs.
void ExpectReplacedAndSameValues(const Loop& loop) {
  SCOPED_TRACE(loop.Text());
  std::unique_ptr<HloModule> original = ParseHloModule(loop.Text());
  std::unique_ptr<HloModule> rewritten = ParseHloModule(loop.Text());
  const DeadLoopInitStats stats = ElideDeadLoopInits(*rewritten);
  ASSERT_EQ(stats.inits_replaced, 1);
  EXPECT_EQ(stats.bytes_not_filled, int64_t{4} * loop.rows * 4);
  EXPECT_EQ(CountOpcode(*rewritten, HloOpcode::kBroadcast),
            CountOpcode(*original, HloOpcode::kBroadcast) - 1);
  const HloInstruction* buffer = rewritten->entry_computation()->GetInstruction("fill");
  ASSERT_NE(buffer, nullptr);  // the buffer keeps the fill's name
  EXPECT_EQ(buffer->opcode(), HloOpcode::kCustomCall);
  EXPECT_EQ(buffer->attrs().custom_call_target, kAllocateBufferTarget);
  EXPECT_EQ(rewritten->entry_computation()->GetInstruction("zero"), nullptr);
  VerifyHloModule(*rewritten);
  EXPECT_EQ(PrintModule(*ParseHloModule(PrintModule(*rewritten))), PrintModule(*rewritten));
  EXPECT_EQ(ElideDeadLoopInits(*rewritten).inits_replaced, 0);  // nothing left

  std::mt19937 rng(std::random_device{}());
  runtime::Executor want_exec(*original), got_exec(*rewritten);
  for (int run = 0; run < 2; ++run) {
    const std::vector<HostTensor> inputs = RandomInputs(*original, rng);
    const std::vector<HostTensor> want = want_exec.Run(inputs);
    const std::vector<HostTensor> got = got_exec.Run(inputs);
    ASSERT_EQ(want.size(), got.size());
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_EQ(want[i].ToDoubles(), got[i].ToDoubles()) << "run " << run << ", output " << i;
    }
  }
}

TEST(DeadLoopInit, ForwardStackLosesItsFill) {
  ExpectReplacedAndSameValues(Loop{});
  Loop filled;  // a non-zero fill is as dead
  filled.fill = 7;
  ExpectReplacedAndSameValues(filled);
}

TEST(DeadLoopInit, ReverseStackLosesItsFill) {
  Loop reverse;  // i = 4, 3, ..., 0, as the backward of a scan runs
  reverse.init = 4;
  reverse.dir = "GE";
  reverse.bound = 0;
  reverse.step = -1;
  ExpectReplacedAndSameValues(reverse);
}

TEST(DeadLoopInit, WiderUpdatesCoverTheRowsTheStepSkips) {
  Loop two;  // rows 0-1, 2-3, then start 4 clamped to 3: rows 3-4
  two.rows = 5;
  two.update_rows = 2;
  two.bound = 5;
  two.step = 2;
  ExpectReplacedAndSameValues(two);
  Loop past;  // the counter runs past the last start: clamped writes cover it
  past.bound = 8;
  ExpectReplacedAndSameValues(past);
}

TEST(DeadLoopInit, FillsThatSomethingReadsStay) {
  Loop reads;  // the body reads the previous row before writing its own
  reads.extra =
      "  prev = s32[] subtract(i, one)\n"
      "  old = f32[1,4] dynamic-slice(ys, prev, z), dynamic_slice_sizes={1,4}\n"
      "  vb_old = f32[1,4] add(old, old)\n";
  reads.root_ys = "ys2";
  reads.extra += "  ys_read = f32[5,4] dynamic-update-slice(ys, vb_old, i, z)\n";
  reads.root_ys = "ys_read";
  EXPECT_EQ(Replaced(reads), 0);

  Loop short_loop;  // row 4 is never written
  short_loop.bound = 4;
  EXPECT_EQ(Replaced(short_loop), 0);

  Loop late;  // starts at row 1: row 0 keeps the fill
  late.init = 1;
  late.bound = 6;
  EXPECT_EQ(Replaced(late), 0);

  Loop gaps;  // one row every second trip... rows 1 and 3 keep the fill
  gaps.step = 2;
  EXPECT_EQ(Replaced(gaps), 0);

  Loop shifted;  // a start that is not the counter itself is not analysed
  shifted.extra = "  j = s32[] add(i, z)\n";
  shifted.index = "j";
  EXPECT_EQ(Replaced(shifted), 0);

  Loop passthrough;  // the body returns ys unchanged
  passthrough.root_ys = "ys";
  EXPECT_EQ(Replaced(passthrough), 0);

  Loop cond_reads;  // the condition reads the stack
  cond_reads.cond_extra =
      "  ys = f32[5,4] get-tuple-element(s), index=2\n"
      "  zf = f32[] constant(0)\n"
      "  sum = f32[] reduce(ys, zf), dimensions={0,1}, to_apply=add\n";
  std::string text = cond_reads.Text();
  text.replace(text.find("cond {"), 0,
               "add {\n  a = f32[] parameter(0)\n  b = f32[] "
               "parameter(1)\n  ROOT c = f32[] add(a, b)\n}\n\n");
  EXPECT_EQ(ElideDeadLoopInits(*ParseHloModule(text)).inits_replaced, 0);

  Loop output;  // the fill is also an output of the entry
  output.fill_also_output = true;
  EXPECT_EQ(Replaced(output), 0);

  Loop never;  // the loop never runs: the fill is the result
  never.bound = 0;
  EXPECT_EQ(Replaced(never), 0);
}

TEST(DeadLoopInit, APartialUpdateInAnotherDimensionKeepsTheFill) {
  // Each trip writes row i but only columns 0-1: columns 2-3 keep the fill.
  Loop narrow;
  std::string text = narrow.Text();
  const std::string vb = "vb = f32[1,4] broadcast(v), dimensions={1}";
  text.replace(
      text.find(vb), vb.size(),
      "v2 = f32[2] slice(v), slice={[0:2]}\n  vb = f32[1,2] broadcast(v2), dimensions={1}");
  EXPECT_EQ(ElideDeadLoopInits(*ParseHloModule(text)).inits_replaced, 0);
}

}  // namespace
}  // namespace weft::compiler
