// Partly manual shardings (`last_tile_dims={manual}`): the device groups of
// a region, a sharding as each group sees it, and the sharding that cuts a
// full value into the groups' pieces.
#include <algorithm>
#include <numeric>

#include "weft/base/error.h"
#include "weft/spmd/spmd_partitioner_util.h"

namespace weft::spmd {
namespace {

const HloSharding* FirstPartlyManualLeaf(const HloSharding& sharding) {
  if (!sharding.IsTuple()) return sharding.SubgroupManualDim() >= 0 ? &sharding : nullptr;
  for (const HloSharding& e : sharding.tuple_elements()) {
    if (e.SubgroupManualDim() >= 0) return &e;
  }
  return nullptr;
}

// The tile assignment with the manual dim moved first: row m lists the
// devices of manual index m, row-major over the other dims.
TileAssignment ManualDimFirst(const HloSharding& leaf) {
  const TileAssignment& ta = leaf.tile_assignment();
  const int64_t manual = leaf.SubgroupManualDim();
  std::vector<int64_t> perm = {manual};
  for (int64_t d = 0; d < ta.num_dims(); ++d) {
    if (d != manual) perm.push_back(d);
  }
  return ta.Transpose(perm);
}

HloSharding LeafInGroup(const HloSharding& leaf, const ManualGroups& groups) {
  if (leaf.SubgroupManualDim() < 0) {
    WEFT_CHECK(leaf.IsTileMaximal(),
               "sharding {} has no manual subgroup but is used inside a partly manual region; "
               "give the region's values the region's manual subgroup",
               leaf.ToString());
    return HloSharding::Replicate();
  }
  WEFT_CHECK(ManualGroupsOf(leaf) == groups,
             "sharding {} has other manual groups than the region it is used in; one "
             "computation holds regions over one set of manual groups",
             leaf.ToString());
  const TileAssignment moved = ManualDimFirst(leaf);
  const int64_t num_groups = moved.dim(0);
  const int64_t size = moved.num_elements() / num_groups;
  const std::vector<int64_t>& devices = moved.devices();
  std::vector<int64_t> local(size);
  for (int64_t i = 0; i < size; ++i) local[i] = groups.local_id.at(devices[i]);
  for (int64_t m = 1; m < num_groups; ++m) {
    for (int64_t i = 0; i < size; ++i) {
      WEFT_CHECK(groups.local_id.at(devices[m * size + i]) == local[i],
                 "sharding {}: manual group {} lays its tiles out differently from group 0 "
                 "(device {} holds the tile that device {} holds in group 0); the partitioner "
                 "needs every group laid out alike",
                 leaf.ToString(), m, devices[m * size + i], devices[i]);
    }
  }
  std::vector<int64_t> dims(moved.dims().begin() + 1, moved.dims().end());
  std::vector<SubgroupType> types;
  for (SubgroupType t : leaf.subgroup_types()) {
    if (t != SubgroupType::kManual) types.push_back(t);
  }
  return HloSharding::Subgroup(TileAssignment(std::move(dims), std::move(local)), std::move(types));
}

}  // namespace

bool IsPartlyManual(const HloSharding& sharding) {
  return FirstPartlyManualLeaf(sharding) != nullptr;
}

ManualGroups ManualGroupsOf(const HloSharding& sharding) {
  const HloSharding* leaf = FirstPartlyManualLeaf(sharding);
  WEFT_CHECK(leaf != nullptr, "internal: {} is not partly manual", sharding.ToString());
  const TileAssignment moved = ManualDimFirst(*leaf);
  const int64_t num_groups = moved.dim(0);
  const int64_t size = moved.num_elements() / num_groups;
  const std::vector<int64_t>& devices = moved.devices();
  ManualGroups result;
  result.local_id.assign(moved.num_elements(), -1);
  for (int64_t m = 0; m < num_groups; ++m) {
    std::vector<int64_t>& group =
        result.groups.emplace_back(devices.begin() + m * size, devices.begin() + (m + 1) * size);
    std::sort(group.begin(), group.end());
    for (int64_t i = 0; i < size; ++i) result.local_id.at(group[i]) = i;
  }
  return result;
}

HloSharding GroupLocalSharding(const HloSharding& sharding, const ManualGroups& groups) {
  if (!sharding.IsTuple()) return LeafInGroup(sharding, groups);
  std::vector<HloSharding> leaves;
  for (const HloSharding& e : sharding.tuple_elements()) leaves.push_back(LeafInGroup(e, groups));
  return HloSharding::Tuple(std::move(leaves));
}

HloSharding ManualPiecesSharding(const HloSharding& sharding, const Shape& full,
                                 const Shape& piece) {
  WEFT_CHECK(!sharding.IsTuple() && sharding.SubgroupManualDim() >= 0 && full.IsArray() &&
                 piece.IsArray() && full.rank() == piece.rank() &&
                 sharding.TiledDataRank() == full.rank(),
             "the pieces {} of sharding {} do not belong to a full {}", piece.ToString(),
             sharding.ToString(), full.ToString());
  const TileAssignment& ta = sharding.tile_assignment();
  const int64_t rank = full.rank();
  const int64_t manual_dim = sharding.SubgroupManualDim();
  const int64_t num_groups = ta.dim(manual_dim);
  const int64_t replicas =
      sharding.SubgroupReplicationDim() >= 0 ? ta.dim(sharding.SubgroupReplicationDim()) : 1;
  // parts[d]: how many pieces of dim d the full value holds.
  std::vector<int64_t> parts(rank, 1);
  int64_t num_parts = 1;
  for (int64_t d = 0; d < rank; ++d) {
    const int64_t f = full.dimensions(d), p = piece.dimensions(d);
    WEFT_CHECK(p > 0 ? f % p == 0 : f == 0,
               "the pieces {} do not cut the full {} along dim {} ({} is not a multiple of {})",
               piece.ToString(), full.ToString(), d, f, p);
    parts[d] = p > 0 ? f / p : 1;
    num_parts *= parts[d];
    WEFT_CHECK(parts[d] == 1 || p % ta.dim(d) == 0,
               "sharding {} splits dim {} of the pieces {} into {} uneven tiles; the "
               "partitioner needs them even where the manual groups also cut that dim",
               sharding.ToString(), d, piece.ToString(), ta.dim(d));
  }
  WEFT_CHECK(num_parts == 1 || num_parts == num_groups,
             "the full {} holds {} pieces {} but sharding {} has {} manual groups; the groups "
             "take one piece each, or all take the whole value",
             full.ToString(), num_parts, piece.ToString(), sharding.ToString(), num_groups);
  // Result dims: data dims split parts[d] * tiles, then the replicated dim
  // (manual groups that hold the same piece, times the sharding's replicas).
  const int64_t group_replicas = num_parts == 1 ? num_groups : 1;
  std::vector<int64_t> out_dims;
  for (int64_t d = 0; d < rank; ++d) out_dims.push_back(parts[d] * ta.dim(d));
  out_dims.push_back(group_replicas * replicas);
  std::vector<int64_t> devices(ta.num_elements(), -1);
  std::vector<int64_t> index(ta.num_dims(), 0), out_index(rank + 1);
  for (int64_t flat = 0; flat < ta.num_elements(); ++flat) {
    const int64_t m = index[manual_dim];
    int64_t rest = m;  // the manual index, read row-major over the split dims
    for (int64_t d = rank - 1; d >= 0; --d) {
      const int64_t part = num_parts == 1 ? 0 : rest % parts[d];
      if (num_parts != 1) rest /= parts[d];
      out_index[d] = part * ta.dim(d) + index[d];
    }
    const int64_t replica =
        sharding.SubgroupReplicationDim() >= 0 ? index[sharding.SubgroupReplicationDim()] : 0;
    out_index[rank] = (num_parts == 1 ? m : 0) * replicas + replica;
    int64_t out_flat = 0;
    for (int64_t d = 0; d <= rank; ++d) out_flat = out_flat * out_dims[d] + out_index[d];
    devices[out_flat] = ta(index);
    for (int64_t k = ta.num_dims() - 1; k >= 0; --k) {
      if (++index[k] < ta.dim(k)) break;
      index[k] = 0;
    }
  }
  return HloSharding::PartialTile(TileAssignment(std::move(out_dims), std::move(devices)));
}

}  // namespace weft::spmd
