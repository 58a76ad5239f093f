// dot vjp with general dimension numbers against central differences.
#include <gtest/gtest.h>

#include "grad_check.h"

namespace weft {
namespace {

using testing::CheckGradients;
using testing::LossModule;
using testing::RandomTensor;

struct Case {
  const char* name;
  const char* body;  // r from a and b
  const char* r_shape;
};

const Case kCases[] = {
    {"matmul",
     "a = f32[3,4] parameter(0)\n  b = f32[4,5] parameter(1)\n"
     "  r = f32[3,5] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}",
     "f32[3,5]"},
    {"weights_in_out",
     "a = f32[2,3,4] parameter(0)\n  b = f32[4,5] parameter(1)\n"
     "  r = f32[2,3,5] dot(a, b), lhs_contracting_dims={2}, "
     "rhs_contracting_dims={0}",
     "f32[2,3,5]"},
    {"transposed_operands",
     "a = f32[4,3] parameter(0)\n  b = f32[5,4] parameter(1)\n"
     "  r = f32[3,5] dot(a, b), lhs_contracting_dims={0}, "
     "rhs_contracting_dims={1}",
     "f32[3,5]"},
    {"batched",
     "a = f32[2,3,4] parameter(0)\n  b = f32[2,4,5] parameter(1)\n"
     "  r = f32[2,3,5] dot(a, b), lhs_batch_dims={0}, lhs_contracting_dims={2}, "
     "rhs_batch_dims={0}, rhs_contracting_dims={1}",
     "f32[2,3,5]"},
    {"batch_not_leading",
     "a = f32[3,2,4] parameter(0)\n  b = f32[4,5,2] parameter(1)\n"
     "  r = f32[2,3,5] dot(a, b), lhs_batch_dims={1}, "
     "lhs_contracting_dims={2}, rhs_batch_dims={2}, rhs_contracting_dims={0}",
     "f32[2,3,5]"},
    {"two_contracting",
     "a = f32[3,4,2] parameter(0)\n  b = f32[2,5,4] parameter(1)\n"
     "  r = f32[3,5] dot(a, b), lhs_contracting_dims={1,2}, "
     "rhs_contracting_dims={2,0}",
     "f32[3,5]"},
};

class DotVjpTest : public ::testing::TestWithParam<Case> {};

TEST_P(DotVjpTest, MatchesFiniteDifferences) {
  const Case& c = GetParam();
  auto module = ParseHloModule(LossModule(std::string("  ") + c.body, c.r_shape, 2));
  std::mt19937 rng(9);
  const HloComputation* e = module->entry_computation();
  std::vector<runtime::HostTensor> inputs;
  for (int i = 0; i < 3; ++i)
    inputs.push_back(RandomTensor(e->parameter_instruction(i)->shape(), rng));
  GradOptions options;
  options.wrt = {0, 1};
  auto r = CheckGradients(*module, inputs, options);
  EXPECT_LT(r.max_rel_error, 2e-3) << c.name;
}

INSTANTIATE_TEST_SUITE_P(Dims, DotVjpTest, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace weft
