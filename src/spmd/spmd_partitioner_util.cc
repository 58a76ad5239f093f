#include "weft/spmd/spmd_partitioner_util.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <numeric>

#include "weft/base/error.h"

namespace weft::spmd {

Shape LocalShape(const Shape& base, const HloSharding& sharding) {
  WEFT_CHECK(base.IsArray(), "LocalShape needs an array, got {}", base.ToString());
  if (!sharding.IsTiled()) return base;
  return base.WithDimensions(sharding.TileShape(base.dimensions()));
}

HloSharding NormalizeSharding(const HloSharding& sharding) {
  if (sharding.IsTuple()) {
    std::vector<HloSharding> elements;
    for (const HloSharding& e : sharding.tuple_elements()) elements.push_back(NormalizeSharding(e));
    return HloSharding::Tuple(std::move(elements));
  }
  if (sharding.IsManualOrPartlyManual()) {
    return sharding.WithShardGroup(std::nullopt);
  }
  WEFT_CHECK(!sharding.IsUnknown(),
             "sharding {} is still unknown; run sharding propagation before partitioning",
             sharding.ToString());
  if (sharding.IsTileMaximal()) return HloSharding::Replicate();
  return sharding.WithShardGroup(std::nullopt);
}

std::vector<int64_t> TilesPerDim(const HloSharding& sharding, int64_t rank) {
  if (!sharding.IsTiled()) return std::vector<int64_t>(rank, 1);
  return sharding.TilesPerDim();
}

// ---------------------------------------------------------------------------
// SpmdBuilder

SpmdBuilder::SpmdBuilder(std::string name, PartitionContext* context)
    : HloComputationBuilder(std::move(name)), context_(context) {}

HloInstruction* SpmdBuilder::BroadcastScalar(HloInstruction* scalar,
                                             const std::vector<int64_t>& dims) {
  if (dims.empty()) return scalar;
  return Broadcast(scalar, dims, {});
}

HloInstruction* SpmdBuilder::Reshape(HloInstruction* x, std::vector<int64_t> dims) {
  if (x->shape().dimensions() == dims) return x;
  return HloComputationBuilder::Reshape(x, std::move(dims));
}

HloInstruction* SpmdBuilder::Transpose(HloInstruction* x, std::vector<int64_t> perm) {
  std::vector<int64_t> identity(perm.size());
  std::iota(identity.begin(), identity.end(), 0);
  if (perm == identity) return x;
  return HloComputationBuilder::Transpose(x, std::move(perm));
}

HloInstruction* SpmdBuilder::Slice(HloInstruction* x, std::vector<int64_t> starts,
                                   std::vector<int64_t> limits) {
  bool whole = starts.size() == limits.size();
  for (size_t i = 0; whole && i < starts.size(); ++i) {
    whole = starts[i] == 0 && limits[i] == x->shape().dimensions(i);
  }
  if (whole) return x;
  return HloComputationBuilder::Slice(x, std::move(starts), std::move(limits));
}

HloInstruction* SpmdBuilder::Convert(HloInstruction* x, PrimitiveType type) {
  if (x->shape().element_type() == type) return x;
  return HloComputationBuilder::Convert(x, type);
}

HloInstruction* SpmdBuilder::PadHigh(HloInstruction* x, std::vector<int64_t> high, double value) {
  if (std::all_of(high.begin(), high.end(), [](int64_t h) { return h == 0; })) return x;
  std::vector<PadDim> padding;
  for (int64_t h : high) padding.push_back({0, h, 0});
  HloInstruction* pad_value = ConstantScalar(x->shape().element_type(), value);
  return Pad(x, pad_value, std::move(padding));
}

int64_t SpmdBuilder::num_partitions() const {
  const ManualGroups* groups = context_->manual_groups;
  return groups == nullptr ? context_->num_partitions : groups->group_size();
}

HloInstruction* SpmdBuilder::PartitionIdS32() {
  if (partition_id_ == nullptr) {
    HloInstruction* pid = AddInstruction(HloOpcode::kPartitionId, {}, {},
                                         Shape::Scalar(PrimitiveType::kU32), {}, "partition-id");
    partition_id_ = Convert(pid, PrimitiveType::kS32);
  }
  const ManualGroups* groups = context_->manual_groups;
  if (groups == nullptr) return partition_id_;
  if (local_id_ == nullptr) {
    // One computation holds at most one region's groups (the driver checks).
    HloAttributes a;
    Shape table_shape(PrimitiveType::kS32, {static_cast<int64_t>(groups->local_id.size())});
    a.literal = Literal::FromInts(table_shape, groups->local_id);
    HloInstruction* table = AddInstruction(HloOpcode::kConstant, {}, std::move(a), table_shape, {},
                                           "manual-group-local-ids");
    local_id_ = AddInstruction(HloOpcode::kReshape, {DynamicSlice(table, {partition_id_}, {1})}, {},
                               Shape::Scalar(PrimitiveType::kS32), {}, "manual-group-local-id");
  }
  return local_id_;
}

HloInstruction* SpmdBuilder::DeviceValue(const std::vector<int64_t>& values) {
  WEFT_CHECK(static_cast<int64_t>(values.size()) == num_partitions(),
             "internal: device table has {} entries for {} partitions", values.size(),
             num_partitions());
  if (std::all_of(values.begin(), values.end(), [&](int64_t v) { return v == values[0]; })) {
    return S32Constant(values[0]);
  }
  HloInstruction* table =
      Constant(Literal::FromInts(Shape(PrimitiveType::kS32, {num_partitions()}), values));
  HloInstruction* entry = DynamicSlice(table, {PartitionIdS32()}, {1});
  return Reshape(entry, {});
}

namespace {
// Inside a partly manual region: every local group once per manual group.
std::vector<std::vector<int64_t>> InEveryManualGroup(const PartitionContext* context,
                                                     std::vector<std::vector<int64_t>> groups) {
  const ManualGroups* manual = context->manual_groups;
  if (manual == nullptr) return groups;
  if (groups.empty()) {  // all devices: one group of every local id
    groups.emplace_back(manual->group_size());
    std::iota(groups.back().begin(), groups.back().end(), 0);
  }
  std::vector<std::vector<int64_t>> result;
  for (const std::vector<int64_t>& devices : manual->groups) {
    for (const std::vector<int64_t>& local : groups) {
      std::vector<int64_t>& group = result.emplace_back();
      for (int64_t id : local) group.push_back(devices.at(id));
    }
  }
  return result;
}

HloAttributes CollectiveAttrs(PartitionContext* context, std::vector<std::vector<int64_t>> groups) {
  HloAttributes a;
  a.replica_groups = InEveryManualGroup(context, std::move(groups));
  a.channel_id = context->next_channel_id++;
  a.use_global_device_ids = true;
  return a;
}
}  // namespace

HloInstruction* SpmdBuilder::AllGather(HloInstruction* x, int64_t dim,
                                       std::vector<std::vector<int64_t>> groups) {
  HloAttributes a = CollectiveAttrs(context_, std::move(groups));
  a.dimensions = {dim};
  return AddInstruction(HloOpcode::kAllGather, {x}, std::move(a));
}

HloInstruction* SpmdBuilder::AllReduce(HloInstruction* x, HloComputation* reducer,
                                       std::vector<std::vector<int64_t>> groups) {
  return AddInstruction(HloOpcode::kAllReduce, {x}, CollectiveAttrs(context_, std::move(groups)),
                        Shape(), {reducer});
}

HloInstruction* SpmdBuilder::ReduceScatter(HloInstruction* x, int64_t dim, HloComputation* reducer,
                                           std::vector<std::vector<int64_t>> groups) {
  HloAttributes a = CollectiveAttrs(context_, std::move(groups));
  a.dimensions = {dim};
  return AddInstruction(HloOpcode::kReduceScatter, {x}, std::move(a), Shape(), {reducer});
}

HloInstruction* SpmdBuilder::AllToAll(HloInstruction* x, int64_t dim,
                                      std::vector<std::vector<int64_t>> groups) {
  HloAttributes a = CollectiveAttrs(context_, std::move(groups));
  a.use_global_device_ids = false;  // all-to-all has no such mode; channel ids name partitions
  a.dimensions = {dim};
  return AddInstruction(HloOpcode::kAllToAll, {x}, std::move(a));
}

HloInstruction* SpmdBuilder::CollectivePermute(HloInstruction* x,
                                               std::vector<std::pair<int64_t, int64_t>> pairs) {
  HloAttributes a;
  if (const ManualGroups* manual = context_->manual_groups) {
    for (const std::vector<int64_t>& devices : manual->groups) {
      for (const auto& [source, target] : pairs) {
        a.source_target_pairs.emplace_back(devices.at(source), devices.at(target));
      }
    }
  } else {
    a.source_target_pairs = std::move(pairs);
  }
  a.channel_id = context_->next_channel_id++;
  return AddInstruction(HloOpcode::kCollectivePermute, {x}, std::move(a));
}

HloComputation* SpmdBuilder::ScalarReducer(HloOpcode opcode, PrimitiveType type) {
  auto key = std::make_pair(opcode, type);
  auto it = context_->reducers.find(key);
  if (it != context_->reducers.end()) return it->second;
  std::string name = fmt::format("{}.{}", HloOpcodeString(opcode), PrimitiveTypeName(type));
  HloComputation* reducer = module()->AddComputation(MakeScalarReduction(name, opcode, type));
  context_->reducers[key] = reducer;
  return reducer;
}

// ---------------------------------------------------------------------------

std::vector<std::vector<int64_t>> GroupsAlongTileDims(const TileAssignment& tiles,
                                                      const std::vector<int64_t>& dims) {
  const int64_t rank = tiles.num_dims();
  std::vector<bool> in_group(rank, false);
  for (int64_t d : dims) in_group.at(d) = true;
  // Groups ordered by the row-major index over the other dims, members by
  // the index over `dims`: the tiles transposed to (other dims, dims), read
  // in rows (an iota stays an iota: nothing is searched or sorted).
  std::vector<int64_t> perm;
  int64_t group_size = 1;
  for (int64_t d = 0; d < rank; ++d) {
    if (!in_group[d]) perm.push_back(d);
  }
  for (int64_t d = 0; d < rank; ++d) {
    if (in_group[d]) {
      perm.push_back(d);
      group_size *= tiles.dim(d);
    }
  }
  const TileAssignment moved = tiles.Transpose(perm);
  const int64_t n = moved.num_elements();
  std::vector<std::vector<int64_t>> result(n / group_size);
  const std::vector<int64_t>& devices = moved.devices();
  for (int64_t g = 0; g < n / group_size; ++g) {
    result[g].assign(devices.begin() + g * group_size, devices.begin() + (g + 1) * group_size);
  }
  return result;
}

bool IsAddReducer(const HloComputation& c) {
  const HloInstruction* root = c.root_instruction();
  return root->opcode() == HloOpcode::kAdd && root->operand_count() == 2 &&
         root->operand(0)->opcode() == HloOpcode::kParameter &&
         root->operand(1)->opcode() == HloOpcode::kParameter &&
         root->operand(0) != root->operand(1);
}

std::vector<std::vector<int64_t>> UnreducedGroups(const HloSharding& sharding,
                                                  int64_t num_devices) {
  if (sharding.IsUnreduced()) {
    std::vector<int64_t> all(static_cast<size_t>(num_devices));
    std::iota(all.begin(), all.end(), 0);
    return {all};
  }
  const int64_t dim = sharding.SubgroupUnreducedDim();
  WEFT_CHECK(dim >= 0, "internal: sharding {} has no unreduced axes", sharding.ToString());
  return GroupsAlongTileDims(sharding.tile_assignment(), {dim});
}

HloInstruction* MaskPadding(SpmdBuilder& b, const PartitionedValue& v,
                            const std::vector<int64_t>& dims, HloInstruction* value) {
  if (!v.sharding.IsTiled()) return v.hlo;
  const std::vector<int64_t> tiles = v.sharding.TilesPerDim();
  const Shape local = v.hlo->shape();
  HloInstruction* mask = nullptr;
  for (int64_t d : dims) {
    const int64_t size = v.base.dimensions(d);
    const int64_t tile = local.dimensions(d);
    if (tile * tiles[d] == size) continue;  // not padded
    const int64_t n = b.num_partitions();
    const HloSharding::TileIndices table = v.sharding.TileIndexTable(n);
    std::vector<int64_t> offsets(n);
    for (int64_t device = 0; device < n; ++device) offsets[device] = table[device][d] * tile;
    Shape index_shape(PrimitiveType::kS32, local.dimensions());
    HloInstruction* index = b.Binary(HloOpcode::kAdd, b.Iota(index_shape, d),
                                     b.BroadcastScalar(b.DeviceValue(offsets), local.dimensions()));
    HloInstruction* in_range =
        b.Compare(index, b.BroadcastScalar(b.S32Constant(size), local.dimensions()),
                  ComparisonDirection::kLt);
    mask = mask == nullptr ? in_range : b.Binary(HloOpcode::kAnd, mask, in_range);
  }
  if (mask == nullptr) return v.hlo;
  return b.Select(mask, v.hlo, b.BroadcastScalar(value, local.dimensions()));
}

HloSharding MapShardingDims(const HloSharding& src, const std::vector<int64_t>& dst_to_src,
                            int64_t dst_rank) {
  if (!src.IsTiled()) return src;
  WEFT_CHECK(static_cast<int64_t>(dst_to_src.size()) == dst_rank,
             "internal: dim map has {} entries for rank {}", dst_to_src.size(), dst_rank);
  const int64_t src_rank = src.TiledDataRank();
  const TileAssignment& tiles = src.tile_assignment();
  std::vector<int64_t> perm;
  std::vector<bool> mapped(src_rank, false);
  std::vector<int64_t> dst_tiles;
  for (int64_t j = 0; j < dst_rank; ++j) {
    const int64_t s = dst_to_src[j];
    if (s < 0) {
      dst_tiles.push_back(1);
      continue;
    }
    perm.push_back(s);
    mapped.at(s) = true;
    dst_tiles.push_back(tiles.dim(s));
  }
  for (int64_t s = 0; s < src_rank; ++s) {
    if (mapped[s]) continue;
    WEFT_CHECK(tiles.dim(s) == 1, "internal: dim {} of {} is split but not mapped", s,
               src.ToString());
    perm.push_back(s);
  }
  for (int64_t s = src_rank; s < tiles.num_dims(); ++s) {
    perm.push_back(s);
    dst_tiles.push_back(tiles.dim(s));
  }
  TileAssignment result = tiles.Transpose(perm).Reshape(dst_tiles);
  if (src.ReplicateOnLastTileDim()) return HloSharding::PartialTile(std::move(result));
  return HloSharding::Subgroup(std::move(result), src.subgroup_types());
}

int64_t CommunicationBytes(const HloComputation& computation) {
  int64_t bytes = 0;
  for (const HloInstruction* instr : computation.instructions()) {
    switch (instr->opcode()) {
      case HloOpcode::kAllGather:
      case HloOpcode::kAllToAll:
      case HloOpcode::kCollectivePermute:
        bytes += instr->shape().ByteSize();
        break;
      case HloOpcode::kReduceScatter:
        bytes += instr->operand(0)->shape().ByteSize();
        break;
      case HloOpcode::kAllReduce:
        bytes += 2 * instr->shape().ByteSize();
        break;
      default:
        break;
    }
  }
  return bytes;
}

}  // namespace weft::spmd
