// HloSharding: how an HLO value is laid out over devices, in XLA's general form
// (a tile assignment plus replicated/manual subgroup dimensions), with XLA's
// text syntax:
//
//   {replicated}  {manual}  {unknown}  {maximal device=3}
//   {devices=[2,2]0,1,2,3}                          explicit tile assignment
//   {devices=[4,2]<=[8]}  {devices=[4,2]<=[2,4]T(1,0)}   iota tile assignment
//   {devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}
//   {devices=[2,2,2]<=[8] last_tile_dims={manual, replicated}}
//   {unreduced}  {devices=[1,2,2]<=[4] last_tile_dims={unreduced}}   partial sums
//   {replicated shard_as 0}  {devices=[2]0,1 shard_like 1}   sharding groups
//   {{replicated}, {devices=[2]0,1}}                  tuple
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "weft/base/error.h"
#include "weft/sharding/tile_assignment.h"

namespace weft {

// The meaning of a trailing tile-assignment dimension that does not split data.
// kUnreduced (XLA's and Shardy's unreduced axes): the devices along it hold
// addends of the value, which is their sum.
enum class SubgroupType { kManual, kReplicated, kUnreduced };
std::string_view SubgroupTypeName(SubgroupType type);

// A sharding group: every member of group `id` ends up with the same sharding
// (shard_as), or takes the sharding of the group without constraining it
// (shard_like).
struct ShardGroup {
  enum class Kind { kAs, kLike };
  Kind kind = Kind::kAs;
  int64_t id = 0;
  static ShardGroup As(int64_t id) { return {Kind::kAs, id}; }
  static ShardGroup Like(int64_t id) { return {Kind::kLike, id}; }
  std::string ToString() const;  // "shard_as 3"
  bool operator==(const ShardGroup&) const = default;
};

class HloSharding {
 public:
  // Every device holds the whole value.
  static HloSharding Replicate();
  // The value is already per-device (inside a manually partitioned region).
  static HloSharding Manual();
  // Every device holds an addend of the value: the value is their sum.
  static HloSharding Unreduced();
  // No sharding decided yet; used with a shard group.
  static HloSharding Unknown();
  // The whole value lives on one device.
  static HloSharding AssignDevice(int64_t device);
  // Every tile-assignment dim splits the data dim of the same index.
  static HloSharding Tile(TileAssignment tiles);
  // Like Tile, but the last tile-assignment dim replicates. Normalizes as XLA
  // does: a trivial last dim is dropped, all-replicated becomes Replicate(),
  // and devices within a replication group are sorted.
  static HloSharding PartialTile(TileAssignment tiles);
  // The last types.size() tile-assignment dims are subgroups of those types.
  // Normalizes as XLA does: size-1 subgroups dropped, same types merged, manual
  // before replicated, all-manual/all-replicated without data tiling become
  // Manual()/Replicate(), a lone replicated subgroup becomes PartialTile.
  static HloSharding Subgroup(TileAssignment tiles, std::vector<SubgroupType> types);
  static HloSharding Tuple(std::vector<HloSharding> elements);

  // Parses XLA's syntax (the whole string). Throws weft::Error naming the column.
  static HloSharding Parse(std::string_view text);

  HloSharding() : HloSharding(Replicate()) {}

  // Kind queries. For tuples, IsReplicated/IsTileMaximal/IsManual/IsUnknown
  // hold when they hold for every element.
  bool IsTuple() const { return kind_ == Kind::kTuple; }
  bool IsReplicated() const;
  bool IsManual() const;
  bool IsUnreduced() const;
  bool IsUnknown() const;
  // Single-device placement ({maximal device=N}).
  bool IsMaximal() const { return kind_ == Kind::kMaximal; }
  // Replicated or maximal: no data dimension is split.
  bool IsTileMaximal() const;
  // Has a tile assignment ({devices=...}).
  bool IsTiled() const { return kind_ == Kind::kTiled; }

  // Tiled-only accessors.
  const TileAssignment& tile_assignment() const { return tiles_; }
  bool ReplicateOnLastTileDim() const { return replicate_on_last_tile_dim_; }
  // Types of trailing subgroup dims from `last_tile_dims={...}` (empty otherwise).
  const std::vector<SubgroupType>& subgroup_types() const { return subgroup_types_; }
  // Number of tile-assignment dims that split data (the array rank it applies to).
  int64_t TiledDataRank() const;
  // Tile-assignment dim index of the replicated / manual subgroup, or -1.
  int64_t SubgroupReplicationDim() const;
  int64_t SubgroupManualDim() const;
  int64_t SubgroupUnreducedDim() const;
  // {unreduced} or an unreduced subgroup (on some leaf of a tuple): devices
  // hold addends of the value, not the value.
  bool HasUnreduced() const;
  // The same layout with the addends summed: {unreduced} becomes
  // {replicated}, an unreduced subgroup a replicated one (XLA's
  // ConvertUnreducedSharding). Leaves without unreduced axes are unchanged.
  HloSharding WithoutUnreduced() const;
  // Some devices hold the same tile (a replicated subgroup exists).
  bool HasPartialReplication() const { return SubgroupReplicationDim() >= 0; }
  // Each device's own value ({manual}) or each manual group's (a manual
  // subgroup): nothing outside says how the pieces make a whole.
  bool IsManualOrPartlyManual() const { return IsManual() || SubgroupManualDim() >= 0; }
  // Number of distinct data tiles (1 unless tiled).
  int64_t NumTiles() const;
  // Tiles along each data dim (empty unless tiled).
  std::vector<int64_t> TilesPerDim() const;

  // Maximal-only: the device.
  int64_t device() const;
  const std::vector<HloSharding>& tuple_elements() const { return tuple_elements_; }

  const std::optional<ShardGroup>& shard_group() const { return shard_group_; }
  HloSharding WithShardGroup(std::optional<ShardGroup> group) const;

  // XLA's CSE-prevention mark on a leaf: the metadata
  // {op_name="_sharding_propagation_cse_prevention"} an earlier propagation
  // put on a sharding it gave only to keep CSE from merging instructions.
  // Propagation drops such shardings and decides afresh, as XLA's does. The
  // only metadata weft keeps (and prints); equality ignores it.
  bool IsCsePrevention() const { return cse_prevention_; }
  HloSharding WithCsePrevention(bool mark) const;

  // Tile geometry for an array of `dims` (data rank must match). Tiles have
  // ceil(dim / tiles) elements; the trailing tiles of an uneven dim are short
  // or empty. Tile-maximal shardings have one whole-array tile.
  // Per data dim, the shard index of `device` (throws if unused).
  std::vector<int64_t> TileIndexForDevice(int64_t device) const;
  // TileIndexForDevice for devices 0..num_devices-1 at once: table[device][dim].
  // Shares the tile assignment's IndexTable (no list per device); throws
  // unless the assignment holds exactly devices 0..num_devices-1. Empty rows
  // when not tiled.
  class TileIndices {
   public:
    const int64_t* operator[](int64_t device) const { return table_->data() + device * stride_; }

   private:
    friend class HloSharding;
    std::shared_ptr<const std::vector<int64_t>> table_;
    int64_t stride_ = 0;
  };
  TileIndices TileIndexTable(int64_t num_devices) const;
  // Full tile size (the padded per-device shape).
  std::vector<int64_t> TileShape(std::span<const int64_t> dims) const;
  // Actual extent held by `device`: [offset, limit) per dim.
  std::vector<int64_t> TileOffsetForDevice(std::span<const int64_t> dims, int64_t device) const;
  std::vector<int64_t> TileLimitForDevice(std::span<const int64_t> dims, int64_t device) const;
  std::vector<int64_t> TileShapeForDevice(std::span<const int64_t> dims, int64_t device) const;
  // Whether `device` holds part of the value.
  bool UsesDevice(int64_t device) const;

  // Checks this (non-tuple) sharding can apply to an array of `dims` on
  // `num_devices` devices (if given). Throws weft::Error saying what is wrong.
  void Validate(std::span<const int64_t> dims, std::optional<int64_t> num_devices = {}) const;

  std::string ToString() const;
  // Equality ignores nothing but metadata: kind, tiles, subgroups, shard group.
  bool operator==(const HloSharding& other) const;
  bool operator!=(const HloSharding& other) const { return !(*this == other); }
  size_t Hash() const;

 private:
  enum class Kind { kReplicated, kManual, kUnreduced, kUnknown, kMaximal, kTiled, kTuple };
  explicit HloSharding(Kind kind) : kind_(kind) {}

  Kind kind_ = Kind::kReplicated;
  TileAssignment tiles_;  // kTiled
  bool replicate_on_last_tile_dim_ = false;
  std::vector<SubgroupType> subgroup_types_;
  int64_t device_ = 0;  // kMaximal
  std::vector<HloSharding> tuple_elements_;
  std::optional<ShardGroup> shard_group_;
  bool cse_prevention_ = false;
};

struct HloShardingHash {
  size_t operator()(const HloSharding& s) const { return s.Hash(); }
};

// A syntax error inside a sharding, at `offset` bytes into the parsed text.
// The HLO parser turns the offset into line:col.
class ShardingSyntaxError : public Error {
 public:
  ShardingSyntaxError(size_t offset, const std::string& what) : Error(what), offset_(offset) {}
  size_t offset() const { return offset_; }

 private:
  size_t offset_;
};

// What a parsed sharding may span: a tile assignment holding more than
// max_devices devices is refused (ShardingSyntaxError "... spans more than N
// devices, <why>") before any device id is expanded.
struct ShardingLimits {
  int64_t max_devices = kMaxDevices;
  std::string why = "the most devices weft supports";
};

// Parses one sharding starting at text[*pos] (leading whitespace and
// comments skipped, as everywhere in HLO text: the sharding is read with the
// HLO parser's lexer, weft::TextCursor) and advances *pos past its closing
// brace. Throws ShardingSyntaxError (offset into `text`) on bad syntax and on
// a well-formed but invalid sharding (e.g. repeated device ids).
HloSharding ParseHloShardingAt(std::string_view text, size_t* pos,
                               const ShardingLimits& limits = {});

}  // namespace weft
