// The block-scaled dot's expansion: no custom call is left, and the executor
// running the expansion gives what a float64 dot of the dequantized values
// gives, on random f8 elements and power-of-two scales (rank 2 and 3, the
// lhs scaled alone, scales padded under a configured block size).
#include "weft/compiler/block_scaled_dot.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "count_opcode.h"
#include "weft/hlo/parser.h"
#include "weft/hlo/verifier.h"
#include "weft/runtime/executor.h"

namespace weft::compiler {
namespace {

using runtime::HostTensor;
using weft::testing::CountOpcode;

// Random values of `shape`'s type, as the tensor holds them (rounded to f8).
HostTensor Random(const Shape& shape, std::mt19937_64& rng) {
  std::vector<double> values(static_cast<size_t>(shape.ElementsCount()));
  std::normal_distribution<double> normal(0, 2);
  std::uniform_int_distribution<int> exponent(-4, 4);
  for (double& v : values) {
    v = shape.element_type() == PrimitiveType::kF8E8M0FNU ? std::ldexp(1.0, exponent(rng))
                                                          : normal(rng);
  }
  return HostTensor::FromDoubles(shape, values);
}

// Expands the module's block-scaled dot, runs it on random inputs and checks
// it against a float64 dot of the dequantized inputs (block `block`).
void ExpectExpansionMatches(const std::string& hlo, int64_t block) {
  std::unique_ptr<HloModule> module = ParseHloModule(hlo);
  EXPECT_EQ(ExpandBlockScaledDots(*module), 1);
  EXPECT_NO_THROW(VerifyHloModule(*module));
  EXPECT_EQ(CountOpcode(*module, HloOpcode::kCustomCall), 0);
  EXPECT_EQ(CountOpcode(*module, HloOpcode::kDot), 1);
  const HloComputation* entry = module->entry_computation();
  std::mt19937_64 rng(7);
  std::vector<HostTensor> inputs;
  std::vector<std::vector<double>> x;
  for (const HloInstruction* p : entry->parameter_instructions()) {
    inputs.push_back(Random(p->shape(), rng));
    x.push_back(inputs.back().ToDoubles());
  }
  runtime::Executor executor(*module);
  const std::vector<double> got = executor.Run(inputs).at(0).ToDoubles();

  const Shape& lhs = entry->parameter_instruction(0)->shape();
  const Shape& rhs = entry->parameter_instruction(1)->shape();
  const int64_t rank = lhs.rank(), k = lhs.dimensions(rank - 1);
  const int64_t batch = rank == 3 ? lhs.dimensions(0) : 1;
  const int64_t m = lhs.dimensions(rank - 2), n = rhs.dimensions(rank - 2);
  auto value = [&](int s, int64_t b, int64_t row, int64_t c) {
    const int64_t rows = s == 0 ? m : n;
    double v = x[s][(b * rows + row) * k + c];
    if (x.size() > static_cast<size_t>(2 + s)) {
      const int64_t ks = entry->parameter_instruction(2 + s)->shape().dimensions(rank - 1);
      v *= x[2 + s][(b * rows + row) * ks + c / block];
    }
    return v;
  };
  ASSERT_EQ(got.size(), static_cast<size_t>(batch * m * n));
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double want = 0, size = 0;
        for (int64_t c = 0; c < k; ++c) {
          want += value(0, b, i, c) * value(1, b, j, c);
          size += std::fabs(value(0, b, i, c) * value(1, b, j, c));
        }
        EXPECT_NEAR(got[(b * m + i) * n + j], want, 1e-5 * size + 1e-30)
            << "element [" << b << "," << i << "," << j << "]";
      }
    }
  }
}

TEST(BlockScaledDotTest, BatchedOperandsBothScaled) {
  ExpectExpansionMatches(R"(
HloModule m
ENTRY e {
  a = f8e4m3fn[3,5,64] parameter(0)
  b = f8e4m3fn[3,7,64] parameter(1)
  as = f8e8m0fnu[3,5,2] parameter(2)
  bs = f8e8m0fnu[3,7,2] parameter(3)
  ROOT d = f32[3,5,7] custom-call(a, b, as, bs), custom_call_target="__op$block_scaled_dot"
}
)",
                         32);
}

TEST(BlockScaledDotTest, MatricesWithTheLhsScaledAlone) {
  ExpectExpansionMatches(R"(
HloModule m
ENTRY e {
  a = f8e4m3fn[6,48] parameter(0)
  b = bf16[4,48] parameter(1)
  as = f8e8m0fnu[6,3] parameter(2)
  ROOT d = f32[6,4] custom-call(a, b, as), custom_call_target="__op$block_scaled_dot"
}
)",
                         16);
}

TEST(BlockScaledDotTest, PaddedScalesUnderAConfiguredBlockSize) {
  // K = 40 in blocks of 32: two scales a row, the second covering 8 elements.
  ExpectExpansionMatches(R"(
HloModule m
ENTRY e {
  a = f8e4m3fn[4,40] parameter(0)
  b = f8e4m3fn[5,40] parameter(1)
  as = f8e8m0fnu[4,2] parameter(2)
  bs = f8e8m0fnu[5,2] parameter(3)
  ROOT d = f32[4,5] custom-call(a, b, as, bs), custom_call_target="__op$block_scaled_dot",
    backend_config={"block_scaled_dot_backend_config":{block_size:32}}
}
)",
                         32);
}

TEST(BlockScaledDotTest, ABf16ResultIsTheDotInBf16) {
  std::unique_ptr<HloModule> module = ParseHloModule(R"(
HloModule m
ENTRY e {
  a = f8e4m3fn[2,32] parameter(0)
  b = f8e4m3fn[3,32] parameter(1)
  as = f8e8m0fnu[2,1] parameter(2)
  bs = f8e8m0fnu[3,1] parameter(3)
  ROOT d = bf16[2,3] custom-call(a, b, as, bs), custom_call_target="__op$block_scaled_dot"
}
)");
  ExpandBlockScaledDots(*module);
  const HloInstruction* root = module->entry_computation()->root_instruction();
  EXPECT_EQ(root->opcode(), HloOpcode::kDot);
  EXPECT_EQ(root->name(), "d");
  EXPECT_EQ(root->operand(0)->shape().element_type(), PrimitiveType::kBF16);
}

}  // namespace
}  // namespace weft::compiler
