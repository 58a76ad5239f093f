// gather vjp (an embedding lookup) -> scatter-add, against central differences.
#include <gtest/gtest.h>

#include "grad_check.h"

namespace weft {
namespace {

using testing::CheckGradients;
using testing::LossModule;
using testing::RandomTensor;

TEST(GatherVjpTest, EmbeddingLookupWithRepeatedRows) {
  const std::string body =
      "  emb = f32[6,4] parameter(0)\n"
      "  tok = s32[2,3] constant({ { 1, 5, 1 }, { 0, 1, 3 } })\n"
      "  r = f32[2,3,4] gather(emb, tok), offset_dims={2}, collapsed_slice_dims={0}, "
      "start_index_map={0}, index_vector_dim=2, slice_sizes={1,4}";
  auto module = ParseHloModule(LossModule(body, "f32[2,3,4]", 1));
  std::mt19937 rng(17);
  std::vector<runtime::HostTensor> inputs = {
      RandomTensor(Shape(PrimitiveType::kF32, {6, 4}), rng),
      RandomTensor(Shape(PrimitiveType::kF32, {2, 3, 4}), rng)};
  GradOptions options;
  options.wrt = {0};
  auto r = CheckGradients(*module, inputs, options);
  EXPECT_LT(r.max_rel_error, 2e-3);

  // Exactly: row 1 is used three times, rows 2 and 4 never.
  auto step = BuildTrainingStep(*module, options);
  runtime::Executor exec(*step);
  const auto out = exec.Run(inputs);
  const std::vector<double> g = out[1].ToDoubles();
  const std::vector<double> w = inputs[1].ToDoubles();
  for (int d = 0; d < 4; ++d) {
    EXPECT_NEAR(g[1 * 4 + d], w[0 * 4 + d] + w[2 * 4 + d] + w[4 * 4 + d], 1e-6);
    EXPECT_EQ(g[2 * 4 + d], 0.0);
    EXPECT_EQ(g[4 * 4 + d], 0.0);
  }
}

}  // namespace
}  // namespace weft
