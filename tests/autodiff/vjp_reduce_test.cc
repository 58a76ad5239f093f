// reduce vjp (add and max) against central differences.
#include <gtest/gtest.h>

#include "grad_check.h"

namespace weft {
namespace {

using testing::CheckGradients;
using testing::LossModule;
using testing::RandomTensor;

void Check(const std::string& body, const std::string& r_shape) {
  auto module = ParseHloModule(LossModule("  a = f32[3,4,5] parameter(0)\n  " + body, r_shape, 1));
  std::mt19937 rng(13);
  const HloComputation* e = module->entry_computation();
  std::vector<runtime::HostTensor> inputs = {
      RandomTensor(e->parameter_instruction(0)->shape(), rng),
      RandomTensor(e->parameter_instruction(1)->shape(), rng)};
  GradOptions options;
  options.wrt = {0};
  // Max is piecewise linear: a step small enough not to change the argmax.
  auto r = CheckGradients(*module, inputs, options, 1e-3);
  EXPECT_LT(r.max_rel_error, 5e-3) << body;
}

TEST(ReduceVjpTest, AddOverOneDim) {
  Check("z0 = f32[] constant(0)\n  r = f32[3,5] reduce(a, z0), dimensions={1}, to_apply=add",
        "f32[3,5]");
}

TEST(ReduceVjpTest, AddOverTwoDims) {
  Check("z0 = f32[] constant(0)\n  r = f32[4] reduce(a, z0), dimensions={0,2}, to_apply=add",
        "f32[4]");
}

TEST(ReduceVjpTest, MaxOverLastDim) {
  Check("m0 = f32[] constant(-inf)\n  r = f32[3,4] reduce(a, m0), dimensions={2}, to_apply=max",
        "f32[3,4]");
}

TEST(ReduceVjpTest, MaxTiesShareTheGradient) {
  // Every element equal: each of the 5 gets a fifth.
  auto module = ParseHloModule(R"(HloModule m
max {
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  ROOT m = f32[] maximum(x, y)
}
ENTRY e {
  a = f32[5] parameter(0)
  m0 = f32[] constant(-inf)
  ROOT r = f32[] reduce(a, m0), dimensions={0}, to_apply=max
})");
  auto step = BuildTrainingStep(*module);
  runtime::Executor exec(*step);
  auto out = exec.Run({runtime::HostTensor::FromDoubles(Shape(PrimitiveType::kF32, {5}),
                                                        std::vector<double>(5, 0.75))});
  for (double g : out[1].ToDoubles()) EXPECT_FLOAT_EQ(g, 0.2f);
}

TEST(ReduceVjpTest, OtherReducersAreRejectedWithTheirName) {
  auto module = ParseHloModule(R"(HloModule m
mul {
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  ROOT m = f32[] multiply(x, y)
}
ENTRY e {
  a = f32[5] parameter(0)
  one = f32[] constant(1)
  ROOT r = f32[] reduce(a, one), dimensions={0}, to_apply=mul
})");
  try {
    BuildTrainingStep(*module);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("only add and maximum"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace weft
