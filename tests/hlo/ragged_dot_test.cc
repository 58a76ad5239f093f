// A ragged-dot's mode and the lhs dims its group_sizes is indexed by, for
// each mode (XLA's [b..., x..., g] rule).
#include "weft/hlo/ragged_dot.h"

#include <gtest/gtest.h>

#include <string>

#include "weft/hlo/parser.h"

namespace weft {
namespace {

const HloInstruction& Root(const std::unique_ptr<HloModule>& m) {
  return *m->entry_computation()->root_instruction();
}

std::unique_ptr<HloModule> RaggedDot(const std::string& lhs, const std::string& rhs,
                                     const std::string& sizes, const std::string& out,
                                     const std::string& dnums) {
  return ParseHloModule("HloModule m\nENTRY e {\n  a = " + lhs + " parameter(0)\n  b = " + rhs +
                        " parameter(1)\n  s = " + sizes + " parameter(2)\n  ROOT d = " + out +
                        " ragged-dot(a, b, s), " + dnums + "\n}\n");
}

TEST(RaggedDotTest, NonContractingPrefixIsTheBatchThenTheRowsBefore) {
  // lhs [b, x, m, k]: ragged m, so the sizes are [b, x, g].
  auto m = RaggedDot("f32[2,3,4,5]", "f32[6,2,5,7]", "u32[2,3,6]", "f32[2,3,4,7]",
                     "lhs_batch_dims={0}, rhs_batch_dims={1}, lhs_contracting_dims={3}, "
                     "rhs_contracting_dims={2}, lhs_ragged_dims={2}, rhs_group_dims={0}");
  EXPECT_EQ(RaggedDotModeOf(Root(m)), RaggedDotMode::kNonContracting);
  EXPECT_EQ(RaggedDotPrefix(Root(m)), (std::vector<int64_t>{0, 1}));
}

TEST(RaggedDotTest, ContractingPrefixIsTheBatchThenTheContractionsListedBefore) {
  // lhs [b, m, k0, k1] contracting {3, 2}, ragged k0: listed after k1.
  auto m = RaggedDot("f32[2,3,4,5]", "f32[2,5,4,7]", "u32[2,5,6]", "f32[6,2,3,7]",
                     "lhs_batch_dims={0}, rhs_batch_dims={0}, lhs_contracting_dims={3,2}, "
                     "rhs_contracting_dims={1,2}, lhs_ragged_dims={2}");
  EXPECT_EQ(RaggedDotModeOf(Root(m)), RaggedDotMode::kContracting);
  EXPECT_EQ(RaggedDotPrefix(Root(m)), (std::vector<int64_t>{0, 3}));
}

TEST(RaggedDotTest, BatchPrefixIsTheBatchDimsListedBefore) {
  auto m = RaggedDot("f32[2,3,4]", "f32[2,3,4,5]", "u32[2,6]", "f32[2,3,5]",
                     "lhs_batch_dims={0,1}, rhs_batch_dims={0,1}, lhs_contracting_dims={2}, "
                     "rhs_contracting_dims={2}, lhs_ragged_dims={1}");
  EXPECT_EQ(RaggedDotModeOf(Root(m)), RaggedDotMode::kBatch);
  EXPECT_EQ(RaggedDotPrefix(Root(m)), std::vector<int64_t>{0});
}

}  // namespace
}  // namespace weft
