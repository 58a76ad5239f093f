// `weft run --check` as a test: a text module partitioned for n devices and
// run on n device threads (padding NaN, so a pad read by mistake shows),
// against the unsharded module on one device, on the inputs `weft run`
// draws for a seed. For the partitioner's tests and run_command's.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "weft/hlo/parser.h"
#include "weft/hlo/printer.h"
#include "weft/runtime/run_command.h"

namespace weft::testing {

// The f32 add reducer, for modules whose reduces and all-reduces need one.
constexpr const char* kAdd = R"(add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
)";

// Max relative error per output of the sharded run against the unsharded one.
inline std::vector<double> ShardedVsUnsharded(const std::string& text, int64_t n, uint64_t seed,
                                              compiler::CompiledProgram* compiled = nullptr) {
  std::unique_ptr<HloModule> module = ParseHloModule(text);
  compiler::CompiledProgram program = compiler::CompileForDevices(*module, {.num_devices = n});
  const std::vector<runtime::HostTensor> inputs =
      runtime::RandomInputs(program.input_shapes, seed, runtime::InputIntegerRanges(*module));
  runtime::LocalCluster cluster(n);
  const std::vector<runtime::HostTensor> sharded = runtime::RunSharded(
      program, inputs, cluster, nullptr, {}, std::numeric_limits<double>::quiet_NaN());
  runtime::Executor reference(*module);
  const std::vector<runtime::HostTensor> expected =
      reference.Run(std::vector<runtime::HostTensor>(inputs.begin(), inputs.end()));
  EXPECT_EQ(sharded.size(), expected.size());
  std::vector<double> errors;
  for (size_t i = 0; i < std::min(sharded.size(), expected.size()); ++i) {
    errors.push_back(runtime::MaxRelativeError(sharded[i], expected[i]));
  }
  if (compiled != nullptr) *compiled = std::move(program);
  return errors;
}

// Expects every output within `tolerance` (0: the same values) and returns
// the per-device program; prints it when an output differs.
inline compiler::CompiledProgram ExpectShardedMatches(const std::string& text, int64_t n,
                                                      uint64_t seed, double tolerance = 0) {
  compiler::CompiledProgram program;
  const std::vector<double> errors = ShardedVsUnsharded(text, n, seed, &program);
  for (size_t i = 0; i < errors.size(); ++i) {
    EXPECT_LE(errors[i], tolerance) << "output " << i << " on " << n << " devices, seed " << seed;
  }
  if (::testing::Test::HasFailure()) ADD_FAILURE() << PrintModule(*program.program);
  return program;
}

}  // namespace weft::testing
