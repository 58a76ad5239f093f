// Internal to autodiff: how a scan while is differentiated. The plan is made
// while the forward is copied (the forward loop must save residuals, so it is
// replaced by an augmented loop), and used by the while vjp rule.
//
// Augmented forward state: the scan's state, then one stacked residual
//   [L, ...] per value the backward reads but does not recompute.
// Backward state (a while counting i from L-1 down to 0):
//   (i, dcarry_0..c-1, xs_0..x-1, consts_0..k-1, res_0..r-1, dys_0..y-1,
//    dxs accumulators [L, ...] for the differentiated xs)
#pragma once

#include <cstdint>
#include <vector>

#include "vjp.h"

namespace weft::autodiff {

struct ScanPlan {
  ScanConfig config;
  HloComputation* forward_condition = nullptr;  // over the augmented state
  HloComputation* forward_body = nullptr;
  std::vector<Shape> residual_shapes;  // per step; stacked [L, ...] in the states
  HloComputation* backward_condition = nullptr;
  HloComputation* backward_body = nullptr;
  std::vector<int64_t> diff_xs;          // xs indices with an accumulator
  std::vector<int64_t> xs_group;         // shard_as id per diff_xs entry (-1: none)
  std::vector<int64_t> carry_group;      // shard_as id per carry (-1: none)
  std::vector<int64_t> offloaded_state;  // forward state elements kept in host memory

  int64_t num_residuals() const { return static_cast<int64_t>(residual_shapes.size()); }
  // Backward state positions.
  int64_t bwd_xs(int64_t j) const { return 1 + config.num_carry + j; }
  int64_t bwd_consts(int64_t j) const { return 1 + config.num_carry + config.num_xs + j; }
  int64_t bwd_res(int64_t r) const {
    return 1 + config.num_carry + config.num_xs + config.num_consts + r;
  }
  int64_t bwd_dys(int64_t j) const { return bwd_res(num_residuals()) + j; }
  int64_t bwd_acc(int64_t a) const { return bwd_dys(config.num_ys) + a; }
};

// Plans the backward of scan `fwd_while` (a while of the forward module);
// xs_needs_grad[j] says whether stacked input j is differentiated. Adds the
// plan's computations to the emitter's module.
std::unique_ptr<ScanPlan> PlanScan(ModuleEmitter& emitter, const HloInstruction& fwd_while,
                                   const std::vector<bool>& xs_needs_grad);

// `sharding` (or unknown) joined to shard_as group `id`, unless the
// instruction already belongs to a group.
void JoinShardGroup(HloInstruction* instr, int64_t id);

}  // namespace weft::autodiff
