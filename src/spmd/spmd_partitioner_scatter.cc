// Scatter-add into an array split along a dim it scatters one-wide windows
// into (an embedding table's gradient [V, D], split along V): every device
// keeps its tile of the result, shifts the ids into it and scatters only the
// updates that land there (the executor skips windows out of range, as XLA
// does; index positions that are padding are sent out of range). Updates and
// indices split along their batch dims make each device's tile a partial sum
// over the batch split: the devices holding the same tile with different
// batch tiles sum with an all-reduce, or a reduce-scatter when that gives the
// wanted sharding (the operand is added once, on the first of them). The
// plan is chosen among coarsenings of the batch split and of the result's
// split along dims the windows take whole (device_tiles.h), by estimated
// communication. A result not split along the vocabulary (FSDP splits only
// D) takes the same path: each device scatters its own batch rows and the
// partial tables are reduce-scattered (or the rows are moved to the devices
// owning their D columns, whichever moves fewer bytes), so no device gathers
// the global batch's updates.
//
// Any other scatter (a variadic one, one combining by other than add, or an
// add no plan above fits) keeps its indices whole on every device and splits
// its operands, all alike, along the one-wide indexed dims and the dims the
// windows cover whole, as the instruction is split there; the updates' window
// dims split as those. Every device applies, in the unsharded order, exactly
// the updates that land in its tile (the others fall out of range), so any
// combiner gives the unsharded result and nothing is combined across
// devices. Scatters with batching dims run on whole arrays.
#include <algorithm>

#include "device_tiles.h"
#include "spmd_partitioner_handlers.h"
#include "weft/base/algorithm.h"
#include "weft/base/error.h"

namespace weft::spmd {
namespace {

// Roles of a scatter's dims (one operand, no batching dims).
struct ScatterAddDims {
  int64_t ivd = 0;
  std::vector<int64_t> one_wide;          // indexed operand dims with a window of 1
  std::vector<int64_t> passthrough;       // operand dims the window covers whole (not indexed)
  std::vector<int64_t> upd_from_operand;  // updates dim -> operand dim (window dims), else -1
  std::vector<int64_t> upd_from_indices;  // updates dim -> indices dim (scatter dims), else -1
  std::vector<int64_t> idx_batch;         // indices dims other than the index vector dim
};

// The number of operands (and of updates) of a scatter.
int64_t ScatterArity(const HloInstruction& instr) { return (instr.operand_count() - 1) / 2; }

// The roles of any scatter's dims (N operands alike), or nullopt.
std::optional<ScatterAddDims> AnalyzeScatterDims(const HloInstruction& instr) {
  const ScatterDimensionNumbers& dn = instr.attrs().scatter;
  if (!dn.input_batching_dims.empty()) return std::nullopt;
  const int64_t n = ScatterArity(instr);
  const Shape& operand = instr.operand(0)->shape();
  const Shape& indices = instr.operand(n)->shape();
  const Shape& updates = instr.operand(n + 1)->shape();
  ScatterAddDims sd;
  sd.ivd = dn.index_vector_dim;
  sd.upd_from_operand.assign(updates.rank(), -1);
  sd.upd_from_indices.assign(updates.rank(), -1);
  for (int64_t d = 0; d < indices.rank(); ++d) {
    if (d != sd.ivd) sd.idx_batch.push_back(d);
  }
  size_t next_batch = 0;
  for (int64_t u = 0; u < updates.rank(); ++u) {
    if (Contains(dn.update_window_dims, u)) continue;
    if (next_batch >= sd.idx_batch.size()) return std::nullopt;
    sd.upd_from_indices[u] = sd.idx_batch[next_batch++];
  }
  if (next_batch != sd.idx_batch.size()) return std::nullopt;
  size_t next_window = 0;
  for (int64_t d = 0; d < operand.rank(); ++d) {
    const bool indexed = Contains(dn.scatter_dims_to_operand_dims, d);
    int64_t window = 1;
    if (!Contains(dn.inserted_window_dims, d)) {
      if (next_window >= dn.update_window_dims.size()) return std::nullopt;
      const int64_t u = dn.update_window_dims[next_window++];
      window = updates.dimensions(u);
      if (!indexed && window == operand.dimensions(d)) {
        sd.passthrough.push_back(d);
        sd.upd_from_operand[u] = d;
      }
    }
    if (indexed && window == 1) sd.one_wide.push_back(d);
  }
  return sd;
}

// The dims of a single scatter-add (the partial-sum plans).
std::optional<ScatterAddDims> AnalyzeScatter(const HloInstruction& instr) {
  if (instr.operand_count() != 3 || !instr.shape().IsArray() ||
      instr.shape().element_type() == PrimitiveType::kPred || !IsAddReducer(*instr.to_apply())) {
    return std::nullopt;
  }
  return AnalyzeScatterDims(instr);
}

// A constant zero, or a broadcast of one.
bool IsZeros(const HloInstruction* x) {
  if (x->opcode() == HloOpcode::kBroadcast) x = x->operand(0);
  if (x->opcode() != HloOpcode::kConstant) return false;
  const Literal& literal = x->attrs().literal;
  const int64_t count = literal.shape().ElementsCount();
  for (int64_t i = 0; i < count; ++i) {
    if (literal.Get(i) != 0) return false;
  }
  return true;
}

struct ScatterPlan {
  HloSharding operand, indices, updates;
  PartialSum sum;  // of the partial tiles over the batch split
  int64_t cost = 0;
};

std::optional<ScatterPlan> PlanScatter(ComputationPartitioner& p, const HloInstruction& instr,
                                       const ScatterAddDims& sd, const HloSharding& sharding) {
  const int64_t n = p.b().num_partitions();
  const Shape& operand = instr.operand(0)->shape();
  const Shape& indices = instr.operand(1)->shape();
  const Shape& updates = instr.operand(2)->shape();
  const HloSharding& o_sharding = p.Get(instr.operand(0)).sharding;
  const HloSharding& i_sharding = p.Get(instr.operand(1)).sharding;
  const HloSharding& u_sharding = p.Get(instr.operand(2)).sharding;
  // The result: split along the vocabulary as wanted, whole-window dims as
  // wanted or coarser, the rest whole.
  DeviceTiles s_base = DeviceTiles::Of(sharding, operand.rank(), n);
  std::vector<int64_t> s_free;
  for (int64_t d = 0; d < operand.rank(); ++d) {
    if (Contains(sd.one_wide, d)) continue;  // the vocabulary: as wanted (or whole)
    if (Contains(sd.passthrough, d)) {
      if (s_base.counts[d] > 1) s_free.push_back(d);
    } else {
      s_base.Unsplit(d);
    }
  }
  // The indices (and updates' scatter dims): split as the indices are, or as the updates are.
  std::vector<DeviceTiles> i_bases = {DeviceTiles::Of(i_sharding, indices.rank(), n)};
  DeviceTiles from_updates = DeviceTiles::Map(DeviceTiles::Of(u_sharding, updates.rank(), n),
                                              Inverse(sd.upd_from_indices, indices.rank()));
  if (!(from_updates == i_bases[0])) i_bases.push_back(std::move(from_updates));

  // The result's candidates, once (they do not depend on the indices').
  const DeviceTiles u_tiles = DeviceTiles::Of(u_sharding, updates.rank(), n);
  std::vector<std::pair<DeviceTiles, HloSharding>> results;
  for (DeviceTiles& st : Coarsenings(s_base, s_free, TileCounts({&i_bases[0], &u_tiles}))) {
    std::optional<HloSharding> s_target = st.ToSharding();
    if (s_target) results.emplace_back(std::move(st), std::move(*s_target));
  }
  const bool zeros = IsZeros(instr.operand(0));
  ReshardCostCache cost(p.context());
  std::optional<ScatterPlan> best;
  for (DeviceTiles i_base : i_bases) {
    if (sd.ivd < indices.rank()) i_base.Unsplit(sd.ivd);
    std::vector<int64_t> i_free;
    for (int64_t d : sd.idx_batch) {
      if (i_base.counts[d] > 1) i_free.push_back(d);
    }
    for (const DeviceTiles& it : Coarsenings(i_base, i_free, TileCounts({&s_base, &u_tiles}))) {
      const std::optional<HloSharding> i_target = it.ToSharding();
      if (!i_target) continue;
      for (const auto& [st, s_target_sharding] : results) {
        const std::optional<HloSharding> s_target = s_target_sharding;
        // Updates: scatter dims as the indices, whole-window dims as the result.
        const DeviceTiles ut = DeviceTiles::Join(it, sd.upd_from_indices, st, sd.upd_from_operand);
        const std::optional<HloSharding> u_target = ut.ToSharding();
        if (!u_target) continue;
        const std::optional<std::vector<std::vector<int64_t>>> groups = GroupsOverKey(st, it);
        if (!groups) continue;
        ScatterPlan plan{*s_target, *i_target, *u_target,
                         PlanPartialSum(cost, operand, *s_target, sharding, *groups), 0};
        // Zeros are made in place; any other operand is resharded.
        plan.cost = (zeros ? 0 : cost(operand, o_sharding, plan.operand)) +
                    cost(indices, i_sharding, plan.indices) +
                    cost(updates, u_sharding, plan.updates) + plan.sum.cost;
        if (!best || plan.cost < best->cost) best = std::move(plan);
      }
    }
  }
  return best;
}

// The whole-indices plan (see the file comment).
PartitionedValue HandleScatterInTiles(ComputationPartitioner& p, const HloInstruction& instr,
                                      const HloSharding& sharding) {
  const std::optional<ScatterAddDims> sd = AnalyzeScatterDims(instr);
  if (!sd) return HandleReplicated(p, instr);
  SpmdBuilder& b = p.b();
  const int64_t n = ScatterArity(instr);
  const Shape& operand = instr.operand(0)->shape();
  const Shape& indices = instr.operand(n)->shape();
  DeviceTiles st = DeviceTiles::Of(sharding.IsTuple() ? sharding.tuple_elements().at(0) : sharding,
                                   operand.rank(), b.num_partitions());
  for (int64_t d = 0; d < operand.rank(); ++d) {
    if (!Contains(sd->one_wide, d) && !Contains(sd->passthrough, d)) st.Unsplit(d);
  }
  const DeviceTiles whole =
      DeviceTiles::Of(HloSharding::Replicate(), indices.rank(), b.num_partitions());
  const std::optional<HloSharding> s_target = st.ToSharding();
  const std::optional<HloSharding> u_target =
      DeviceTiles::Join(whole, sd->upd_from_indices, st, sd->upd_from_operand).ToSharding();
  if (!s_target || !u_target || s_target->IsReplicated()) return HandleReplicated(p, instr);
  std::vector<PartitionedValue> operands;
  for (int64_t i = 0; i < n; ++i) operands.push_back(p.GetAs(instr.operand(i), *s_target));
  const PartitionedValue index_values = p.GetAs(instr.operand(n), HloSharding::Replicate());
  std::vector<HloInstruction*> args;
  for (const PartitionedValue& v : operands) args.push_back(v.hlo);
  args.push_back(ShiftIndicesIntoTile(b, index_values.hlo, sd->ivd,
                                      instr.attrs().scatter.scatter_dims_to_operand_dims,
                                      operands[0], /*clamp=*/false, nullptr));
  for (int64_t i = 0; i < n; ++i) args.push_back(p.GetAs(instr.operand(n + 1 + i), *u_target).hlo);
  const Shape local =
      LocalShapeOf(instr.shape(), instr.shape().IsTuple()
                                      ? HloSharding::Tuple(std::vector<HloSharding>(n, *s_target))
                                      : *s_target);
  HloInstruction* result = EmitLike(p, instr, std::move(args), local);
  return PartitionedValue{result, instr.shape(),
                          instr.shape().IsTuple()
                              ? HloSharding::Tuple(std::vector<HloSharding>(n, *s_target))
                              : *s_target};
}

}  // namespace

PartitionedValue HandleScatter(ComputationPartitioner& p, const HloInstruction& instr,
                               const HloSharding& sharding) {
  const std::optional<ScatterAddDims> sd = AnalyzeScatter(instr);
  const std::optional<ScatterPlan> plan = sd ? PlanScatter(p, instr, *sd, sharding) : std::nullopt;
  if (!plan) return HandleScatterInTiles(p, instr, sharding);

  SpmdBuilder& b = p.b();
  const Shape local = LocalShape(instr.shape(), plan->operand);
  HloInstruction* zero = b.ConstantScalar(local.element_type(), 0);
  const bool zeros = IsZeros(instr.operand(0));
  const PartitionedValue operand =
      zeros ? PartitionedValue{b.BroadcastScalar(zero, local.dimensions()), instr.shape(),
                               plan->operand}
            : p.GetAs(instr.operand(0), plan->operand);
  const PartitionedValue indices = p.GetAs(instr.operand(1), plan->indices);
  const PartitionedValue updates = p.GetAs(instr.operand(2), plan->updates);
  HloInstruction* local_indices = ShiftIndicesIntoTile(
      b, indices.hlo, sd->ivd, instr.attrs().scatter.scatter_dims_to_operand_dims, operand,
      /*clamp=*/false, nullptr);
  // Padding positions of the indices scatter nowhere: a start past every
  // local dim puts the window out of range.
  const int64_t past = *std::max_element(local.dimensions().begin(), local.dimensions().end());
  local_indices = MaskPadding(
      b, PartitionedValue{local_indices, indices.base, plan->indices}, sd->idx_batch,
      b.ConstantScalar(local_indices->shape().element_type(), static_cast<double>(past)));
  HloInstruction* into = operand.hlo;
  if (!zeros && (!plan->sum.scatters.empty() || !plan->sum.groups.empty())) {
    // The operand's values count once: on one device of each summing group
    // (the first of its group in every reduce-scatter and in the all-reduce).
    std::vector<int64_t> first(b.num_partitions(), 1);
    for (const PartialSum::Scatter& scatter : plan->sum.scatters) {
      for (const std::vector<int64_t>& g : scatter.groups) {
        for (size_t i = 1; i < g.size(); ++i) first[g[i]] = 0;
      }
    }
    for (const std::vector<int64_t>& g : plan->sum.groups) {
      for (size_t i = 1; i < g.size(); ++i) first[g[i]] = 0;
    }
    HloInstruction* is_first =
        b.Compare(b.DeviceValue(first), b.S32Constant(1), ComparisonDirection::kEq);
    into = b.Select(b.BroadcastScalar(is_first, local.dimensions()), into,
                    b.BroadcastScalar(zero, local.dimensions()));
  }
  HloInstruction* result = EmitLike(p, instr, {into, local_indices, updates.hlo}, local);
  return PartitionedValue{EmitPartialSum(b, result, plan->sum), instr.shape(), plan->sum.result};
}

}  // namespace weft::spmd
