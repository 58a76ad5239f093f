// The scan backward on a scan written as HLO text (the structure
// autodiff/scan_config.h documents), and the errors for other loops.
// (tests/models/scan_test.cc covers scans built with Scan, remat and shard_as.)
#include <gtest/gtest.h>

#include "grad_check.h"
#include "weft/autodiff/scan_config.h"

namespace weft {
namespace {

std::string Module(const std::string& config) {
  return R"(HloModule m
add {
  ax = f32[] parameter(0)
  ay = f32[] parameter(1)
  ROOT as = f32[] add(ax, ay)
}
cond {
  cs = (s32[], f32[2,3], f32[4,3,3]) parameter(0)
  ci = s32[] get-tuple-element(cs), index=0
  cn = s32[] constant(4)
  ROOT lt = pred[] compare(ci, cn), direction=LT
}
body {
  s = (s32[], f32[2,3], f32[4,3,3]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  x = f32[2,3] get-tuple-element(s), index=1
  ws = f32[4,3,3] get-tuple-element(s), index=2
  z = s32[] constant(0)
  w1 = f32[1,3,3] dynamic-slice(ws, i, z, z), dynamic_slice_sizes={1,3,3}
  w = f32[3,3] reshape(w1)
  h = f32[2,3] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  t = f32[2,3] tanh(h)
  one = s32[] constant(1)
  next = s32[] add(i, one)
  ROOT o = (s32[], f32[2,3], f32[4,3,3]) tuple(next, t, ws)
}
ENTRY e {
  x0 = f32[2,3] parameter(0)
  wst = f32[4,3,3] parameter(1)
  c = f32[2,3] parameter(2)
  zero = s32[] constant(0)
  init = (s32[], f32[2,3], f32[4,3,3]) tuple(zero, x0, wst)
  loop = (s32[], f32[2,3], f32[4,3,3]) while(init), condition=cond, body=body)" +
         config + R"(
  xl = f32[2,3] get-tuple-element(loop), index=1
  m = f32[2,3] multiply(xl, c)
  z0 = f32[] constant(0)
  ROOT loss = f32[] reduce(m, z0), dimensions={0,1}, to_apply=add
})";
}

const char* kScan =
    R"(, backend_config={"scan": {"length": 4, "carry": 1, "xs": 1, "consts": 0, "ys": 0}})";

TEST(WhileVjpTest, TextScanMatchesFiniteDifferencesForBothRematModes) {
  auto module = ParseHloModule(Module(kScan));
  const std::optional<ScanConfig> config =
      ScanConfigOf(*module->entry_computation()->GetInstruction("loop"));
  ASSERT_TRUE(config.has_value());
  EXPECT_EQ(config->xs_index(0), 2);
  std::mt19937 rng(29);
  std::vector<runtime::HostTensor> inputs;
  for (int i = 0; i < 3; ++i) {
    inputs.push_back(testing::RandomTensor(
        module->entry_computation()->parameter_instruction(i)->shape(), rng, 0.6));
  }
  for (Remat remat : {Remat::kNone, Remat::kFull}) {
    GradOptions options;
    options.wrt = {0, 1};
    options.remat.kind = remat;
    auto r = testing::CheckGradients(*module, inputs, options, 1e-3);
    EXPECT_LT(r.max_rel_error, 2e-3);
  }
}

TEST(WhileVjpTest, LoopsThatAreNotScansAreRejected) {
  auto module = ParseHloModule(Module(""));
  try {
    BuildTrainingStep(*module);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("is a while loop that is not a scan"), std::string::npos)
        << e.what();
  }
}

TEST(WhileVjpTest, MalformedScanConfigIsReported) {
  auto module = ParseHloModule(Module(
      R"(, backend_config={"scan": {"length": 4, "carry": 2, "xs": 1, "consts": 0, "ys": 0}})"));
  try {
    BuildTrainingStep(*module);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("does not match the while state"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace weft
