// BuildTrainingStep's contract: parameters, result layout, errors.
#include "weft/autodiff/grad.h"

#include <gtest/gtest.h>

#include "grad_check.h"

namespace weft {
namespace {

constexpr const char* kForward = R"(HloModule m
add {
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  ROOT s = f32[] add(x, y)
}
ENTRY e {
  a = f32[4] parameter(0), sharding={replicated}
  idx = s32[4] parameter(1)
  b = f32[4] parameter(2)
  ab = f32[4] multiply(a, b)
  t = f32[4] tanh(ab)
  z = f32[] constant(0)
  ROOT l = f32[] reduce(t, z), dimensions={0}, to_apply=add
})";

TEST(GradTest, DefaultDifferentiatesEveryFloatParameter) {
  auto forward = ParseHloModule(kForward);
  EXPECT_EQ(DifferentiatedParameters(*forward, {}), (std::vector<int64_t>{0, 2}));
  auto step = BuildTrainingStep(*forward);
  const HloComputation* entry = step->entry_computation();
  ASSERT_EQ(entry->num_parameters(), 3);
  EXPECT_EQ(entry->parameter_instruction(0)->name(), "a");
  EXPECT_EQ(entry->parameter_instruction(0)->sharding(), HloSharding::Replicate());
  EXPECT_EQ(entry->root_instruction()->shape().ToString(), "(f32[], f32[4], f32[4])");

  std::mt19937 rng(1);
  std::vector<runtime::HostTensor> in = {
      testing::RandomTensor(Shape(PrimitiveType::kF32, {4}), rng),
      runtime::HostTensor::FromVector<int32_t>(PrimitiveType::kS32, {4}, {0, 1, 2, 3}),
      testing::RandomTensor(Shape(PrimitiveType::kF32, {4}), rng)};
  runtime::Executor exec(*step);
  auto out = exec.Run(in);
  const auto a = in[0].ToDoubles(), b = in[2].ToDoubles();
  for (int i = 0; i < 4; ++i) {
    const double sech2 = 1 - std::tanh(a[i] * b[i]) * std::tanh(a[i] * b[i]);
    EXPECT_NEAR(out[1].GetDouble(i), sech2 * b[i], 1e-6);
    EXPECT_NEAR(out[2].GetDouble(i), sech2 * a[i], 1e-6);
  }
}

TEST(GradTest, UnusedParameterGetsZeroGradient) {
  auto forward = ParseHloModule(R"(HloModule m
ENTRY e {
  a = f32[] parameter(0)
  b = f32[3] parameter(1)
  ROOT r = f32[] exponential(a)
})");
  auto step = BuildTrainingStep(*forward);
  runtime::Executor exec(*step);
  auto out = exec.Run({runtime::HostTensor::Scalar(PrimitiveType::kF32, 0.5),
                       runtime::HostTensor::FromDoubles(Shape(PrimitiveType::kF32, {3}),
                                                        std::vector<double>{1, 2, 3})});
  EXPECT_NEAR(out[1].GetDouble(0), std::exp(0.5), 1e-6);
  for (double g : out[2].ToDoubles()) EXPECT_EQ(g, 0.0);
}

// Mixed precision: a weight kept in f32 and cast to bf16 where a dot reads
// it. Its gradient x^T . dy is a sum over 64 rows: rounded to bf16 it would
// be off by ~2^-9 relative; the step's dot returns f32 instead (through the
// transpose into the weight's [out, in] layout), so it matches a float64
// sum of the same bf16 products to f32 accuracy.
TEST(GradTest, AWeightCastToBf16GetsItsGradientFromAnF32Dot) {
  auto forward = ParseHloModule(R"(HloModule m
add {
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  ROOT s = f32[] add(x, y)
}
ENTRY e {
  x = bf16[64,8] parameter(0)
  w = f32[4,8] parameter(1)
  wb = bf16[4,8] convert(w)
  y = f32[64,4] dot(x, wb), lhs_contracting_dims={1}, rhs_contracting_dims={1}
  sq = f32[64,4] multiply(y, y)
  z = f32[] constant(0)
  ROOT l = f32[] reduce(sq, z), dimensions={0,1}, to_apply=add
})");
  GradOptions o;
  o.wrt = {1};
  auto step = BuildTrainingStep(*forward, o);
  for (const HloComputation* c : step->computations()) {
    for (const HloInstruction* instr : c->instructions()) {
      if (instr->opcode() != HloOpcode::kConvert) continue;
      EXPECT_NE(instr->operand(0)->opcode(), HloOpcode::kDot) << instr->ToString();
      EXPECT_NE(instr->operand(0)->opcode(), HloOpcode::kTranspose) << instr->ToString();
    }
  }
  std::mt19937 rng(11);
  std::vector<runtime::HostTensor> in = {
      testing::RandomTensor(Shape(PrimitiveType::kBF16, {64, 8}), rng),
      testing::RandomTensor(Shape(PrimitiveType::kF32, {4, 8}), rng)};
  runtime::Executor exec(*step);
  const auto out = exec.Run(in);
  ASSERT_EQ(out[1].element_type(), PrimitiveType::kF32);
  // dL/dw[j, k] = sum_i 2 y[i, j] x[i, k], y from the bf16-rounded weights;
  // dy = 2y is rounded to bf16 as the step's cotangent is.
  const std::vector<double> x = in[0].ToDoubles(), w = in[1].ToDoubles();
  std::vector<double> wb(w.size());
  for (size_t i = 0; i < w.size(); ++i) wb[i] = RoundToType(w[i], PrimitiveType::kBF16);
  for (int j = 0; j < 4; ++j) {
    for (int k = 0; k < 8; ++k) {
      double g = 0, scale = 0;
      for (int i = 0; i < 64; ++i) {
        double y = 0;
        for (int m = 0; m < 8; ++m) y += x[i * 8 + m] * wb[j * 8 + m];
        const double dy = RoundToType(2 * static_cast<float>(y), PrimitiveType::kBF16);
        g += dy * x[i * 8 + k];
        scale += std::abs(dy * x[i * 8 + k]);
      }
      EXPECT_NEAR(out[1].GetDouble(j * 8 + k), g, 1e-5 * scale) << j << "," << k;
    }
  }
}

void ExpectError(const std::string& text, const GradOptions& options, const std::string& what) {
  auto forward = ParseHloModule(text);
  try {
    BuildTrainingStep(*forward, options);
    FAIL() << "expected an error containing: " << what;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
  }
}

TEST(GradTest, ErrorsNameTheProblem) {
  GradOptions bad_wrt;
  bad_wrt.wrt = {7};
  ExpectError(kForward, bad_wrt, "names parameter 7");
  GradOptions int_wrt;
  int_wrt.wrt = {1};
  ExpectError(kForward, int_wrt, "only floating-point arrays");
  ExpectError(
      "HloModule m\nENTRY e {\n  a = f32[2] parameter(0)\n  ROOT r = f32[2] exponential(a)\n}", {},
      "must be a floating-point scalar loss");
  ExpectError("HloModule m\nENTRY e {\n  a = f32[] parameter(0)\n  ROOT r = f32[] sine(a)\n}", {},
              "no vjp rule for");
}

}  // namespace
}  // namespace weft
