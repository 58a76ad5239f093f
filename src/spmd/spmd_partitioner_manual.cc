// Manual regions (jax.shard_map, torch_xla's manual sharding): a Sharding
// custom call reshards its operand to its sharding and disappears;
// SPMDFullToShardShape hands a tiled value's per-device piece to the region
// as a {manual} value; instructions of sharding {manual} are copied as
// written (their shapes are already per device; collectives inside keep
// their groups); SPMDShardToFullShape takes the pieces back as the full
// value of its tiled sharding. Nothing else enters or leaves a region.
//
// Partly manual regions (`last_tile_dims={manual}`, shard_map over some mesh
// axes): each manual group holds one piece of a region's edge values and
// runs the region over its automatic dims as an SPMD program of its own (the
// driver partitions the region's instructions with the builders set to the
// group, so collectives stay within each group). SPMDFullToShardShape and
// SPMDShardToFullShape cut and join the pieces by ManualPiecesSharding.
#include <algorithm>

#include "spmd_partitioner_handlers.h"
#include "weft/base/error.h"
#include "weft/hlo/custom_call_targets.h"

namespace weft::spmd {
namespace {

bool IsTarget(const HloInstruction& instr, const char* target) {
  return instr.opcode() == HloOpcode::kCustomCall && instr.attrs().custom_call_target == target;
}

// An operand of an instruction in a manual region: a manual value, or a
// replicated one (a constant the region reads: every device holds it whole),
// or a tuple of such leaves (a manual infeed's (data, token)).
HloInstruction* ManualOperand(ComputationPartitioner& p, const HloInstruction& instr, int64_t k) {
  const PartitionedValue& v = p.Get(instr.operand(k));
  const auto& leaves = v.sharding.tuple_elements();
  const bool whole =
      v.base.IsTuple()
          ? std::all_of(leaves.begin(), leaves.end(),
                        [](const HloSharding& e) { return e.IsManual() || e.IsReplicated(); })
          : v.sharding.IsReplicated();
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
  if (IsTarget(instr, kShardToFullTarget) && IsPartlyManual(ShardingOf(*instr.operand(0)))) {
    const PartitionedValue& v = p.Get(instr.operand(0));
    WEFT_CHECK(!v.base.IsTuple() && !sharding.IsTuple() && !sharding.IsManual() &&
                   !IsPartlyManual(sharding),
               "{} takes the pieces of a partly manual region back into a value of sharding "
               "{}; give it an array and a sharding without a manual subgroup",
               instr.Describe(), sharding.ToString());
    const HloSharding full = NormalizeSharding(
        ManualPiecesShardingOf(instr, ShardingOf(*instr.operand(0)), instr.shape(), v.base));
    WEFT_CHECK(LocalShape(instr.shape(), full) == v.hlo->shape(),
               "internal: {} joins pieces {} as {}", instr.Describe(), v.hlo->shape().ToString(),
               full.ToString());
    return PartitionedValue{v.hlo, instr.shape(), full};
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
  if (instr.opcode() == HloOpcode::kGetTupleElement) {
    // Only the element taken enters the region (a tuple parameter may hold
    // a manual leaf beside a tiled one).
    const PartitionedValue& t = p.Get(instr.operand(0));
    const HloSharding& leaf = t.sharding.tuple_elements().at(instr.tuple_index());
    WEFT_CHECK(leaf.IsManual() || leaf.IsReplicated(),
               "element {} of {}, taken by {} inside a manual region, has sharding {}; values "
               "enter a region through SPMDFullToShardShape",
               instr.tuple_index(), instr.operand(0)->Describe(), instr.Describe(),
               leaf.ToString());
    return PartitionedValue{p.b().GetTupleElement(t.hlo, instr.tuple_index()), instr.shape(),
                            sharding};
  }
  std::vector<HloInstruction*> operands;
  for (int64_t k = 0; k < instr.operand_count(); ++k)
    operands.push_back(ManualOperand(p, instr, k));
  return PartitionedValue{EmitLike(p, instr, std::move(operands), instr.shape()), instr.shape(),
                          sharding};
}

HloSharding GroupLocalShardingOf(const HloInstruction& instr, const HloSharding& sharding,
                                 const ManualGroups& groups) {
  try {
    return GroupLocalSharding(sharding, groups);
  } catch (const Error& e) {
    Fail("{}: {}", instr.Describe(), e.what());
  }
}

HloSharding ManualPiecesShardingOf(const HloInstruction& instr, const HloSharding& sharding,
                                   const Shape& full, const Shape& piece) {
  try {
    return ManualPiecesSharding(sharding, full, piece);
  } catch (const Error& e) {
    Fail("{}: {}", instr.Describe(), e.what());
  }
}

PartitionedValue HandleFullToShardInGroups(ComputationPartitioner& p, const HloInstruction& instr,
                                           const HloSharding& sharding,
                                           const ManualGroups& groups) {
  WEFT_CHECK(!sharding.IsTuple() && instr.shape().IsArray() && instr.operand_count() == 1,
             "{} enters a partly manual region with sharding {}; give it one array operand "
             "and an array sharding",
             instr.Describe(), sharding.ToString());
  const HloSharding pieces =
      ManualPiecesShardingOf(instr, sharding, instr.operand(0)->shape(), instr.shape());
  const PartitionedValue v = p.GetAs(instr.operand(0), pieces);
  const HloSharding local = GroupLocalShardingOf(instr, sharding, groups);
  WEFT_CHECK(LocalShape(instr.shape(), local) == v.hlo->shape(),
             "internal: {} cuts {} into {} for {}", instr.Describe(),
             instr.operand(0)->shape().ToString(), v.hlo->shape().ToString(), local.ToString());
  return PartitionedValue{v.hlo, instr.shape(), local};
}

void CheckPartitionableInRegion(const HloInstruction& instr, bool entry) {
  switch (instr.opcode()) {
    case HloOpcode::kParameter:
      // An entry parameter holds each manual group's own value, and so does
      // one of a loop or branch of a region.
      WEFT_CHECK(entry,
                 "{} is a parameter of partly manual sharding; values enter a region of a "
                 "called computation through SPMDFullToShardShape",
                 instr.Describe());
      break;
    case HloOpcode::kCall:
    case HloOpcode::kFusion:
    case HloOpcode::kRng:
    case HloOpcode::kRngBitGenerator:
    case HloOpcode::kPartitionId:
    case HloOpcode::kReplicaId:
    case HloOpcode::kAllGather:
    case HloOpcode::kAllToAll:
    case HloOpcode::kReduceScatter:
      Fail(
          "{}: {} inside a partly manual region is not supported by the partitioner (it "
          "partitions elementwise ops, shape ops, dot, reduce and the like within each "
          "manual group, and copies all-reduces); make the region manual over all devices",
          instr.Describe(), HloOpcodeString(instr.opcode()));
    default:
      break;
  }
  WEFT_CHECK(!IsTarget(instr, kShardToFullTarget),
             "{} has a partly manual sharding; SPMDShardToFullShape's sharding is the full "
             "value's",
             instr.Describe());
}

PartitionedValue HandleCollectiveInRegion(ComputationPartitioner& p, const HloInstruction& instr,
                                          const HloSharding& local, const ManualGroups& groups) {
  const HloAttributes& attrs = instr.attrs();
  const bool permute = instr.opcode() == HloOpcode::kCollectivePermute;
  const std::string_view op = permute ? "a collective-permute" : "an all-reduce";
  WEFT_CHECK(instr.operand_count() == 1 && instr.shape().IsArray() && attrs.channel_id &&
                 (permute || attrs.use_global_device_ids),
             "{}: {} inside a partly manual region needs one array operand, a channel_id{}",
             instr.Describe(), op,
             permute ? "" : " and use_global_device_ids=true (replica groups of device ids)");
  const PartitionedValue v = p.GetAs(instr.operand(0), local);
  // Every replica group (source-target pair) must join pieces of one tile.
  const int64_t num_devices = static_cast<int64_t>(groups.local_id.size());
  std::vector<std::vector<int64_t>> joined = attrs.replica_groups;
  if (permute) {
    joined.clear();
    for (const auto& [source, target] : attrs.source_target_pairs) {
      joined.push_back({source, target});
    }
  } else if (joined.empty()) {
    joined.emplace_back(num_devices);
    for (int64_t d = 0; d < num_devices; ++d) joined[0][d] = d;
  }
  if (local.IsTiled()) {
    const HloSharding::TileIndices table = local.TileIndexTable(groups.group_size());
    const int64_t rank = instr.shape().rank();
    for (const std::vector<int64_t>& group : joined) {
      for (int64_t device : group) {
        WEFT_CHECK(device >= 0 && device < num_devices,
                   "{}: device {} is not one of the {} devices", instr.Describe(), device,
                   num_devices);
        const int64_t* mine = table[groups.local_id[device]];
        const int64_t* first = table[groups.local_id[group[0]]];
        WEFT_CHECK(std::equal(mine, mine + rank, first),
                   "{}: devices {} and {} of one {} hold different tiles of the operand "
                   "(sharding {} within each manual group); {} in a partly manual region {} the "
                   "same tile across groups",
                   instr.Describe(), group[0], device,
                   permute ? "source-target pair" : "replica group", local.ToString(), op,
                   permute ? "moves" : "sums");
      }
    }
  }
  return PartitionedValue{EmitLike(p, instr, {v.hlo}, LocalShape(instr.shape(), local)),
                          instr.shape(), local};
}

}  // namespace weft::spmd
