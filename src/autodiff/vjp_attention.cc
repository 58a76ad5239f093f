// vjp of the flex attention custom call: the backward kernel
// ("weft.flex_attention_backward", runtime/executor.h documents both calls)
// with the forward's config, plus dlse when the forward's lse is used.
#include <nlohmann/json.hpp>

#include "vjp.h"
#include "weft/base/error.h"

namespace weft::autodiff {
namespace {

constexpr const char* kForward = "weft.flex_attention";
constexpr const char* kBackward = "weft.flex_attention_backward";

void CustomCall(VjpContext& c, const HloInstruction& f, std::span<HloInstruction* const> ct) {
  const std::string& target = f.attrs().custom_call_target;
  WEFT_CHECK(target == kForward,
             "autodiff: {} calls '{}', which has no vjp rule; only '{}' is differentiable",
             f.Describe(), target, kForward);
  WEFT_CHECK(f.shape().IsTuple() && f.shape().tuple_shapes().size() == 2,
             "autodiff: {} returns only the attention output; emit the (out, lse) tuple form so "
             "the backward kernel gets the lse it needs",
             f.Describe());
  nlohmann::json config = nlohmann::json::object();
  if (!f.attrs().backend_config.empty()) {
    config = nlohmann::json::parse(f.attrs().backend_config, nullptr, false);
    WEFT_CHECK(!config.is_discarded() && config.is_object(),
               "autodiff: {} has a backend_config that is not a JSON object", f.Describe());
  }
  const int64_t num_masks = config.contains("mask_tensors") ? config["mask_tensors"].size() : 0;
  for (int64_t i = 3 + num_masks; i < f.operand_count(); ++i) {
    WEFT_CHECK(!c.NeedsGrad(f.operand(i)),
               "autodiff: {} operand {} (a score tensor) depends on a differentiated parameter; "
               "gradients of score tensors are not supported, so compute it from "
               "non-differentiated inputs",
               f.Describe(), i);
  }
  const bool has_dlse = ct.size() > 1 && ct[1] != nullptr;
  config["has_dlse"] = has_dlse;

  std::vector<HloInstruction*> operands = {c.Primal(f.operand(0)), c.Primal(f.operand(1)),
                                           c.Primal(f.operand(2)), c.PrimalElement(&f, 0),
                                           c.PrimalElement(&f, 1)};
  operands.push_back(ct[0] ? ct[0] : c.Zeros(f.shape().tuple_shapes(0)));
  if (has_dlse) operands.push_back(ct[1]);
  for (int64_t i = 3; i < f.operand_count(); ++i) operands.push_back(c.Primal(f.operand(i)));
  const Shape result =
      Shape::Tuple({f.operand(0)->shape(), f.operand(1)->shape(), f.operand(2)->shape()});
  HloInstruction* grads = c.b().CustomCall(operands, result, kBackward, config.dump());
  for (int64_t k = 0; k < 3; ++k) {
    if (c.NeedsGrad(f.operand(k))) c.Accumulate(f.operand(k), c.b().GetTupleElement(grads, k));
  }
}

}  // namespace

void RegisterAttentionVjps(VjpTable& t) { t.Register(HloOpcode::kCustomCall, CustomCall); }

}  // namespace weft::autodiff
