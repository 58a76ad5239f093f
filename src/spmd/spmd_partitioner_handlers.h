// Internal to the partitioner: one computation's partitioning state and the
// per-op handlers (spmd_partitioner_*.cc). A handler emits the local op and
// returns its value in whatever sharding is natural; the driver reshards it
// to the instruction's sharding afterwards.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "weft/spmd/reshard.h"

namespace weft::spmd {

// What the partitioner's plans charge for repeated local work: a byte moved
// between devices costs as much as kFlopsPerByte local FLOPs (the dot's and
// the convolution's plans; spmd_partitioner_dot.cc says why 64).
inline constexpr int64_t kFlopsPerByte = 64;

class ComputationPartitioner {
 public:
  // `param_shardings` per parameter (tuple shardings for tuple parameters);
  // the root is resharded to `root_sharding` (nullopt: its own sharding).
  ComputationPartitioner(PartitionContext* context, const HloComputation& source, std::string name,
                         std::vector<HloSharding> param_shardings,
                         std::optional<HloSharding> root_sharding, bool is_entry);

  // Partitions every instruction and returns the per-device computation.
  std::unique_ptr<HloComputation> Run();

  SpmdBuilder& b() { return b_; }
  PartitionContext* context() const { return context_; }
  const PartitionedValue& Get(const HloInstruction* operand) const;
  // An operand resharded (arrays and flat tuples).
  PartitionedValue GetAs(const HloInstruction* operand, const HloSharding& sharding);
  // Whether GetAs already resharded `operand` to `sharding` in this
  // computation: its collectives are then duplicates, which the compiler's
  // collective CSE merges when they are close (compiler/collective_cse.h).
  bool HasReshard(const HloInstruction* operand, const HloSharding& sharding) const;
  // A copy of a scalar computation (reducers), once per module.
  HloComputation* CloneCalled(const HloComputation* computation);
  // While a dot or an add-reduce is partitioned for a result with unreduced
  // axes (its handler gets the sharding without them): that result. Its
  // local sums over split contracted dims are then kept unsummed where
  // they are its addends (KeepsAddends).
  const HloSharding* unreduced_target() const { return unreduced_target_; }

 private:
  PartitionedValue Partition(const HloInstruction& instr, const HloSharding& sharding);
  // An instruction outside the partly manual regions: its handler, then a
  // reshard to `sharding`. A result with unreduced axes (devices holding
  // addends of it) is made by the handler for the summed layout and
  // resharded, unless the op makes addends itself: linear elementwise ops
  // on addends, and dots and add-reduces whose local sums are its addends.
  PartitionedValue PartitionOutsideRegions(const HloInstruction& instr,
                                           const HloSharding& sharding);
  // An instruction of a partly manual region (`sharding` has a manual
  // subgroup): partitioned within every manual group.
  PartitionedValue PartitionInRegion(const HloInstruction& instr, const HloSharding& sharding);
  // Refuses operands that cross a partly manual region's edge other than
  // through SPMDFullToShardShape / SPMDShardToFullShape.
  void CheckRegionEdges(const HloInstruction& instr, bool in_region) const;

  PartitionContext* context_;
  const HloComputation& source_;
  SpmdBuilder b_;
  std::vector<HloSharding> param_shardings_;
  std::optional<HloSharding> root_sharding_;
  bool is_entry_;
  // Called by a while or conditional of a partly manual region (built while
  // its manual groups are set): the parameters and the root may be each
  // group's own values.
  bool called_in_region_;
  std::unordered_map<const HloInstruction*, PartitionedValue> values_;
  // The shardings GetAs resharded each operand to (outside manual regions).
  std::unordered_map<const HloInstruction*, std::vector<HloSharding>> reshards_;
  // Output instructions that already stand for an input instruction.
  std::unordered_set<const HloInstruction*> named_;
  // The manual groups of this computation's partly manual region(s), and
  // the instructions whose values are group-local (held as each group sees
  // them).
  std::optional<ManualGroups> region_groups_;
  std::unordered_set<const HloInstruction*> group_local_;
  const HloSharding* unreduced_target_ = nullptr;
};

// Whether local sums laid out by `partial`, each over its group of
// `groups` (devices whose split contracted dims differ), are the addends
// of p's unreduced target: its unreduced axes are exactly those groups and
// its other dims as `partial`'s.
bool KeepsAddends(const ComputationPartitioner& p, const HloSharding& partial,
                  const std::vector<std::vector<int64_t>>& groups);

// The sharding of `instr` (replicated when it has none), normalized.
HloSharding ShardingOf(const HloInstruction& instr);
// Local shape of a value that may be a flat tuple.
Shape LocalShapeOf(const Shape& base, const HloSharding& sharding);
// Reshards arrays and flat tuples (element by element).
PartitionedValue ReshardAny(SpmdBuilder& b, const PartitionedValue& v, const HloSharding& target);

// Handlers: `sharding` is the instruction's (normalized) sharding.
PartitionedValue HandleElementwise(ComputationPartitioner& p, const HloInstruction& instr,
                                   const HloSharding& sharding);
PartitionedValue HandleBroadcast(ComputationPartitioner& p, const HloInstruction& instr,
                                 const HloSharding& sharding);
PartitionedValue HandleReshape(ComputationPartitioner& p, const HloInstruction& instr,
                               const HloSharding& sharding);
PartitionedValue HandleTranspose(ComputationPartitioner& p, const HloInstruction& instr,
                                 const HloSharding& sharding);
PartitionedValue HandleSliceLike(ComputationPartitioner& p, const HloInstruction& instr,
                                 const HloSharding& sharding);
PartitionedValue HandleDynamicSlice(ComputationPartitioner& p, const HloInstruction& instr,
                                    const HloSharding& sharding);
PartitionedValue HandleDynamicUpdateSlice(ComputationPartitioner& p, const HloInstruction& instr,
                                          const HloSharding& sharding);
PartitionedValue HandleReduce(ComputationPartitioner& p, const HloInstruction& instr,
                              const HloSharding& sharding);
PartitionedValue HandleRaggedDot(ComputationPartitioner& p, const HloInstruction& instr,
                                 const HloSharding& sharding);
PartitionedValue HandleDot(ComputationPartitioner& p, const HloInstruction& instr,
                           const HloSharding& sharding);
// Convolution (spmd_partitioner_convolution.cc): batch, output-feature and
// whole-group splits locally, contracted-feature splits summed, spatial
// splits with halos exchanged between neighbours.
PartitionedValue HandleConvolution(ComputationPartitioner& p, const HloInstruction& instr,
                                   const HloSharding& sharding);
PartitionedValue HandleGather(ComputationPartitioner& p, const HloInstruction& instr,
                              const HloSharding& sharding);
PartitionedValue HandleScatter(ComputationPartitioner& p, const HloInstruction& instr,
                               const HloSharding& sharding);
PartitionedValue HandleAttention(ComputationPartitioner& p, const HloInstruction& instr,
                                 const HloSharding& sharding);
// sort, topk (and the TopK custom call), reduce-window, select-and-scatter,
// bitcast-convert (spmd_partitioner_dimwise.cc): the dims the op computes
// along whole, the others split as the instruction is.
PartitionedValue HandleDimwise(ComputationPartitioner& p, const HloInstruction& instr,
                               const HloSharding& sharding);
// The op on pieces whose dims `whole` are whole and whose other dims are
// split as the (first leaf of the) instruction's sharding; scalar operands
// replicated; every result leaf laid out alike.
PartitionedValue HandleWithDimsWhole(ComputationPartitioner& p, const HloInstruction& instr,
                                     const HloSharding& sharding,
                                     const std::vector<int64_t>& whole);
// `sharding` replicated along `dims` (normalized).
HloSharding Unsplit(const HloSharding& sharding, const std::vector<int64_t>& dims);
// rng and rng-bit-generator (spmd_partitioner_random.cc): each device draws
// its tile of the unsharded value.
PartitionedValue HandleRandom(ComputationPartitioner& p, const HloInstruction& instr,
                              const HloSharding& sharding);
// Any op: operands replicated, the op on whole arrays, result replicated.
PartitionedValue HandleReplicated(ComputationPartitioner& p, const HloInstruction& instr);
// Manual regions (spmd_partitioner_manual.cc): whether `instr` is handled
// there (a Sharding custom call, a region edge, or of sharding {manual}),
// and its handler.
bool IsManualRegionOp(const HloInstruction& instr, const HloSharding& sharding);
PartitionedValue HandleManualRegionOp(ComputationPartitioner& p, const HloInstruction& instr,
                                      const HloSharding& sharding);
// Partly manual regions (spmd_partitioner_manual.cc). SPMDFullToShardShape
// of partly manual `sharding`: the operand resharded so that each device
// holds its local piece of its group's piece (ManualPiecesSharding), which
// is returned as each group sees it. Runs outside the groups.
PartitionedValue HandleFullToShardInGroups(ComputationPartitioner& p, const HloInstruction& instr,
                                           const HloSharding& sharding, const ManualGroups& groups);
// GroupLocalSharding and ManualPiecesSharding, their refusals naming `instr`.
HloSharding GroupLocalShardingOf(const HloInstruction& instr, const HloSharding& sharding,
                                 const ManualGroups& groups);
HloSharding ManualPiecesShardingOf(const HloInstruction& instr, const HloSharding& sharding,
                                   const Shape& full, const Shape& piece);
// Refuses, by name, what the partitioner cannot do inside a partly manual
// region. `entry`: parameters may be group-local (the entry's, or those
// of a computation a region calls).
void CheckPartitionableInRegion(const HloInstruction& instr, bool entry);
// An all-reduce (a psum over manual axes) or a collective-permute (a
// ppermute) written inside a partly manual region: copied as written on
// pieces laid out as `local` (as each group sees it), once each of its
// replica groups or source-target pairs is checked to join devices that
// hold the same tile.
PartitionedValue HandleCollectiveInRegion(ComputationPartitioner& p, const HloInstruction& instr,
                                          const HloSharding& local, const ManualGroups& groups);

// Whether reduce-scattering a value laid out by `partial` along dim e over
// `groups` yields `target` (group member k gets chunk k of dim e).
bool ScatterGives(const HloSharding& partial, const HloSharding& target, int64_t e,
                  const std::vector<std::vector<int64_t>>& groups, int64_t rank);

// Shared by the gather and scatter handlers (spmd_partitioner_gather.cc).

// ReshardCost, memoized (plan searches price the same moves many times).
class ReshardCostCache {
 public:
  explicit ReshardCostCache(PartitionContext* context) : context_(context) {}
  int64_t operator()(const Shape& base, const HloSharding& from, const HloSharding& to);

 private:
  PartitionContext* context_;
  std::map<std::string, int64_t> cache_;
};

// Summing partial results over groups of devices that each hold every
// partial once: one all-reduce (`groups`, then a reshard to the wanted
// sharding), or a chain of reduce-scatters, each along one dim the wanted
// sharding splits (over part of the devices still summing), followed, when
// devices remain that hold the same chunks, by an all-reduce of the chunks
// over `groups`. A weight gradient summed over (data, fsdp, tensor) and
// wanted split [fsdp, tensor] reduce-scatters over fsdp along one dim, over
// tensor along the other, then all-reduces the small shard over data. The
// cheapest by estimated bytes.
struct PartialSum {
  struct Scatter {
    int64_t dim = -1;
    std::vector<std::vector<int64_t>> groups;
  };
  std::vector<Scatter> scatters;             // in order
  std::vector<std::vector<int64_t>> groups;  // the all-reduce after them (empty: none)
  HloSharding result;                        // the sharding of the sum
  int64_t cost = 0;
};
PartialSum PlanPartialSum(ReshardCostCache& cost, const Shape& base, const HloSharding& partial,
                          const HloSharding& wanted,
                          const std::vector<std::vector<int64_t>>& groups);
HloInstruction* EmitPartialSum(SpmdBuilder& b, HloInstruction* partial, const PartialSum& sum);

// Index vectors (`indices`, the vector along `ivd`; ivd == rank: one
// component) into the device's tile of `operand`: component k indexes operand
// dim index_map[k] and, where that dim is split, loses the tile's offset.
// `clamp` first clamps such components into [0, size - 1] (a gather's
// one-wide slice). `in_tile` (optional) receives a pred over the index
// positions (indices dims but ivd): every shifted component within the tile.
// Components of `whole` dims (a gather's slice takes them whole, so their
// start clamps to 0 on every device) are left as they are.
HloInstruction* ShiftIndicesIntoTile(SpmdBuilder& b, HloInstruction* indices, int64_t ivd,
                                     const std::vector<int64_t>& index_map,
                                     const PartitionedValue& operand, bool clamp,
                                     HloInstruction** in_tile, std::span<const int64_t> whole = {});

// Emits `instr` again with new operands and result shape (same attributes,
// called computations cloned).
HloInstruction* EmitLike(ComputationPartitioner& p, const HloInstruction& instr,
                         std::vector<HloInstruction*> operands, Shape shape);

}  // namespace weft::spmd
