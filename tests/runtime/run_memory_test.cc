// weft run's memory estimate against the executor's measured peak, and the
// refusal's message (run_command_test.cc refuses whole runs through the
// command).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "error_of.h"
#include "weft/base/error.h"
#include "weft/base/memory.h"
#include "weft/hlo/parser.h"
#include "weft/runtime/run_command.h"

namespace weft::runtime {
namespace {

using weft::testing::Mentions;

using compiler::CompiledProgram;
using compiler::CompileForDevices;

// The estimate: the memory plan's peak of the per-device program, times the
// devices of this process, plus the inputs, counting once what the devices
// borrow; refused only above the memory available.
TEST(RunMemoryTest, TheMemoryEstimateAddsUpThePlanInputsAndOutputs) {
  auto module = ParseHloModule(R"(HloModule m
ENTRY e {
  x = f32[1024,256] parameter(0), sharding={devices=[4,1]<=[4]}
  w = f32[256,256] parameter(1), sharding={replicated}
  d = f32[1024,256] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}, sharding={devices=[4,1]<=[4]}
  ROOT t = f32[1024,256] tanh(d), sharding={devices=[4,1]<=[4]}
})");
  const CompiledProgram program = CompileForDevices(*module, {.num_devices = 4});
  const RunMemoryEstimate e = EstimateRunMemory(*module, program, 4, false);
  EXPECT_TRUE(e.device_peak_planned);
  const int64_t x = 1024 * 256 * 4, w = 256 * 256 * 4, local = x / 4;
  EXPECT_EQ(e.input_bytes, x + w);
  EXPECT_EQ(e.output_bytes, x);  // tiled: joined into a new tensor
  // The device holds its shard of x and w (the inputs), d in the arena
  // (t in d's place), and t copied out of the arena (the output).
  EXPECT_EQ(e.device_peak_bytes, (local + w) + local + local);
  EXPECT_EQ(e.device_shared_bytes, w);
  EXPECT_EQ(e.total_bytes, e.input_bytes + e.output_bytes + 4 * (e.device_peak_bytes - w));
  // Measured: the executor's own peak on each device.
  LocalCluster cluster(4);
  std::vector<ExecutorStats> stats;
  RunSharded(program, RandomInputs(program.input_shapes, 1), cluster, &stats);
  for (const ExecutorStats& s : stats) EXPECT_EQ(s.peak_bytes, e.device_peak_bytes);
  EXPECT_NO_THROW(CheckRunFitsInMemory(e, e.total_bytes, "m.hlo"));
  EXPECT_NO_THROW(CheckRunFitsInMemory(e, 0, "m.hlo"));  // unknown: never refused
  try {
    CheckRunFitsInMemory(e, e.total_bytes - 1, "m.hlo");
    ADD_FAILURE() << "not refused";
  } catch (const Error& error) {
    const std::string m = error.what();
    EXPECT_TRUE(Mentions(m, fmt::format("weft run m.hlo: the run needs about {} ({} bytes) at once",
                                        FormatBytes(e.total_bytes), e.total_bytes)))
        << m;
    EXPECT_TRUE(Mentions(m, fmt::format("this machine has {} ({} bytes) of physical memory",
                                        FormatBytes(e.total_bytes - 1), e.total_bytes - 1)))
        << m;
    EXPECT_TRUE(Mentions(m, "4 devices x")) << m;
  }
  // --check adds the unsharded module's run (after the sharded one).
  const RunMemoryEstimate checked = EstimateRunMemory(*module, program, 4, true);
  EXPECT_GT(checked.check_peak_bytes, 0);
  EXPECT_GE(checked.total_bytes, e.total_bytes);
}

}  // namespace
}  // namespace weft::runtime
