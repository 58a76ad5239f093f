// Manual regions (jax.shard_map, torch_xla's manual sharding): a Sharding
// custom call reshards its operand to its sharding and disappears;
// SPMDFullToShardShape hands a tiled value's per-device piece to the region
// as a {manual} value; instructions of sharding {manual} are copied as
// written (their shapes are already per device; collectives inside keep
// their groups); SPMDShardToFullShape takes the pieces back as the full
// value of its tiled sharding. Nothing else enters or leaves a region.
#include "spmd_partitioner_handlers.h"
#include "weft/base/error.h"
#include "weft/hlo/custom_call_targets.h"

namespace weft::spmd {
namespace {

bool IsTarget(const HloInstruction& instr, const char* target) {
  return instr.opcode() == HloOpcode::kCustomCall && instr.attrs().custom_call_target == target;
}

// An operand of an instruction in a manual region: a manual value, or a
// replicated one (a constant the region reads: every device holds it whole).
HloInstruction* ManualOperand(ComputationPartitioner& p, const HloInstruction& instr, int64_t k) {
  const PartitionedValue& v = p.Get(instr.operand(k));
  const bool whole = !v.base.IsTuple() && v.sharding.IsReplicated();
  WEFT_CHECK(v.sharding.IsManual() || whole,
             "operand {} of {} has sharding {} inside a manual region; values enter a region "
             "through SPMDFullToShardShape",
             k, instr.Describe(), v.sharding.ToString());
  return v.hlo;
}

}  // namespace

bool IsManualRegionOp(const HloInstruction& instr, const HloSharding& sharding) {
  return sharding.IsManual() || IsTarget(instr, kShardingTarget) ||
         IsTarget(instr, kFullToShardTarget) || IsTarget(instr, kShardToFullTarget);
}

PartitionedValue HandleManualRegionOp(ComputationPartitioner& p, const HloInstruction& instr,
                                      const HloSharding& sharding) {
  if (IsTarget(instr, kFullToShardTarget)) {
    // The operand's own sharding decides the pieces.
    const PartitionedValue& v = p.Get(instr.operand(0));
    WEFT_CHECK(!v.sharding.IsManual() && !v.base.IsTuple() && v.hlo->shape() == instr.shape(),
               "{} turns a {} value of sharding {} into per-device pieces {}, but the pieces "
               "are {}; give the operand the sharding the region splits it by",
               instr.Describe(), v.base.ToString(), v.sharding.ToString(), instr.shape().ToString(),
               v.hlo->shape().ToString());
    return PartitionedValue{v.hlo, instr.shape(), HloSharding::Manual()};
  }
  if (IsTarget(instr, kShardToFullTarget)) {
    HloInstruction* piece = ManualOperand(p, instr, 0);
    WEFT_CHECK(sharding.IsTiled() && LocalShape(instr.shape(), sharding) == piece->shape(),
               "{} makes the full {} of sharding {} from pieces {}, which that sharding does "
               "not cut it into",
               instr.Describe(), instr.shape().ToString(), sharding.ToString(),
               piece->shape().ToString());
    return PartitionedValue{piece, instr.shape(), sharding};
  }
  if (IsTarget(instr, kShardingTarget) && !sharding.IsManual()) {
    return p.GetAs(instr.operand(0), sharding);  // an annotation: the reshard is the op
  }
  if (IsTarget(instr, kShardingTarget)) return p.Get(instr.operand(0));
  std::vector<HloInstruction*> operands;
  for (int64_t k = 0; k < instr.operand_count(); ++k)
    operands.push_back(ManualOperand(p, instr, k));
  return PartitionedValue{EmitLike(p, instr, std::move(operands), instr.shape()), instr.shape(),
                          sharding};
}

}  // namespace weft::spmd
