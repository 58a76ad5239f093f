// Handlers for ops whose operands and result correspond dim by dim but
// compute along some dims as a whole: sort (its dimension), topk (the last
// dim), reduce-window and select-and-scatter (the dims the window moves
// along), bitcast-convert between widths (the narrower side's last dim),
// and cholesky and triangular-solve (the matrices: the last two dims).
// Those dims are made whole on every device (resharded to
// replicated along them); the other dims keep the instruction's split, and
// each device runs the op on its piece. Padding of uneven split dims stays
// in padding: these ops never move elements across the split dims.
#include "spmd_partitioner_handlers.h"
#include "weft/base/error.h"
#include "weft/sharding/sharding_util.h"

namespace weft::spmd {
namespace {

const HloSharding& FirstLeaf(const HloSharding& s) {
  return s.IsTuple() ? s.tuple_elements().at(0) : s;
}

// The instruction's result leaves' local shapes under `leaf_sharding`.
Shape LocalResultShape(const Shape& result, const HloSharding& leaf_sharding) {
  if (!result.IsTuple()) return LocalShape(result, leaf_sharding);
  std::vector<Shape> leaves;
  for (const Shape& leaf : result.tuple_shapes()) leaves.push_back(LocalShape(leaf, leaf_sharding));
  return Shape::Tuple(std::move(leaves));
}

std::vector<int64_t> WindowedDims(const HloInstruction& instr) {
  std::vector<int64_t> dims;
  const std::vector<WindowDim>& window = instr.attrs().window;
  for (size_t d = 0; d < window.size(); ++d) {
    if (!(window[d] == WindowDim{})) dims.push_back(static_cast<int64_t>(d));
  }
  return dims;
}

PartitionedValue HandleBitcastConvert(ComputationPartitioner& p, const HloInstruction& instr,
                                      const HloSharding& sharding) {
  const int64_t in_rank = instr.operand(0)->shape().rank();
  const int64_t out_rank = instr.shape().rank();
  if (in_rank == out_rank) return HandleElementwise(p, instr, sharding);
  std::vector<int64_t> shared(std::min(in_rank, out_rank));
  for (size_t d = 0; d < shared.size(); ++d) shared[d] = static_cast<int64_t>(d);
  HloSharding result = sharding;
  HloSharding operand;
  if (out_rank > in_rank) {  // f32 -> u16[..., 2]: the new last dim stays whole
    result = Unsplit(sharding, {out_rank - 1});
    operand = NormalizeSharding(MapShardingDims(result, shared, in_rank));
  } else {  // u16[..., 2] -> f32: the operand's last dim stays whole
    shared.push_back(-1);
    operand = NormalizeSharding(MapShardingDims(sharding, shared, in_rank));
  }
  HloInstruction* x = p.GetAs(instr.operand(0), operand).hlo;
  return PartitionedValue{EmitLike(p, instr, {x}, LocalShape(instr.shape(), result)), instr.shape(),
                          result};
}

}  // namespace

HloSharding Unsplit(const HloSharding& sharding, const std::vector<int64_t>& dims) {
  return NormalizeSharding(sharding_util::PartiallyReplicateTiledShardingOnDims(sharding, dims));
}

PartitionedValue HandleWithDimsWhole(ComputationPartitioner& p, const HloInstruction& instr,
                                     const HloSharding& sharding,
                                     const std::vector<int64_t>& whole) {
  const int64_t rank = instr.operand(0)->shape().rank();
  const HloSharding target = Unsplit(FirstLeaf(sharding), whole);
  std::vector<HloInstruction*> operands;
  for (const HloInstruction* op : instr.operands()) {
    const bool array = op->shape().IsArray() && op->shape().rank() == rank && rank > 0;
    operands.push_back(p.GetAs(op, array ? target : HloSharding::Replicate()).hlo);
  }
  HloSharding result = target;
  if (instr.shape().IsTuple()) {
    result =
        HloSharding::Tuple(std::vector<HloSharding>(instr.shape().tuple_shapes().size(), target));
  }
  return PartitionedValue{
      EmitLike(p, instr, std::move(operands), LocalResultShape(instr.shape(), target)),
      instr.shape(), result};
}

PartitionedValue HandleDimwise(ComputationPartitioner& p, const HloInstruction& instr,
                               const HloSharding& sharding) {
  switch (instr.opcode()) {
    case HloOpcode::kSort:
      return HandleWithDimsWhole(p, instr, sharding, {instr.dimensions().at(0)});
    case HloOpcode::kTopK:
    case HloOpcode::kCustomCall:  // TopK
      return HandleWithDimsWhole(p, instr, sharding, {instr.operand(0)->shape().rank() - 1});
    case HloOpcode::kReduceWindow:
    case HloOpcode::kSelectAndScatter:
      return HandleWithDimsWhole(p, instr, sharding, WindowedDims(instr));
    case HloOpcode::kBitcastConvert:
      return HandleBitcastConvert(p, instr, sharding);
    case HloOpcode::kCholesky:
    case HloOpcode::kTriangularSolve: {  // each matrix whole, the batch split
      const int64_t rank = instr.shape().rank();
      return HandleWithDimsWhole(p, instr, sharding, {rank - 2, rank - 1});
    }
    default:
      FailInternal("HandleDimwise: {} is not a dimwise op", HloOpcodeString(instr.opcode()));
  }
}

}  // namespace weft::spmd
