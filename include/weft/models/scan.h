// Scan: a first-class loop over stacked per-layer inputs, lowered to an HLO
// while whose structure autodiff understands (autodiff/scan_config.h).
//
//   ScanOutputs out = Scan(module, b, "layers", body, {x}, {wq_stacked, wo_stacked}, {seg});
//   // body(b, step): step.carry = {x_i}, step.xs = {wq[i], wo[i]}, step.consts = {seg}
//   //   returns {.carry = {x_{i+1}}, .ys = {...per-step outputs, stacked [L, ...]}}
//
// Lowering: state (i, carry..., xs..., consts..., ys...); the body reads
// xs_j[i] with dynamic-slice + reshape and writes ys_j[i] with
// dynamic-update-slice; the while's backend_config records the structure.
// Carries must be floating-point arrays (pass integers as consts).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "weft/hlo/builder.h"
#include "weft/hlo/module.h"

namespace weft {

struct ScanStep {
  HloInstruction* index = nullptr;     // s32[] step number, 0..L-1
  std::vector<HloInstruction*> carry;  // this step's carry
  std::vector<HloInstruction*> xs;     // this step's slice of each stacked input
  std::vector<HloInstruction*> consts;
};

struct ScanStepResult {
  std::vector<HloInstruction*> carry;  // the next carry (same shapes)
  std::vector<HloInstruction*> ys;     // per-step outputs, stacked over steps
};

using ScanBody = std::function<ScanStepResult(HloComputationBuilder& b, const ScanStep& step)>;

struct ScanOutputs {
  std::vector<HloInstruction*> carry;  // the final carry
  std::vector<HloInstruction*> ys;     // stacked [L, ...]
  HloInstruction* loop = nullptr;
};

// Adds the loop to `b` (its body and condition to `module`, named
// "<name>_body" / "<name>_cond"). The length is the xs' leading dim (all
// equal); with no xs, `length` must be given.
ScanOutputs Scan(HloModule& module, HloComputationBuilder& b, const std::string& name,
                 const ScanBody& body, std::vector<HloInstruction*> carry_init,
                 std::vector<HloInstruction*> xs, std::vector<HloInstruction*> consts = {},
                 int64_t length = 0);

}  // namespace weft
