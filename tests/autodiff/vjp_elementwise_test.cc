// Elementwise vjp rules against central differences of the executor's forward.
#include <gtest/gtest.h>

#include "grad_check.h"

namespace weft {
namespace {

using testing::CheckGradients;
using testing::LossModule;
using testing::RandomTensor;

struct Case {
  const char* name;
  const char* body;  // defines r = f32[3,4] from a (and b) = f32[3,4]
  int num_inputs;
  bool positive;  // inputs must be > 0 (log, sqrt, rsqrt, power)
};

const Case kCases[] = {
    {"add", "r = f32[3,4] add(a, b)", 2, false},
    {"subtract", "r = f32[3,4] subtract(a, b)", 2, false},
    {"multiply", "r = f32[3,4] multiply(a, b)", 2, false},
    {"divide", "r = f32[3,4] divide(a, b)", 2, true},
    {"maximum", "r = f32[3,4] maximum(a, b)", 2, false},
    {"minimum", "r = f32[3,4] minimum(a, b)", 2, false},
    {"negate", "r = f32[3,4] negate(a)", 1, false},
    {"exp", "r = f32[3,4] exponential(a)", 1, false},
    {"log", "r = f32[3,4] log(a)", 1, true},
    {"tanh", "r = f32[3,4] tanh(a)", 1, false},
    {"logistic", "r = f32[3,4] logistic(a)", 1, false},
    {"rsqrt", "r = f32[3,4] rsqrt(a)", 1, true},
    {"sqrt", "r = f32[3,4] sqrt(a)", 1, true},
    {"power", "r = f32[3,4] power(a, b)", 2, true},
    {"copy", "r = f32[3,4] copy(a)", 1, false},
    {"select", "c = pred[3,4] compare(a, b), direction=GT\n  r = f32[3,4] select(c, a, b)", 2,
     false},
    {"convert",
     "a16 = bf16[3,4] convert(a)\n  a32 = f32[3,4] convert(a16)\n  r = f32[3,4] "
     "multiply(a32, b)",
     2, false},
};

class ElementwiseVjpTest : public ::testing::TestWithParam<Case> {};

TEST_P(ElementwiseVjpTest, MatchesFiniteDifferences) {
  const Case& c = GetParam();
  std::string body = "  a = f32[3,4] parameter(0)\n";
  if (c.num_inputs == 2) body += "  b = f32[3,4] parameter(1)\n";
  body += "  " + std::string(c.body);
  auto module = ParseHloModule(LossModule(body, "f32[3,4]", c.num_inputs));
  std::mt19937 rng(11);
  std::vector<runtime::HostTensor> inputs;
  const Shape s(PrimitiveType::kF32, {3, 4});
  for (int i = 0; i < c.num_inputs; ++i) inputs.push_back(RandomTensor(s, rng, 1.0, c.positive));
  inputs.push_back(RandomTensor(s, rng));
  GradOptions options;
  for (int i = 0; i < c.num_inputs; ++i) options.wrt.push_back(i);
  // convert rounds through bf16: its derivative is 1 only up to bf16 steps,
  // so differentiate with a step far above them.
  const bool bf16 = std::string(c.name) == "convert";
  auto r = CheckGradients(*module, inputs, options, bf16 ? 0.2 : 1e-2);
  EXPECT_LT(r.max_rel_error, bf16 ? 3e-2 : 2e-3) << c.name;
}

INSTANTIATE_TEST_SUITE_P(Ops, ElementwiseVjpTest, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(ElementwiseVjpTest, CompareOperandsGetNoGradientThroughThePredicate) {
  // r = select(a > b, 1, 2) is piecewise constant: zero gradient everywhere.
  const std::string body =
      "  a = f32[3,4] parameter(0)\n  b = f32[3,4] parameter(1)\n"
      "  c = pred[3,4] compare(a, b), direction=GT\n  one = f32[] constant(1)\n"
      "  two = f32[] constant(2)\n  o = f32[3,4] broadcast(one), dimensions={}\n"
      "  t = f32[3,4] broadcast(two), dimensions={}\n  r = f32[3,4] select(c, o, t)";
  auto module = ParseHloModule(LossModule(body, "f32[3,4]", 2));
  std::mt19937 rng(3);
  const Shape s(PrimitiveType::kF32, {3, 4});
  std::vector<runtime::HostTensor> inputs = {RandomTensor(s, rng), RandomTensor(s, rng),
                                             RandomTensor(s, rng)};
  GradOptions options;
  options.wrt = {0, 1};
  auto step = BuildTrainingStep(*module, options);
  runtime::Executor exec(*step);
  auto out = exec.Run(inputs);
  for (int k = 1; k <= 2; ++k) {
    for (double g : out[k].ToDoubles()) EXPECT_EQ(g, 0.0);
  }
}

}  // namespace
}  // namespace weft
