// Shape-op vjp rules against central differences of the executor's forward.
#include <gtest/gtest.h>

#include "grad_check.h"

namespace weft {
namespace {

using testing::CheckGradients;
using testing::LossModule;
using testing::RandomTensor;

struct Case {
  const char* name;
  const char* a_shape;
  const char* body;  // defines r from a (and s32 scalars i, j = 1, 2)
  const char* r_shape;
};

const Case kCases[] = {
    {"broadcast", "f32[3]", "r = f32[2,3,4] broadcast(a), dimensions={1}", "f32[2,3,4]"},
    {"broadcast_two_dims", "f32[3,4]", "r = f32[3,2,4] broadcast(a), dimensions={0,2}",
     "f32[3,2,4]"},
    {"reshape", "f32[3,4]", "r = f32[2,6] reshape(a)", "f32[2,6]"},
    {"transpose", "f32[2,3,4]", "r = f32[4,2,3] transpose(a), dimensions={2,0,1}", "f32[4,2,3]"},
    {"reverse", "f32[2,3,4]",
     "e = f32[2,3,4] exponential(a)\n  r = f32[2,3,4] reverse(e), dimensions={0,2}", "f32[2,3,4]"},
    {"slice", "f32[5,6]", "r = f32[2,3] slice(a), slice={[1:5:2], [0:6:2]}", "f32[2,3]"},
    {"dynamic_slice", "f32[5,6]", "r = f32[2,3] dynamic-slice(a, i, j), dynamic_slice_sizes={2,3}",
     "f32[2,3]"},
    {"dynamic_update_slice", "f32[5,6]",
     "u = f32[2,3] slice(a), slice={[0:2], [0:3]}\n  e = f32[2,3] exponential(u)\n"
     "  r = f32[5,6] dynamic-update-slice(a, e, i, j)",
     "f32[5,6]"},
    {"concatenate", "f32[2,3]",
     "e = f32[2,3] exponential(a)\n  r = f32[2,9] concatenate(a, e, a), dimensions={1}",
     "f32[2,9]"},
    {"tuple", "f32[2,3]",
     "e = f32[2,3] exponential(a)\n  t = (f32[2,3], f32[2,3]) tuple(a, e)\n"
     "  t0 = f32[2,3] get-tuple-element(t), index=0\n  t1 = f32[2,3] get-tuple-element(t), "
     "index=1\n  r = f32[2,3] multiply(t0, t1)",
     "f32[2,3]"},
    {"pad_free_slice_chain", "f32[4,4]",
     "s = f32[2,4] slice(a), slice={[2:4], [0:4]}\n  t = f32[4,2] transpose(s), "
     "dimensions={1,0}\n  r = f32[4,2] multiply(t, t)",
     "f32[4,2]"},
};

class ShapeOpVjpTest : public ::testing::TestWithParam<Case> {};

TEST_P(ShapeOpVjpTest, MatchesFiniteDifferences) {
  const Case& c = GetParam();
  const std::string body = std::string("  a = ") + c.a_shape +
                           " parameter(0)\n  i = s32[] constant(1)\n  j = s32[] constant(2)\n  " +
                           c.body;
  auto module = ParseHloModule(LossModule(body, c.r_shape, 1));
  std::mt19937 rng(5);
  std::vector<runtime::HostTensor> inputs = {
      RandomTensor(module->entry_computation()->parameter_instruction(0)->shape(), rng),
      RandomTensor(module->entry_computation()->parameter_instruction(1)->shape(), rng)};
  GradOptions options;
  options.wrt = {0};
  auto r = CheckGradients(*module, inputs, options);
  EXPECT_LT(r.max_rel_error, 2e-3)
      << c.name << ": analytic " << r.analytic[0] << " numeric " << r.numeric[0];
}

INSTANTIATE_TEST_SUITE_P(Ops, ShapeOpVjpTest, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace weft
