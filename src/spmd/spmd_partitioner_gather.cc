// Gather. An operand split along a dim the gather indexes with a one-wide
// slice (an embedding table [V, D] split along the vocabulary V) is looked up
// Megatron-style: every device keeps its vocabulary tile, shifts the ids into
// it (after clamping them as the whole gather would), gathers, zeroes the rows
// whose id falls outside its tile, and the devices that split the vocabulary
// sum their rows with an all-reduce (or a reduce-scatter, then an all-reduce
// over the rest, where that yields the wanted split: PlanPartialSum, shared
// with the scatter handler). Dims the slice takes whole (D) stay
// split, so the result comes out split along them; the indices keep their
// batch split where that is compatible (device_tiles.h): the plan is chosen
// among coarsenings of the indices' and the table's splits by estimated
// communication. A table not split along the vocabulary (FSDP splits only D)
// takes the same path with no sum: each device looks up its own batch rows,
// so no device ever holds the global batch's rows. A gather with operand
// batching dims, or a pred result, runs on whole arrays (operands
// replicated, the result sliced to its sharding).
#include <algorithm>
#include <map>

#include "device_tiles.h"
#include "spmd_partitioner_handlers.h"
#include "weft/base/algorithm.h"
#include "weft/base/error.h"
#include "weft/sharding/sharding_util.h"

namespace weft::spmd {
namespace {

// Roles of a gather's dims (no operand batching dims).
struct LookupDims {
  int64_t ivd = 0;
  std::vector<int64_t> one_wide;          // indexed operand dims with a slice of 1
  std::vector<int64_t> passthrough;       // operand dims the slice takes whole
  std::vector<int64_t> out_from_operand;  // result dim -> operand dim (-1 none)
  std::vector<int64_t> out_from_indices;  // result dim -> indices dim (-1 none)
  std::vector<int64_t> idx_batch;         // indices dims other than the index vector dim
};

std::optional<LookupDims> AnalyzeGather(const HloInstruction& instr) {
  const GatherDimensionNumbers& dn = instr.attrs().gather;
  const std::vector<int64_t>& slice = instr.attrs().gather_slice_sizes;
  const Shape& operand = instr.operand(0)->shape();
  const Shape& indices = instr.operand(1)->shape();
  const Shape& out = instr.shape();
  if (!dn.operand_batching_dims.empty() || !out.IsArray() ||
      out.element_type() == PrimitiveType::kPred ||
      static_cast<int64_t>(slice.size()) != operand.rank()) {
    return std::nullopt;
  }
  LookupDims ld;
  ld.ivd = dn.index_vector_dim;
  ld.out_from_operand.assign(out.rank(), -1);
  ld.out_from_indices.assign(out.rank(), -1);
  std::vector<int64_t> out_batch;
  for (int64_t d = 0; d < out.rank(); ++d) {
    if (!Contains(dn.offset_dims, d)) out_batch.push_back(d);
  }
  for (int64_t d = 0; d < indices.rank(); ++d) {
    if (d != ld.ivd) ld.idx_batch.push_back(d);
  }
  if (ld.idx_batch.size() != out_batch.size()) return std::nullopt;
  for (size_t j = 0; j < out_batch.size(); ++j) ld.out_from_indices[out_batch[j]] = ld.idx_batch[j];
  size_t next_offset = 0;
  for (int64_t d = 0; d < operand.rank(); ++d) {
    const bool indexed = Contains(dn.start_index_map, d);
    if (indexed && slice[d] == 1) ld.one_wide.push_back(d);
    if (Contains(dn.collapsed_slice_dims, d)) continue;
    const int64_t out_dim = dn.offset_dims.at(next_offset++);
    // Taken whole even where indexed: a whole slice's start clamps to 0,
    // whatever the index (XLA's passthrough dims).
    if (slice[d] == operand.dimensions(d)) {
      ld.passthrough.push_back(d);
      ld.out_from_operand[out_dim] = d;
    }
  }
  return ld;
}

struct LookupPlan {
  HloSharding operand, indices, result;
  PartialSum sum;  // of the rows over the vocabulary split
  int64_t cost = 0;
};

}  // namespace

int64_t ReshardCostCache::operator()(const Shape& base, const HloSharding& from,
                                     const HloSharding& to) {
  if (from == to) return 0;
  const std::string key = base.ToString() + from.ToString() + "->" + to.ToString();
  auto it = cache_.find(key);
  if (it != cache_.end()) return it->second;
  return cache_[key] = ReshardCost(context_, base, from, to);
}

namespace {

// One reduce-scatter along e over part of each group, leaving `wanted`:
// every device's wanted tile is its partial tile with dim e split g ways,
// and each group holds each of the g chunks equally often (member k of a
// reduce-scatter group gets chunk k; the remaining groups, `groups` of the
// step, are the devices of a group holding the same chunk: empty when the
// scatter covers the whole group).
struct ScatterStep {
  std::vector<std::vector<int64_t>> scatter_groups, groups;
};

std::optional<ScatterStep> ScatterThenReduce(const HloSharding& partial, const HloSharding& wanted,
                                             const std::vector<std::vector<int64_t>>& groups,
                                             int64_t rank, int64_t e) {
  if (!wanted.IsTiled()) return std::nullopt;
  const std::vector<int64_t> pc = TilesPerDim(partial, rank), wc = wanted.TilesPerDim();
  const int64_t g = wc[e];
  const int64_t k = static_cast<int64_t>(groups[0].size());
  if (pc[e] != 1 || g < 2 || k % g != 0) return std::nullopt;
  for (int64_t d = 0; d < rank; ++d) {
    if (d != e && pc[d] != wc[d]) return std::nullopt;
  }
  ScatterStep step;
  // Every device's tiles, from one table each (groups cover every device).
  int64_t n = 0;
  for (const std::vector<int64_t>& group : groups) {
    for (int64_t dev : group) n = std::max(n, dev + 1);
  }
  n = std::max(n, wanted.tile_assignment().num_elements());
  const HloSharding::TileIndices w_table = wanted.TileIndexTable(n);
  const HloSharding::TileIndices p_table = partial.TileIndexTable(n);
  const std::vector<int64_t> untiled(rank, 0);
  for (const std::vector<int64_t>& group : groups) {
    std::vector<std::vector<int64_t>> chunk(g);
    for (int64_t dev : group) {
      const int64_t* wi = w_table[dev];
      const int64_t* pi = partial.IsTiled() ? p_table[dev] : untiled.data();
      const int64_t c = wi[e];
      for (int64_t d = 0; d < rank; ++d) {
        if ((d == e ? 0 : wi[d]) != pi[d]) return std::nullopt;
      }
      chunk[c].push_back(dev);
    }
    for (const std::vector<int64_t>& c : chunk) {
      if (static_cast<int64_t>(c.size()) != k / g) return std::nullopt;
    }
    for (int64_t j = 0; j < k / g; ++j) {
      std::vector<int64_t> scatter;
      for (int64_t c = 0; c < g; ++c) scatter.push_back(chunk[c][j]);
      step.scatter_groups.push_back(std::move(scatter));
    }
    if (k > g) step.groups.insert(step.groups.end(), chunk.begin(), chunk.end());
  }
  std::sort(step.scatter_groups.begin(), step.scatter_groups.end());
  std::sort(step.groups.begin(), step.groups.end());
  return step;
}

// Reduce-scatters along `dims` in this order, each to the wanted split of
// its dim (the dims after it still whole), then an all-reduce of what
// remains summed; nullopt when a step does not apply.
std::optional<PartialSum> ScatterChain(const HloSharding& partial, const HloSharding& wanted,
                                       const std::vector<std::vector<int64_t>>& groups,
                                       int64_t rank, const std::vector<int64_t>& dims,
                                       int64_t bytes) {
  PartialSum sum;
  HloSharding current = partial;
  std::vector<std::vector<int64_t>> summing = groups;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (summing.empty()) return std::nullopt;  // nothing left to scatter over
    const std::vector<int64_t> rest(dims.begin() + static_cast<int64_t>(i) + 1, dims.end());
    const HloSharding target =
        rest.empty()
            ? wanted
            : NormalizeSharding(sharding_util::PartiallyReplicateTiledShardingOnDims(wanted, rest));
    std::optional<ScatterStep> step = ScatterThenReduce(current, target, summing, rank, dims[i]);
    if (!step) return std::nullopt;
    sum.cost += bytes;
    bytes /= static_cast<int64_t>(step->scatter_groups[0].size());
    sum.scatters.push_back({dims[i], std::move(step->scatter_groups)});
    summing = std::move(step->groups);
    current = target;
  }
  sum.groups = std::move(summing);
  if (!sum.groups.empty()) sum.cost += 2 * bytes;
  sum.result = wanted;
  return sum;
}

}  // namespace

PartialSum PlanPartialSum(ReshardCostCache& cost, const Shape& base, const HloSharding& partial,
                          const HloSharding& wanted,
                          const std::vector<std::vector<int64_t>>& groups) {
  PartialSum sum;
  sum.result = partial;
  if (groups.empty() || groups[0].size() < 2) {
    sum.cost = cost(base, partial, wanted);
    return sum;
  }
  const int64_t bytes = LocalShape(base, partial).ByteSize();
  sum.groups = groups;
  sum.cost = 2 * bytes + cost(base, partial, wanted);
  if (!wanted.IsTiled()) return sum;
  // The dims the wanted sharding splits and the partial does not, in every
  // order (a chain scatters along each once).
  const int64_t rank = base.rank();
  const std::vector<int64_t> pc = TilesPerDim(partial, rank), wc = wanted.TilesPerDim();
  std::vector<int64_t> dims;
  for (int64_t e = 0; e < rank; ++e) {
    if (pc[e] == 1 && wc[e] > 1) dims.push_back(e);
  }
  if (dims.empty() || dims.size() > 3) return sum;
  do {
    std::optional<PartialSum> s = ScatterChain(partial, wanted, groups, rank, dims, bytes);
    if (s && s->cost <= sum.cost)
      sum = std::move(*s);  // on a tie: less memory, fewer bytes in a ring
  } while (std::next_permutation(dims.begin(), dims.end()));
  return sum;
}

HloInstruction* EmitPartialSum(SpmdBuilder& b, HloInstruction* partial, const PartialSum& sum) {
  HloComputation* add = b.ScalarReducer(HloOpcode::kAdd, partial->shape().element_type());
  for (const PartialSum::Scatter& scatter : sum.scatters) {
    const int64_t e = scatter.dim;
    const int64_t g = static_cast<int64_t>(scatter.groups[0].size());
    const int64_t size = partial->shape().dimensions(e);
    std::vector<int64_t> high(partial->shape().rank(), 0);
    high[e] = (size + g - 1) / g * g - size;
    partial = b.ReduceScatter(b.PadHigh(partial, high), e, add, scatter.groups);
  }
  if (!sum.groups.empty()) partial = b.AllReduce(partial, add, sum.groups);
  return partial;
}

HloInstruction* ShiftIndicesIntoTile(SpmdBuilder& b, HloInstruction* indices, int64_t ivd,
                                     const std::vector<int64_t>& index_map,
                                     const PartitionedValue& operand, bool clamp,
                                     HloInstruction** in_tile, std::span<const int64_t> whole) {
  const Shape& shape = indices->shape();
  const PrimitiveType t = shape.element_type();
  const bool implicit = ivd == shape.rank();
  const std::vector<int64_t> tiles = TilesPerDim(operand.sharding, operand.base.rank());
  std::vector<HloInstruction*> components;
  bool changed = false;
  HloInstruction* mask = nullptr;
  for (size_t k = 0; k < index_map.size(); ++k) {
    HloInstruction* c = indices;
    if (!implicit) {
      std::vector<int64_t> starts(shape.rank(), 0), limits = shape.dimensions();
      starts[ivd] = static_cast<int64_t>(k);
      limits[ivd] = static_cast<int64_t>(k) + 1;
      c = b.Slice(indices, starts, limits);
    }
    const int64_t d = index_map[k];
    if (tiles[d] > 1 && !Contains(whole, d)) {
      const std::vector<int64_t>& dims = c->shape().dimensions();
      const int64_t local = operand.hlo->shape().dimensions(d);
      if (clamp) {  // as the whole gather clamps a one-wide slice's start
        c = b.Binary(HloOpcode::kMaximum, c, b.BroadcastScalar(b.ConstantScalar(t, 0), dims));
        c = b.Binary(HloOpcode::kMinimum, c,
                     b.BroadcastScalar(b.ConstantScalar(t, operand.base.dimensions(d) - 1), dims));
      }
      std::vector<int64_t> offsets(b.num_partitions());
      const HloSharding::TileIndices table = operand.sharding.TileIndexTable(b.num_partitions());
      for (int64_t dev = 0; dev < b.num_partitions(); ++dev) offsets[dev] = table[dev][d] * local;
      c = b.Binary(HloOpcode::kSubtract, c,
                   b.BroadcastScalar(b.Convert(b.DeviceValue(offsets), t), dims));
      changed = true;
      if (in_tile != nullptr) {
        HloInstruction* in = b.Binary(
            HloOpcode::kAnd,
            b.Compare(c, b.BroadcastScalar(b.ConstantScalar(t, 0), dims), ComparisonDirection::kGe),
            b.Compare(c, b.BroadcastScalar(b.ConstantScalar(t, local), dims),
                      ComparisonDirection::kLt));
        mask = mask == nullptr ? in : b.Binary(HloOpcode::kAnd, mask, in);
      }
    }
    components.push_back(c);
  }
  if (in_tile != nullptr) {
    if (mask != nullptr && !implicit) {
      std::vector<int64_t> positions;
      for (int64_t d = 0; d < shape.rank(); ++d) {
        if (d != ivd) positions.push_back(shape.dimensions(d));
      }
      mask = b.Reshape(mask, positions);
    }
    *in_tile = mask;
  }
  if (!changed) return indices;
  if (components.size() == 1) return components[0];
  return b.Concatenate(std::move(components), ivd);
}

namespace {

std::optional<LookupPlan> PlanLookup(ComputationPartitioner& p, const HloInstruction& instr,
                                     const LookupDims& ld, const HloSharding& sharding) {
  const int64_t n = p.b().num_partitions();
  const Shape& operand = instr.operand(0)->shape();
  const Shape& indices = instr.operand(1)->shape();
  const Shape& out = instr.shape();
  const HloSharding& o_sharding = p.Get(instr.operand(0)).sharding;
  const HloSharding& i_sharding = p.Get(instr.operand(1)).sharding;
  const DeviceTiles o_tiles = DeviceTiles::Of(o_sharding, operand.rank(), n);
  std::vector<int64_t> vocab;
  for (int64_t d : ld.one_wide) {
    if (o_tiles.counts[d] > 1) vocab.push_back(d);
  }
  // No vocabulary split (FSDP splits only the hidden dim D): no partial sum;
  // each device looks up its own batch rows in a table coarsened as needed.
  const DeviceTiles key = DeviceTiles::Map(o_tiles, vocab);

  // The table: vocabulary and whole-slice dims as they are split, the rest whole.
  DeviceTiles o_base = o_tiles;
  std::vector<int64_t> o_free;
  for (int64_t d = 0; d < operand.rank(); ++d) {
    if (Contains(ld.passthrough, d)) {
      if (o_base.counts[d] > 1) o_free.push_back(d);
    } else if (!Contains(vocab, d)) {
      o_base.Unsplit(d);
    }
  }
  // The indices: split along batch dims as they are, or as the result is.
  const DeviceTiles r_tiles = DeviceTiles::Of(sharding, out.rank(), n);
  std::vector<DeviceTiles> i_bases = {DeviceTiles::Of(i_sharding, indices.rank(), n)};
  DeviceTiles from_result = DeviceTiles::Map(r_tiles, Inverse(ld.out_from_indices, indices.rank()));
  if (!(from_result == i_bases[0])) i_bases.push_back(std::move(from_result));

  // The table's candidates, once (they do not depend on the indices').
  std::vector<std::pair<DeviceTiles, HloSharding>> tables;
  for (DeviceTiles& ot : Coarsenings(o_base, o_free, TileCounts({&i_bases[0], &r_tiles}))) {
    std::optional<HloSharding> o_target = ot.ToSharding();
    if (o_target) tables.emplace_back(std::move(ot), std::move(*o_target));
  }
  ReshardCostCache cost(p.context());
  std::optional<LookupPlan> best;
  for (DeviceTiles i_base : i_bases) {
    if (ld.ivd < indices.rank()) i_base.Unsplit(ld.ivd);
    std::vector<int64_t> i_free;
    for (int64_t d : ld.idx_batch) {
      if (i_base.counts[d] > 1) i_free.push_back(d);
    }
    for (const DeviceTiles& it : Coarsenings(i_base, i_free, TileCounts({&o_base, &r_tiles}))) {
      const std::optional<HloSharding> i_target = it.ToSharding();
      if (!i_target) continue;
      for (const auto& [ot, o_target_sharding] : tables) {
        const std::optional<HloSharding> o_target = o_target_sharding;
        // The result: batch dims as the indices, whole-slice dims as the table.
        const DeviceTiles rt = DeviceTiles::Join(it, ld.out_from_indices, ot, ld.out_from_operand);
        const std::optional<HloSharding> r_partial = rt.ToSharding();
        if (!r_partial) continue;
        const std::optional<std::vector<std::vector<int64_t>>> groups = GroupsOverKey(rt, key);
        if (!groups) continue;
        LookupPlan plan{*o_target, *i_target, *r_partial,
                        PlanPartialSum(cost, out, *r_partial, sharding, *groups), 0};
        plan.cost = cost(indices, i_sharding, plan.indices) +
                    cost(operand, o_sharding, plan.operand) + plan.sum.cost;
        if (!best || plan.cost < best->cost) best = std::move(plan);
      }
    }
  }
  return best;
}

}  // namespace

PartitionedValue HandleGather(ComputationPartitioner& p, const HloInstruction& instr,
                              const HloSharding& sharding) {
  const std::optional<LookupDims> ld = AnalyzeGather(instr);
  const std::optional<LookupPlan> plan = ld ? PlanLookup(p, instr, *ld, sharding) : std::nullopt;
  if (!plan) return HandleReplicated(p, instr);

  SpmdBuilder& b = p.b();
  const PartitionedValue operand = p.GetAs(instr.operand(0), plan->operand);
  const PartitionedValue indices = p.GetAs(instr.operand(1), plan->indices);
  HloInstruction* in_tile = nullptr;
  HloInstruction* local_indices =
      ShiftIndicesIntoTile(b, indices.hlo, ld->ivd, instr.attrs().gather.start_index_map, operand,
                           /*clamp=*/true, &in_tile, ld->passthrough);
  HloAttributes attrs = instr.attrs();
  for (int64_t d : ld->passthrough) {
    attrs.gather_slice_sizes[d] = operand.hlo->shape().dimensions(d);
  }
  const Shape local = LocalShape(instr.shape(), plan->result);
  HloInstruction* rows =
      b.AddInstruction(HloOpcode::kGather, {operand.hlo, local_indices}, std::move(attrs), local);
  // Ids outside this device's tile contribute zero rows.
  std::vector<int64_t> batch_dims;
  for (int64_t d = 0; d < local.rank(); ++d) {
    if (ld->out_from_indices[d] >= 0) batch_dims.push_back(d);
  }
  if (in_tile != nullptr) {
    HloInstruction* mask = b.Broadcast(in_tile, local.dimensions(), batch_dims);
    rows =
        b.Select(mask, rows,
                 b.BroadcastScalar(b.ConstantScalar(local.element_type(), 0), local.dimensions()));
  }
  return PartitionedValue{EmitPartialSum(b, rows, plan->sum), instr.shape(), plan->sum.result};
}

}  // namespace weft::spmd
