// Building blocks of the SPMD partitioner: a builder that emits the
// per-device program, partitioned values (a local piece plus the sharding it
// follows), device-dependent constants read through partition-id, replica
// groups from tile assignments, and masks for the padding of uneven tiles.
//
// Conventions (as GSPMD): a value of global shape [D0, ...] sharded with
// tiles t_i per dim is held by every device as a local array of the full tile
// shape ceil(D_i / t_i); device with tile index k_i holds global elements
// [k_i * c_i, k_i * c_i + c_i) of dim i. Positions past D_i are padding with
// unspecified contents: an op that combines elements along a padded dim masks
// them first (MaskPadding), everything else ignores them.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "weft/hlo/builder.h"
#include "weft/hlo/module.h"
#include "weft/sharding/hlo_sharding.h"

namespace weft::spmd {

// A partitioned array: `hlo` is the local piece (shape = LocalShape) of a value
// of global shape `base` laid out by `sharding` (never a tuple; maximal is
// treated as replicated).
struct PartitionedValue {
  HloInstruction* hlo = nullptr;
  Shape base;
  HloSharding sharding;
};

// The padded per-device shape of `base` under `sharding`.
Shape LocalShape(const Shape& base, const HloSharding& sharding);

// Maximal and missing shardings become replicated; shard groups are dropped.
HloSharding NormalizeSharding(const HloSharding& sharding);

// Tiles per data dim (all 1 for tile-maximal shardings).
std::vector<int64_t> TilesPerDim(const HloSharding& sharding, int64_t rank);

// The device groups of a partly manual region (`last_tile_dims={manual}`):
// group m holds the devices at manual-subgroup index m, in ascending order;
// a device's position in its group is its local id. Inside the region each
// group runs the automatic dims as an SPMD program of its own over
// group_size() devices, numbered by local id.
struct ManualGroups {
  std::vector<std::vector<int64_t>> groups;
  std::vector<int64_t> local_id;  // per device
  int64_t group_size() const { return static_cast<int64_t>(groups.at(0).size()); }
  bool operator==(const ManualGroups& other) const { return groups == other.groups; }
};

// Whether `sharding` (or a leaf of it) has a manual subgroup.
bool IsPartlyManual(const HloSharding& sharding);
// The groups of a partly manual sharding's first partly manual leaf.
ManualGroups ManualGroupsOf(const HloSharding& sharding);
// A partly manual sharding as each group sees it: the manual subgroup
// dropped, devices numbered by local id (leaves without a manual subgroup
// must be replicated and stay so). Throws, naming the sharding, when its
// groups differ from `groups` or its groups lay their tiles out differently.
HloSharding GroupLocalSharding(const HloSharding& sharding, const ManualGroups& groups);
// The sharding of a full value `full` whose manual-group pieces `piece`
// are laid out by the partly manual `sharding`: per dim the groups split
// the dim in full / piece parts (the manual index read row-major over those
// dims) and each part is tiled as `sharding` tiles the piece. Each device's
// local piece under the result is its local piece of the region value.
// Throws naming what does not fit (pieces not dividing the full dims, tiles
// not dividing the pieces).
HloSharding ManualPiecesSharding(const HloSharding& sharding, const Shape& full,
                                 const Shape& piece);

// State shared by every computation of one partitioned module.
struct PartitionContext {
  HloModule* module = nullptr;  // the output module
  int64_t num_partitions = 1;
  int64_t next_channel_id = 1;
  std::map<std::pair<HloOpcode, PrimitiveType>, HloComputation*> reducers;
  // Input computations copied unpartitioned (reducers, called scalar code).
  std::map<const HloComputation*, HloComputation*> clones;
  // Set while an instruction of a partly manual region is partitioned: the
  // builders count group_size() partitions, partition-id reads the local id
  // and collectives run within every group.
  const ManualGroups* manual_groups = nullptr;
};

// Emits the instructions of one per-device computation: an
// HloComputationBuilder (instructions are created, shape-inferred and named
// by it; an unnamed one is "<current instruction>.<opcode>" once the
// partitioner sets the name prefix, so the output reads as a lowering of the
// input) plus what only the partitioner needs: the module-wide context, the
// device-dependent values read through partition-id, collectives numbered by
// the module's channel ids and confined to manual groups, shared scalar
// reducers, and shape helpers that emit nothing when nothing would change.
class SpmdBuilder : public HloComputationBuilder {
 public:
  SpmdBuilder(std::string name, PartitionContext* context);

  PartitionContext* context() const { return context_; }
  HloModule* module() const { return context_->module; }
  // Devices the program being built runs over (a manual group's size
  // inside a partly manual region).
  int64_t num_partitions() const;

  HloInstruction* S32Constant(int64_t value) {
    return ConstantScalar(PrimitiveType::kS32, static_cast<double>(value));
  }
  // A scalar broadcast to `dims` (element type kept from the scalar); the
  // scalar itself when `dims` is empty.
  HloInstruction* BroadcastScalar(HloInstruction* scalar, const std::vector<int64_t>& dims);
  // HloComputationBuilder's Reshape, Transpose, Slice (unit strides) and
  // Convert, except that they return `x` when it already is the result.
  HloInstruction* Reshape(HloInstruction* x, std::vector<int64_t> dims);
  HloInstruction* Transpose(HloInstruction* x, std::vector<int64_t> perm);
  HloInstruction* Slice(HloInstruction* x, std::vector<int64_t> starts,
                        std::vector<int64_t> limits);
  HloInstruction* Convert(HloInstruction* x, PrimitiveType type);
  // Pads the high end of each dim with `value` (no-op if all zero).
  HloInstruction* PadHigh(HloInstruction* x, std::vector<int64_t> high, double value = 0);

  // partition-id as s32 (one per computation); inside a partly manual
  // region, the device's local id in its manual group.
  HloInstruction* PartitionIdS32();
  // An s32 scalar equal to values[partition-id]: a constant when all agree,
  // else a constant table read with dynamic-slice at partition-id.
  HloInstruction* DeviceValue(const std::vector<int64_t>& values);

  // Collectives (a fresh channel id each; in place of HloComputationBuilder's,
  // which take the channel id and groups as given). Inside a partly manual
  // region groups and pairs name local ids and are repeated in every manual
  // group.
  HloInstruction* AllGather(HloInstruction* x, int64_t dim,
                            std::vector<std::vector<int64_t>> groups);
  HloInstruction* AllReduce(HloInstruction* x, HloComputation* reducer,
                            std::vector<std::vector<int64_t>> groups);
  HloInstruction* ReduceScatter(HloInstruction* x, int64_t dim, HloComputation* reducer,
                                std::vector<std::vector<int64_t>> groups);
  HloInstruction* AllToAll(HloInstruction* x, int64_t dim,
                           std::vector<std::vector<int64_t>> groups);
  HloInstruction* CollectivePermute(HloInstruction* x,
                                    std::vector<std::pair<int64_t, int64_t>> pairs);

  // A scalar reducer computation (add, maximum, ...) of `type`, added to the
  // module once and reused.
  HloComputation* ScalarReducer(HloOpcode opcode, PrimitiveType type);

 private:
  PartitionContext* context_;
  HloInstruction* partition_id_ = nullptr;
  HloInstruction* local_id_ = nullptr;
};

// Devices that share every tile-assignment index except along `dims` (tile
// assignment dims, which may include the replication dim), each group ordered
// row-major over `dims`: the groups a collective over those dims runs in.
std::vector<std::vector<int64_t>> GroupsAlongTileDims(const TileAssignment& tiles,
                                                      const std::vector<int64_t>& dims);

// Whether a reducer computation adds its two parameters.
bool IsAddReducer(const HloComputation& c);

// The device groups whose members hold addends of one value under a
// sharding with unreduced axes: all `num_devices` for {unreduced}, the
// devices along the unreduced subgroup dim otherwise.
std::vector<std::vector<int64_t>> UnreducedGroups(const HloSharding& sharding, int64_t num_devices);

// Replaces the padding of the given dims (positions at or past the global
// size) with `value`, so reductions over those dims see their identity.
// Dims that are not padded under v.sharding are left alone.
HloInstruction* MaskPadding(SpmdBuilder& b, const PartitionedValue& v,
                            const std::vector<int64_t>& dims, HloInstruction* value);

// The sharding of an array of rank `dst_rank` whose dim j follows dim
// dst_to_src[j] of `src` (-1: not split). Dims of `src` that no dst dim maps
// to must be unsplit (partially replicate them first).
HloSharding MapShardingDims(const HloSharding& src, const std::vector<int64_t>& dst_to_src,
                            int64_t dst_rank);

// Bytes moved by the collectives of a computation (per device): the cost
// model used to choose between strategies.
int64_t CommunicationBytes(const HloComputation& computation);

}  // namespace weft::spmd
