// The attention custom calls (runtime/executor.h documents their operands).
// Batch and heads split locally (heads only when both Hq and Hkv divide by
// the split, so GQA groups stay on one device). A split query sequence keeps
// q local and gathers k, v and the named mask/score tensors along their
// sequence; the device's first global query position goes in as one extra
// s32[] operand, named in the backend_config as "q_offset_operand": <index>,
// so masks and score mods on q_idx see global positions, with "global_q_len"
// (the rows of an uneven last tile past it are padding). In the backward,
// dk/dv are partial sums over the query split: reduce-scattered back to the
// result's kv sharding, or all-reduced when that is not a scatter of them.
#include <nlohmann/json.hpp>

#include "spmd_partitioner_handlers.h"
#include "weft/base/error.h"
#include "weft/sharding/sharding_util.h"

namespace weft::spmd {
namespace {

const HloSharding& Element(const HloSharding& s, int64_t i) {
  return s.IsTuple() ? s.tuple_elements().at(i) : s;
}

}  // namespace

PartitionedValue HandleAttention(ComputationPartitioner& p, const HloInstruction& instr,
                                 const HloSharding& sharding) {
  SpmdBuilder& b = p.b();
  const bool backward = instr.attrs().custom_call_target == "weft.flex_attention_backward";
  WEFT_CHECK(instr.operand_count() >= (backward ? 6 : 3), "{}: attention needs q, k, v{} operands",
             instr.Describe(), backward ? ", out, lse, dout" : "");
  const Shape& q = instr.operand(0)->shape();
  const Shape& k = instr.operand(1)->shape();
  WEFT_CHECK(q.rank() == 4 && k.rank() == 4, "{}: q and k must be [B,H,S,D], got {} and {}",
             instr.Describe(), q.ToString(), k.ToString());
  nlohmann::json config = nlohmann::json::object();
  if (!instr.attrs().backend_config.empty()) {
    config = nlohmann::json::parse(instr.attrs().backend_config, nullptr, false);
    WEFT_CHECK(config.is_object(), "{}: backend_config is not a JSON object", instr.Describe());
  }
  const bool has_dlse = backward && config.value("has_dlse", false);

  // The query layout follows the result (out, or dq); D is never split.
  HloSharding q_target = Unsplit(Element(sharding, 0), {3});
  const std::vector<int64_t> tiles = TilesPerDim(q_target, 4);
  if (tiles[1] > 1 && (q.dimensions(1) % tiles[1] != 0 || k.dimensions(1) % tiles[1] != 0)) {
    q_target = Unsplit(q_target, {1});
  }
  const bool split_sequence = TilesPerDim(q_target, 4)[2] > 1;
  const HloSharding kv_target =
      NormalizeSharding(MapShardingDims(Unsplit(q_target, {2, 3}), {0, 1, -1, -1}, 4));
  const HloSharding lse_target = NormalizeSharding(MapShardingDims(q_target, {0, 1, 2}, 3));
  const HloSharding batch_only = Unsplit(q_target, {1, 2, 3});
  auto named_target = [&](const Shape& shape) {
    if (shape.rank() == 0 || shape.dimensions(0) != q.dimensions(0))
      return HloSharding::Replicate();
    std::vector<int64_t> map(shape.rank(), -1);
    map[0] = 0;
    return NormalizeSharding(MapShardingDims(batch_only, map, shape.rank()));
  };

  std::vector<HloInstruction*> operands;
  const int64_t fixed = backward ? (has_dlse ? 7 : 6) : 3;
  for (int64_t i = 0; i < instr.operand_count(); ++i) {
    const HloInstruction* op = instr.operand(i);
    HloSharding target;
    if (i == 1 || i == 2) {
      target = kv_target;
    } else if (i == 0 || (backward && (i == 3 || i == 5))) {
      target = q_target;
    } else if (backward && (i == 4 || (has_dlse && i == 6))) {
      target = lse_target;
    } else {
      WEFT_CHECK(i >= fixed, "internal: attention operand {}", i);
      target = named_target(op->shape());
    }
    operands.push_back(p.GetAs(op, target).hlo);
  }
  HloAttributes attrs = instr.attrs();
  if (split_sequence) {
    std::vector<int64_t> offsets(b.num_partitions());
    const int64_t local_sq = LocalShape(q, q_target).dimensions(2);
    const HloSharding::TileIndices table = q_target.TileIndexTable(b.num_partitions());
    for (int64_t d = 0; d < b.num_partitions(); ++d) offsets[d] = table[d][2] * local_sq;
    config["q_offset_operand"] = static_cast<int64_t>(operands.size());
    // Local rows at or past it are padding (the executor masks them).
    config["global_q_len"] = q.dimensions(2);
    operands.push_back(b.DeviceValue(offsets));
    attrs.backend_config = config.dump();
  }

  const Shape& result = instr.shape();
  std::vector<HloSharding> shardings;
  std::vector<Shape> locals;
  if (!backward) {
    const Shape& out = result.IsTuple() ? result.tuple_shapes(0) : result;
    shardings.push_back(q_target);
    locals.push_back(LocalShape(out, q_target));
    if (result.IsTuple()) {
      shardings.push_back(lse_target);
      locals.push_back(LocalShape(result.tuple_shapes(1), lse_target));
    }
  } else {
    shardings = {q_target, kv_target, kv_target};
    for (int64_t i = 0; i < 3; ++i)
      locals.push_back(LocalShape(result.tuple_shapes(i), shardings[i]));
  }
  const Shape local_shape = result.IsTuple() ? Shape::Tuple(locals) : locals[0];
  HloInstruction* call =
      b.AddInstruction(HloOpcode::kCustomCall, std::move(operands), std::move(attrs), local_shape);
  if (!result.IsTuple()) return PartitionedValue{call, result, shardings[0]};
  if (!backward || !split_sequence) {
    return PartitionedValue{call, result, HloSharding::Tuple(shardings)};
  }
  // dk, dv: sum the contributions of the devices that split the queries.
  const auto groups = GroupsAlongTileDims(q_target.tile_assignment(), {2});
  std::vector<HloInstruction*> elements;
  for (int64_t i = 0; i < 3; ++i) {
    HloInstruction* element = b.GetTupleElement(call, i);
    if (i == 0) {
      elements.push_back(element);
      continue;
    }
    HloComputation* add = b.ScalarReducer(HloOpcode::kAdd, element->shape().element_type());
    const HloSharding wanted = Element(sharding, i);
    if (ScatterGives(kv_target, wanted, 2, groups, 4)) {
      const int64_t g = static_cast<int64_t>(groups[0].size());
      const int64_t size = element->shape().dimensions(2);
      element = b.PadHigh(element, {0, 0, (size + g - 1) / g * g - size, 0});
      element = b.ReduceScatter(element, 2, add, groups);
      shardings[i] = wanted;
    } else {
      element = b.AllReduce(element, add, groups);
    }
    elements.push_back(element);
  }
  return PartitionedValue{b.Tuple(std::move(elements)), result, HloSharding::Tuple(shardings)};
}

}  // namespace weft::spmd
