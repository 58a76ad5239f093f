// rng and rng-bit-generator. XLA partitions them by sharding the result and
// lets each device draw its own numbers, so a sharded run differs from the
// unsharded one. weft keeps the unsharded numbers: each device draws only
// its tile, at the tile's positions in the unsharded value (RngTileOf: the
// value's dims in the backend_config, the tile's start as operands; the
// executor draws each element from its position, eval_rng.cc), so the bits
// are the same sharded or not and no device draws the whole value. The
// state rng-bit-generator returns is the one after the whole value, on
// every device. A rng keeps the unsharded instruction's stream name.
#include "spmd_partitioner_handlers.h"
#include "weft/base/error.h"

namespace weft::spmd {

PartitionedValue HandleRandom(ComputationPartitioner& p, const HloInstruction& instr,
                              const HloSharding& sharding) {
  WEFT_CHECK(!RngTileOf(instr).has_value(),
             "{}: the module is already partitioned (its backend_config makes one tile of a "
             "sharded value); partition the unsharded module instead",
             instr.Describe());
  SpmdBuilder& b = p.b();
  const bool is_rng = instr.opcode() == HloOpcode::kRng;
  // A rng-bit-generator's (state, bits), or its bits alone.
  const bool with_state = instr.shape().IsTuple();
  const Shape& value = RngDrawnShape(instr);
  const HloSharding tiled =
      NormalizeSharding(sharding.IsTuple() ? sharding.tuple_elements().at(1) : sharding);
  const std::string stream = is_rng ? std::string(RngStreamName(instr)) : std::string();
  if (!tiled.IsTiled() || tiled.NumTiles() == 1) {  // drawn whole on every device
    PartitionedValue v = HandleReplicated(p, instr);
    if (is_rng) v.hlo->mutable_attrs().backend_config = RngStreamConfig(instr);
    return v;
  }
  std::vector<HloInstruction*> operands;
  for (int64_t i = 0; i < RngOwnOperandCount(instr); ++i) {
    operands.push_back(p.GetAs(instr.operand(i), HloSharding::Replicate()).hlo);
  }
  const Shape local = LocalShape(value, tiled);
  const std::vector<int64_t> tiles = TilesPerDim(tiled, value.rank());
  const HloSharding::TileIndices table = tiled.TileIndexTable(b.num_partitions());
  for (int64_t d = 0; d < value.rank(); ++d) {
    if (tiles[d] == 1) {
      operands.push_back(b.ConstantScalar(PrimitiveType::kS64, 0));
      continue;
    }
    std::vector<int64_t> starts(b.num_partitions());
    for (int64_t device = 0; device < b.num_partitions(); ++device) {
      starts[device] = table[device][d] * local.dimensions(d);
    }
    operands.push_back(b.Convert(b.DeviceValue(starts), PrimitiveType::kS64));
  }
  HloAttributes attrs = instr.attrs();
  attrs.backend_config = RngTileConfig(stream, value.dimensions());
  const Shape shape = with_state ? Shape::Tuple({instr.shape().tuple_shapes(0), local}) : local;
  HloInstruction* drawn =
      b.AddInstruction(instr.opcode(), std::move(operands), std::move(attrs), shape);
  return PartitionedValue{
      drawn, instr.shape(),
      with_state ? HloSharding::Tuple({HloSharding::Replicate(), tiled}) : tiled};
}

}  // namespace weft::spmd
