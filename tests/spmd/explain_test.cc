#include <gtest/gtest.h>

#include "weft/hlo/parser.h"
#include "weft/spmd/sharding_propagation.h"

namespace weft {
namespace {

TEST(ExplainTest, ChainGoesBackToTheAnnotation) {
  auto m = ParseHloModule(R"(HloModule m, num_partitions=4

ENTRY main {
  w = f32[16,32] parameter(0), sharding={devices=[1,4]<=[4]}
  x = f32[8,16] parameter(1)
  d = f32[8,32] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT n = f32[8,32] negate(d)
}
)");
  PropagationResult result = PropagateShardings(*m);
  const std::string text = ExplainSharding(*m, result, "d");
  EXPECT_NE(text.find("d: {devices=[1,4]<=[4]}"), std::string::npos) << text;
  EXPECT_NE(text.find("level 1, forward from operand w via dot"), std::string::npos) << text;
  EXPECT_NE(text.find("user annotation: {devices=[1,4]<=[4]}"), std::string::npos) << text;
  EXPECT_THROW(ExplainSharding(*m, result, "nope"), Error);
}

}  // namespace
}  // namespace weft
