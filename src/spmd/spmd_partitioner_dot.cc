// Dot: chooses, by estimated communication plus local work, among
//   - output-driven: reshard both operands so the local dot yields the result
//     sharding directly (batch dims split alike, each operand split on its
//     non-contracting dims as the result is, contracting dims whole);
//   - operand-driven (lhs or rhs): keep one operand as it is split, reshard
//     the other to match on batch and contracting dims; the local dot gives
//     partial sums over the split contracting dims, reduced with all-reduce,
//     or reduce-scatter when the result is split on a dim they can scatter to
//     (over part of the group, then an all-reduce over the rest, when the
//     result is split fewer ways than the contraction: PlanPartialSum).
// Local work counts: a plan that leaves devices computing the same products
// (a row-parallel projection whose result is wanted replicated over the
// tensor axis, done by gathering its operands instead of summing partial
// products) pays for its extra FLOPs at kFlopsPerByte, so splitting the work
// wins unless the dot is too small for its FLOPs to matter. A reshard that
// several dots share (one activation gathered for the q, k and v projections)
// is priced as a share of it (SharedReshardCost).
// XLA's block-scaled dot (hlo/block_scaled_dot.h) is partitioned as the dot
// it computes, each scale split as its operand is (XLA's HandleDotHelper
// with PartitionedHloMX operands); a plan that splits the contraction needs
// the split to fall on block boundaries.
#include <algorithm>
#include <map>
#include <optional>
#include <set>

#include "spmd_partitioner_handlers.h"
#include "weft/base/algorithm.h"
#include "weft/base/error.h"
#include "weft/hlo/block_scaled_dot.h"
#include "weft/hlo/ragged_dot.h"
#include "weft/sharding/sharding_util.h"

namespace weft::spmd {
namespace {

// kFlopsPerByte (spmd_partitioner_handlers.h), 64 local FLOPs a byte moved, is
// about a CPU core's balance of FMA rate to memory bandwidth, and far below
// an accelerator's (hundreds to thousands of FLOPs per byte of interconnect),
// so repeated work is avoided whenever a dot's contraction is longer than a
// few hundred elements.

// The cost of a local dot: 2 x result elements x contracted elements.
int64_t WorkCost(int64_t result_elements, int64_t contracted) {
  return 2 * result_elements * contracted / kFlopsPerByte;
}

// Dim bookkeeping of one dot (XLA's result order: batch, lhs free, rhs free).
struct DotDims {
  int64_t out_rank = 0;
  // Per operand (0 = lhs, 1 = rhs): operand dim -> result dim (-1: contracting),
  // operand dim -> other operand's dim (-1: free), and the groups.
  std::vector<int64_t> to_out[2], to_other[2], contracting[2], free[2];

  explicit DotDims(const HloInstruction& dot) {
    const DotDimensionNumbers dn = IsBlockScaledDot(dot)
                                       ? BlockScaledDotNumbers(dot.operand(0)->shape().rank())
                                       : dot.attrs().dot;
    const std::vector<int64_t>* batch[2] = {&dn.lhs_batch_dims, &dn.rhs_batch_dims};
    const std::vector<int64_t>* contract[2] = {&dn.lhs_contracting_dims, &dn.rhs_contracting_dims};
    int64_t next_out = static_cast<int64_t>(dn.lhs_batch_dims.size());
    for (int s = 0; s < 2; ++s) {
      const int64_t rank = dot.operand(s)->shape().rank();
      to_out[s].assign(rank, -1);
      to_other[s].assign(rank, -1);
      contracting[s] = *contract[s];
      for (size_t i = 0; i < batch[s]->size(); ++i) {
        to_out[s][(*batch[s])[i]] = static_cast<int64_t>(i);
        to_other[s][(*batch[s])[i]] = (*batch[1 - s])[i];
      }
      for (size_t i = 0; i < contract[s]->size(); ++i) {
        to_other[s][(*contract[s])[i]] = (*contract[1 - s])[i];
      }
      for (int64_t d = 0; d < rank; ++d) {
        const bool is_batch = std::find(batch[s]->begin(), batch[s]->end(), d) != batch[s]->end();
        const bool is_contract =
            std::find(contract[s]->begin(), contract[s]->end(), d) != contract[s]->end();
        if (!is_batch && !is_contract) {
          free[s].push_back(d);
          to_out[s][d] = next_out++;
        }
      }
    }
    out_rank = next_out;
  }

  // Result dims coming from operand s's free dims.
  std::vector<int64_t> OutFree(int s) const {
    std::vector<int64_t> dims;
    for (int64_t d : free[s]) dims.push_back(to_out[s][d]);
    return dims;
  }
  // For each result dim: the dim of operand s it comes from (-1: the other's free dims).
  std::vector<int64_t> OutToOperand(int s) const {
    std::vector<int64_t> map(out_rank, -1);
    for (size_t d = 0; d < to_out[s].size(); ++d) {
      if (to_out[s][d] >= 0) map[to_out[s][d]] = static_cast<int64_t>(d);
    }
    return map;
  }
};

// The result shape of `instr` on local operands of these shapes.
Shape LocalDotShape(const HloInstruction& instr, const Shape& lhs, const Shape& rhs) {
  const DotDims dd(instr);
  std::vector<int64_t> dims(static_cast<size_t>(dd.out_rank));
  const Shape* shapes[2] = {&lhs, &rhs};
  for (int s = 0; s < 2; ++s) {
    for (size_t d = 0; d < dd.to_out[s].size(); ++d) {
      if (dd.to_out[s][d] >= 0)
        dims[dd.to_out[s][d]] = shapes[s]->dimensions(static_cast<int64_t>(d));
    }
  }
  return instr.shape().WithDimensions(dims);
}

// The local dot of operands sharded `lhs` and `rhs` (and the block-scaled
// dot's scales, each split as its operand).
HloInstruction* LocalDot(ComputationPartitioner& p, const HloInstruction& instr,
                         const HloSharding& lhs_sharding, const HloSharding& rhs_sharding) {
  const HloSharding* shardings[2] = {&lhs_sharding, &rhs_sharding};
  std::vector<HloInstruction*> operands;
  for (int64_t i = 0; i < instr.operand_count(); ++i) {
    operands.push_back(p.GetAs(instr.operand(i), *shardings[i % 2]).hlo);
  }
  const Shape shape = LocalDotShape(instr, operands[0]->shape(), operands[1]->shape());
  return EmitLike(p, instr, std::move(operands), shape);
}

// What resharding operand s's block scale (if any) to `target` costs.
int64_t ScaleReshardCost(ComputationPartitioner& p, const HloInstruction& instr, int s,
                         const HloSharding& target) {
  if (!IsBlockScaledDot(instr) || !HasBlockScale(instr, s)) return 0;
  const HloInstruction* scale = instr.operand(2 + s);
  return ReshardCost(p.context(), scale->shape(), p.Get(scale).sharding, target);
}

// Whether splitting operand s's contracting dims as `sharding` does keeps
// whole blocks of a block-scaled dot on each device (always, for a dot).
bool SplitsWholeBlocks(const HloInstruction& instr, const DotDims& dd, int s,
                       const HloSharding& sharding) {
  if (!IsBlockScaledDot(instr) || !HasBlockScale(instr, s)) return true;
  const Shape& x = instr.operand(s)->shape();
  const std::vector<int64_t> tiles = TilesPerDim(sharding, x.rank());
  const int64_t block = BlockScaledDotBlockSize(instr, s);
  for (int64_t d : dd.contracting[s]) {
    const int64_t ks = instr.operand(2 + s)->shape().dimensions(d);
    if (tiles[d] > 1 && (ks % tiles[d] != 0 || ks * block != x.dimensions(d))) return false;
  }
  return true;
}

struct DrivenPlan {
  int driver = 0;
  HloSharding other_target;
  HloSharding partial;                     // result sharding before the reduction
  std::vector<int64_t> split_contracting;  // driver dims
  PartialSum sum;                          // of the partial products (split contracting dims)
  int64_t cost = 0;
};

DrivenPlan PlanDriven(ComputationPartitioner& p, const HloInstruction& instr, const DotDims& dd,
                      int driver, const HloSharding& sharding) {
  const int other = 1 - driver;
  const HloInstruction* driver_op = instr.operand(driver);
  const HloInstruction* other_op = instr.operand(other);
  const HloSharding& ds = p.Get(driver_op).sharding;
  DrivenPlan plan;
  plan.driver = driver;
  // The other operand: batch/contracting dims as the driver's, free dims whole.
  const std::vector<int64_t> other_to_driver = dd.to_other[other];
  plan.other_target = NormalizeSharding(
      MapShardingDims(Unsplit(ds, dd.free[driver]), other_to_driver, other_op->shape().rank()));
  const std::vector<int64_t> tiles = TilesPerDim(ds, driver_op->shape().rank());
  for (int64_t d : dd.contracting[driver]) {
    if (tiles[d] > 1) plan.split_contracting.push_back(d);
  }
  plan.partial = NormalizeSharding(
      MapShardingDims(Unsplit(ds, plan.split_contracting), dd.OutToOperand(driver), dd.out_rank));
  const Shape partial_shape = LocalShape(instr.shape(), plan.partial);
  plan.cost =  // nothing for a reshard already made (its duplicate merged, SharedReshardCost)
      (p.HasReshard(other_op, plan.other_target)
           ? 0
           : ReshardCost(p.context(), other_op->shape(), p.Get(other_op).sharding,
                         plan.other_target)) +
      ScaleReshardCost(p, instr, driver, ds) +
      ScaleReshardCost(p, instr, other, plan.other_target) +
      WorkCost(partial_shape.ElementsCount(),
               Product(LocalShape(driver_op->shape(), ds).dimensions(), dd.contracting[driver]));
  ReshardCostCache cost(p.context());
  if (plan.split_contracting.empty()) {
    plan.cost += cost(instr.shape(), plan.partial, sharding);
    return plan;
  }
  // Partial products summed over the devices splitting the contraction:
  // an all-reduce, or a reduce-scatter (over part of each group, then an
  // all-reduce over the rest: FSDP's gradient beside a data axis, HSDP)
  // when that leaves the wanted split.
  const std::vector<std::vector<int64_t>> groups =
      GroupsAlongTileDims(ds.tile_assignment(), plan.split_contracting);
  if (KeepsAddends(p, plan.partial, groups)) {  // the result's addends: left unsummed
    plan.sum.result = *p.unreduced_target();
    return plan;
  }
  plan.sum = PlanPartialSum(cost, instr.shape(), plan.partial, sharding, groups);
  plan.cost += plan.sum.cost;
  return plan;
}

PartitionedValue EmitDriven(ComputationPartitioner& p, const HloInstruction& instr,
                            const DrivenPlan& plan, const HloSharding& sharding) {
  SpmdBuilder& b = p.b();
  const int driver = plan.driver, other = 1 - driver;
  HloInstruction* result = nullptr;
  if (IsBlockScaledDot(instr)) {  // whole blocks (SplitsWholeBlocks): no padding to mask
    HloSharding shardings[2];
    shardings[driver] = p.Get(instr.operand(driver)).sharding;
    shardings[other] = plan.other_target;
    result = LocalDot(p, instr, shardings[0], shardings[1]);
  } else {
    PartitionedValue ops[2];
    ops[driver] = p.Get(instr.operand(driver));
    ops[other] = p.GetAs(instr.operand(other), plan.other_target);
    HloInstruction* locals[2] = {ops[0].hlo, ops[1].hlo};
    if (!plan.split_contracting.empty()) {
      // Padding along split contracting dims must add nothing: zero it on both.
      const DotDims dd(instr);
      for (int s = 0; s < 2; ++s) {
        std::vector<int64_t> dims;
        for (int64_t d : plan.split_contracting) {
          dims.push_back(s == driver ? d : dd.to_other[driver][d]);
        }
        HloInstruction* zero = b.ConstantScalar(instr.operand(s)->shape().element_type(), 0);
        locals[s] = MaskPadding(b, ops[s], dims, zero);
      }
    }
    result = EmitLike(p, instr, {locals[0], locals[1]},
                      LocalDotShape(instr, locals[0]->shape(), locals[1]->shape()));
  }
  if (plan.split_contracting.empty()) return PartitionedValue{result, instr.shape(), plan.partial};
  return PartitionedValue{EmitPartialSum(b, result, plan.sum), instr.shape(), plan.sum.result};
}

}  // namespace

// Whether reduce-scattering `partial` along result dim e over `groups` yields
// `target`: each group member gets chunk (its position) of dim e.
bool ScatterGives(const HloSharding& partial, const HloSharding& target, int64_t e,
                  const std::vector<std::vector<int64_t>>& groups, int64_t rank) {
  if (!target.IsTiled()) return false;
  const int64_t g = static_cast<int64_t>(groups[0].size());
  std::vector<int64_t> expect = TilesPerDim(partial, rank);
  if (expect[e] != 1) return false;
  expect[e] = g;
  if (target.TilesPerDim() != expect) return false;
  for (const std::vector<int64_t>& group : groups) {
    for (int64_t k = 0; k < g; ++k) {
      std::vector<int64_t> index =
          partial.IsTiled() ? partial.TileIndexForDevice(group[k]) : std::vector<int64_t>(rank, 0);
      index[e] = k;
      if (target.TileIndexForDevice(group[k]) != index) return false;
    }
  }
  return true;
}

// Operand s of `dot` (sharded `sharding`) as the output-driven plan wants it:
// split as the result is on its batch and free dims, contracting dims whole.
HloSharding OutputDrivenTarget(const HloInstruction& dot, const DotDims& dd, int s,
                               const HloSharding& sharding) {
  return NormalizeSharding(MapShardingDims(Unsplit(sharding, dd.OutFree(1 - s)), dd.to_out[s],
                                           dot.operand(s)->shape().rank()));
}

// What the output-driven plan of `dot` pays to reshard operand s to `target`.
// Dots that read the same operand and want it alike (the q, k and v
// projections of one sequence-split activation, each wanting the whole
// sequence) make the same collectives, which the compiler's collective CSE
// merges into one when they are near (compiler/collective_cse.h): each pays
// its share, and nothing once one of them has made it (siblings in a
// layer's source are near; a far duplicate is kept, and then was priced
// too low).
int64_t SharedReshardCost(ComputationPartitioner& p, const HloInstruction& dot, int s,
                          const HloSharding& target) {
  const HloInstruction* op = dot.operand(s);
  if (p.HasReshard(op, target)) return 0;
  int64_t sharing = 0;
  std::vector<const HloInstruction*> seen;  // a dot reading op twice counts once
  for (const HloInstruction* user : op->users()) {
    if (user->opcode() != HloOpcode::kDot || Contains(seen, user)) continue;
    seen.push_back(user);
    const DotDims ud(*user);
    for (int k = 0; k < 2; ++k) {
      if (user->operand(k) == op &&
          OutputDrivenTarget(*user, ud, k, ShardingOf(*user).WithoutUnreduced()) == target) {
        ++sharing;
        break;
      }
    }
  }
  const int64_t cost = ReshardCost(p.context(), op->shape(), p.Get(op).sharding, target);
  return sharing > 1 ? cost / sharing : cost;
}

// ragged-dot (hlo/ragged_dot.h): output-driven, each operand split as the
// result is on the dims it shares with it, the contraction whole. A
// device's rows must see their groups whole, so the ragged dim is never
// split (non-contracting mode: the result is computed whole on it and
// resharded after) nor the groups of the result (contracting mode); the
// group sizes are split on their prefix dims as the lhs is. (XLA's
// HandleRaggedDot leaves the operands' shardings to Shardy; weft reshards
// them itself, so any annotation partitions.)
PartitionedValue HandleRaggedDot(ComputationPartitioner& p, const HloInstruction& instr,
                                 const HloSharding& sharding) {
  const HloAttributes& a = instr.attrs();
  const DotDimensionNumbers& dn = a.dot;
  const RaggedDotMode mode = RaggedDotModeOf(instr);
  const Shape& lhs = instr.operand(0)->shape();
  const Shape& rhs = instr.operand(1)->shape();
  const Shape& sizes = instr.operand(2)->shape();
  const int64_t lead = mode == RaggedDotMode::kContracting ? 1 : 0;
  // Operand dim -> result dim (-1: contracted, or the rhs group dim).
  std::vector<int64_t> lhs_to_out(lhs.rank(), -1), rhs_to_out(rhs.rank(), -1);
  int64_t next = lead;
  for (size_t i = 0; i < dn.lhs_batch_dims.size(); ++i, ++next) {
    lhs_to_out[dn.lhs_batch_dims[i]] = next;
    rhs_to_out[dn.rhs_batch_dims[i]] = next;
  }
  std::vector<int64_t> lhs_free_out, rhs_free_out;
  for (int64_t d = 0; d < lhs.rank(); ++d) {
    if (Contains(dn.lhs_batch_dims, d) || Contains(dn.lhs_contracting_dims, d)) continue;
    lhs_free_out.push_back(next);
    lhs_to_out[d] = next++;
  }
  for (int64_t d = 0; d < rhs.rank(); ++d) {
    if (Contains(dn.rhs_batch_dims, d) || Contains(dn.rhs_contracting_dims, d) ||
        Contains(a.rhs_group_dims, d)) {
      continue;
    }
    rhs_free_out.push_back(next);
    rhs_to_out[d] = next++;
  }
  std::vector<int64_t> whole;
  if (mode == RaggedDotMode::kNonContracting) whole.push_back(lhs_to_out[a.lhs_ragged_dims[0]]);
  if (mode == RaggedDotMode::kContracting) whole.push_back(0);
  const HloSharding compute = NormalizeSharding(Unsplit(sharding, whole));
  const HloSharding lhs_target =
      NormalizeSharding(MapShardingDims(Unsplit(compute, rhs_free_out), lhs_to_out, lhs.rank()));
  const HloSharding rhs_target =
      NormalizeSharding(MapShardingDims(Unsplit(compute, lhs_free_out), rhs_to_out, rhs.rank()));
  std::vector<int64_t> sizes_to_out(sizes.rank(), -1);
  if (sizes.rank() > 1) {
    const std::vector<int64_t> prefix = RaggedDotPrefix(instr);
    for (size_t i = 0; i < prefix.size(); ++i) sizes_to_out[i] = lhs_to_out[prefix[i]];
  }
  std::vector<int64_t> not_in_sizes;  // result dims group_sizes has no dim for
  for (int64_t d = 0; d < instr.shape().rank(); ++d) {
    if (!Contains(sizes_to_out, d)) not_in_sizes.push_back(d);
  }
  const HloSharding sizes_target = NormalizeSharding(
      MapShardingDims(Unsplit(compute, not_in_sizes), sizes_to_out, sizes.rank()));
  std::vector<HloInstruction*> operands = {p.GetAs(instr.operand(0), lhs_target).hlo,
                                           p.GetAs(instr.operand(1), rhs_target).hlo,
                                           p.GetAs(instr.operand(2), sizes_target).hlo};
  HloInstruction* local =
      EmitLike(p, instr, std::move(operands), LocalShape(instr.shape(), compute));
  return PartitionedValue{local, instr.shape(), compute};
}

namespace {

// A dot whose result has unreduced axes (ComputationPartitioner::
// unreduced_target), when the local dot of both operands as they lie is
// each device's addend of it: the operands split their contracting dims
// alike, the result's tiles are the operands' batch and free tiles, and
// each unreduced group holds every contracting piece once (XLA's dot of
// lhs [M/x, K/y] and rhs [K/y, N/z] into [M/x, N/z] unreduced over y).
std::optional<PartitionedValue> TryAddendsInPlace(ComputationPartitioner& p,
                                                  const HloInstruction& instr, const DotDims& dd) {
  const HloSharding* target = p.unreduced_target();
  if (target == nullptr || IsBlockScaledDot(instr)) return std::nullopt;
  const PartitionedValue ops[2] = {p.Get(instr.operand(0)), p.Get(instr.operand(1))};
  const int64_t n = p.b().num_partitions();
  const HloSharding summed = NormalizeSharding(target->WithoutUnreduced());
  const std::vector<int64_t> out_tiles = TilesPerDim(summed, dd.out_rank);
  std::vector<int64_t> tiles[2];
  for (int s = 0; s < 2; ++s) tiles[s] = TilesPerDim(ops[s].sharding, ops[s].base.rank());
  // Which contracting piece each device holds.
  std::map<int64_t, std::vector<int64_t>> piece;
  int64_t pieces = 1;
  for (int64_t d : dd.contracting[0]) {
    if (tiles[0][d] != tiles[1][dd.to_other[0][d]]) return std::nullopt;
    pieces *= tiles[0][d];
  }
  for (int64_t device = 0; device < n; ++device) {
    std::vector<int64_t> index[2];
    for (int s = 0; s < 2; ++s) {
      index[s] = ops[s].sharding.IsTiled() ? ops[s].sharding.TileIndexForDevice(device)
                                           : std::vector<int64_t>(ops[s].base.rank(), 0);
    }
    const std::vector<int64_t> out =
        summed.IsTiled() ? summed.TileIndexForDevice(device) : std::vector<int64_t>(dd.out_rank, 0);
    for (int s = 0; s < 2; ++s) {
      for (int64_t d = 0; d < ops[s].base.rank(); ++d) {
        const int64_t o = dd.to_out[s][d];
        if (o < 0) continue;
        if (tiles[s][d] != out_tiles[o] || index[s][d] != out[o]) return std::nullopt;
      }
    }
    for (int64_t d : dd.contracting[0]) {
      if (index[0][d] != index[1][dd.to_other[0][d]]) return std::nullopt;
      piece[device].push_back(index[0][d]);
    }
  }
  for (const std::vector<int64_t>& group : UnreducedGroups(*target, n)) {
    if (static_cast<int64_t>(group.size()) != pieces) return std::nullopt;
    std::set<std::vector<int64_t>> seen;
    for (int64_t device : group) seen.insert(piece[device]);
    if (static_cast<int64_t>(seen.size()) != pieces) return std::nullopt;
  }
  // Padding along split contracting dims must add nothing.
  HloInstruction* locals[2];
  for (int s = 0; s < 2; ++s) {
    HloInstruction* zero = p.b().ConstantScalar(ops[s].base.element_type(), 0);
    locals[s] = MaskPadding(p.b(), ops[s], dd.contracting[s], zero);
  }
  HloInstruction* dot = EmitLike(p, instr, {locals[0], locals[1]},
                                 LocalDotShape(instr, locals[0]->shape(), locals[1]->shape()));
  return PartitionedValue{dot, instr.shape(), *target};
}

}  // namespace

PartitionedValue HandleDot(ComputationPartitioner& p, const HloInstruction& instr,
                           const HloSharding& sharding) {
  const DotDims dd(instr);
  if (auto addends = TryAddendsInPlace(p, instr, dd)) return *addends;
  // Output-driven targets.
  HloSharding targets[2];
  int64_t output_cost = 0;
  for (int s = 0; s < 2; ++s) {
    targets[s] = OutputDrivenTarget(instr, dd, s, sharding);
    output_cost +=
        SharedReshardCost(p, instr, s, targets[s]) + ScaleReshardCost(p, instr, s, targets[s]);
  }
  output_cost += WorkCost(LocalShape(instr.shape(), sharding).ElementsCount(),
                          Product(instr.operand(0)->shape().dimensions(), dd.contracting[0]));
  std::optional<DrivenPlan> best;
  for (int driver = 0; driver < 2; ++driver) {
    if (!SplitsWholeBlocks(instr, dd, driver, p.Get(instr.operand(driver)).sharding)) continue;
    DrivenPlan plan = PlanDriven(p, instr, dd, driver, sharding);
    if (!SplitsWholeBlocks(instr, dd, 1 - driver, plan.other_target)) continue;
    if (!best || plan.cost < best->cost) best = plan;
  }
  if (best && best->cost < output_cost) return EmitDriven(p, instr, *best, sharding);
  return PartitionedValue{LocalDot(p, instr, targets[0], targets[1]), instr.shape(), sharding};
}

}  // namespace weft::spmd
