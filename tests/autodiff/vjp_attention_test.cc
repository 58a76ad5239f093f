// Attention vjp: the backward custom call (with dlse when lse is used)
// against central differences of the forward kernel.
#include <gtest/gtest.h>

#include "grad_check.h"

namespace weft {
namespace {

using testing::CheckGradients;
using testing::LossModule;
using testing::RandomTensor;

std::string Body(bool use_lse) {
  std::string body = R"(  q = f32[2,4,8,4] parameter(0)
  k = f32[2,2,8,4] parameter(1)
  v = f32[2,2,8,4] parameter(2)
  seg = s32[2,8] constant({ { 0, 0, 0, 1, 1, 1, 1, 1 }, { 0, 0, 0, 0, 0, 2, 2, 2 } })
  fa = (f32[2,4,8,4], f32[2,4,8]) custom-call(q, k, v, seg), custom_call_target="weft.flex_attention", backend_config={"mask": "q_idx >= kv_idx && seg[b, q_idx] == seg[b, kv_idx]", "mask_tensors": ["seg"], "scale": 0.5}
  out = f32[2,4,8,4] get-tuple-element(fa), index=0
)";
  if (use_lse) {
    body += R"(  lse = f32[2,4,8] get-tuple-element(fa), index=1
  lse_b = f32[2,4,8,4] broadcast(lse), dimensions={0,1,2}
  r = f32[2,4,8,4] add(out, lse_b))";
  } else {
    body += "  r = f32[2,4,8,4] copy(out)";
  }
  return body;
}

void Check(bool use_lse) {
  auto module = ParseHloModule(LossModule(Body(use_lse), "f32[2,4,8,4]", 3));
  std::mt19937 rng(23);
  const HloComputation* e = module->entry_computation();
  std::vector<runtime::HostTensor> inputs;
  for (int i = 0; i < 4; ++i)
    inputs.push_back(RandomTensor(e->parameter_instruction(i)->shape(), rng));
  GradOptions options;
  options.wrt = {0, 1, 2};
  auto r = CheckGradients(*module, inputs, options);
  for (size_t i = 0; i < r.analytic.size(); ++i) {
    EXPECT_NEAR(r.analytic[i], r.numeric[i], 3e-3 * std::max(1.0, std::abs(r.numeric[i])))
        << "operand " << i;
  }
  EXPECT_LT(r.max_rel_error, 3e-3);
}

TEST(AttentionVjpTest, GqaWithDocumentMask) { Check(false); }

TEST(AttentionVjpTest, LseGradientFlowsThroughDlse) {
  Check(true);
  auto module = ParseHloModule(LossModule(Body(true), "f32[2,4,8,4]", 3));
  GradOptions options;
  options.wrt = {0, 1, 2};
  const std::string text = BuildTrainingStep(*module, options)->ToString();
  EXPECT_NE(text.find("weft.flex_attention_backward"), std::string::npos);
  EXPECT_NE(text.find("has_dlse"), std::string::npos);
}

}  // namespace
}  // namespace weft
