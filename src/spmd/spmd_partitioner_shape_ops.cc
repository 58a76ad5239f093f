// Handlers for ops that move data within an array: broadcast, reshape,
// transpose, slice/pad/concatenate/reverse, dynamic-slice and
// dynamic-update-slice; and reduce.
#include <algorithm>

#include "spmd_partitioner_handlers.h"
#include "weft/base/algorithm.h"
#include "weft/base/error.h"
#include "weft/sharding/sharding_util.h"

namespace weft::spmd {
PartitionedValue HandleBroadcast(ComputationPartitioner& p, const HloInstruction& instr,
                                 const HloSharding& sharding) {
  const std::vector<int64_t>& mapping = instr.dimensions();
  const int64_t rank = instr.shape().rank();
  std::vector<int64_t> new_dims;
  for (int64_t d = 0; d < rank; ++d) {
    if (std::find(mapping.begin(), mapping.end(), d) == mapping.end()) new_dims.push_back(d);
  }
  // The operand follows the result on the dims it maps to; the new dims are
  // copies, so broadcasting the local piece straight to the local shape works.
  const HloSharding operand_sharding = NormalizeSharding(
      MapShardingDims(Unsplit(sharding, new_dims), mapping, instr.operand(0)->shape().rank()));
  PartitionedValue x = p.GetAs(instr.operand(0), operand_sharding);
  HloInstruction* result =
      p.b().Broadcast(x.hlo, LocalShape(instr.shape(), sharding).dimensions(), mapping);
  return PartitionedValue{result, instr.shape(), sharding};
}

PartitionedValue HandleReshape(ComputationPartitioner& p, const HloInstruction& instr,
                               const HloSharding& sharding) {
  const Shape& in_shape = instr.operand(0)->shape();
  const Shape& out_shape = instr.shape();
  const std::vector<int64_t>& in_dims = in_shape.dimensions();
  const std::vector<int64_t>& out_dims = out_shape.dimensions();
  const PartitionedValue& in = p.Get(instr.operand(0));
  auto local_fits = [&](const HloSharding& from, const HloSharding& to) {
    return Product(LocalShape(in_shape, from).dimensions()) ==
           Product(LocalShape(out_shape, to).dimensions());
  };
  auto emit = [&](const HloSharding& from, const HloSharding& to) {
    PartitionedValue x = p.GetAs(instr.operand(0), from);
    return PartitionedValue{p.b().Reshape(x.hlo, LocalShape(out_shape, to).dimensions()), out_shape,
                            to};
  };
  // Option 1: keep the operand's sharding; the result's follows from it.
  std::optional<HloSharding> forward =
      sharding_util::ReshapeSharding(in_dims, out_dims, in.sharding);
  if (forward) forward = NormalizeSharding(*forward);
  if (forward && !local_fits(in.sharding, *forward)) forward.reset();
  // Option 2: reshard the operand to the sharding that reshapes into ours.
  std::optional<HloSharding> backward = sharding_util::ReshapeSharding(out_dims, in_dims, sharding);
  if (backward) {
    backward = NormalizeSharding(*backward);
    std::optional<HloSharding> check = sharding_util::ReshapeSharding(in_dims, out_dims, *backward);
    if (!check || NormalizeSharding(*check) != sharding || !local_fits(*backward, sharding)) {
      backward.reset();
    }
  }
  if (forward && backward) {
    const int64_t forward_cost = ReshardCost(p.context(), out_shape, *forward, sharding);
    const int64_t backward_cost = ReshardCost(p.context(), in_shape, in.sharding, *backward);
    if (forward_cost <= backward_cost) return emit(in.sharding, *forward);
    return emit(*backward, sharding);
  }
  if (forward) return emit(in.sharding, *forward);
  if (backward) return emit(*backward, sharding);
  // No sharding survives the reshape: do it on the whole array.
  return emit(HloSharding::Replicate(), HloSharding::Replicate());
}

PartitionedValue HandleTranspose(ComputationPartitioner& p, const HloInstruction& instr,
                                 const HloSharding& sharding) {
  const std::vector<int64_t>& perm = instr.dimensions();
  std::vector<int64_t> inverse(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) inverse[perm[i]] = static_cast<int64_t>(i);
  const HloSharding operand_sharding =
      NormalizeSharding(sharding_util::TransposeSharding(sharding, inverse));
  PartitionedValue x = p.GetAs(instr.operand(0), operand_sharding);
  return PartitionedValue{p.b().Transpose(x.hlo, perm), instr.shape(), sharding};
}

PartitionedValue HandleSliceLike(ComputationPartitioner& p, const HloInstruction& instr,
                                 const HloSharding& sharding) {
  // Dims the op rearranges must be whole on every device; the others keep
  // the result's split.
  const int64_t rank = instr.shape().rank();
  const HloAttributes& a = instr.attrs();
  std::vector<int64_t> touched;
  for (int64_t d = 0; d < rank; ++d) {
    bool t = false;
    switch (instr.opcode()) {
      case HloOpcode::kSlice:
        t = !(a.slice[d].start == 0 && a.slice[d].stride == 1 &&
              a.slice[d].limit == instr.operand(0)->shape().dimensions(d));
        break;
      case HloOpcode::kPad:
        t = !(a.padding[d] == PadDim{});
        break;
      default:  // concatenate, reverse
        t = std::find(a.dimensions.begin(), a.dimensions.end(), d) != a.dimensions.end();
        break;
    }
    if (t) touched.push_back(d);
  }
  const HloSharding target = Unsplit(sharding, touched);
  std::vector<HloInstruction*> operands;
  for (const HloInstruction* op : instr.operands()) {
    const bool array_operand = op->shape().rank() == rank;
    operands.push_back(p.GetAs(op, array_operand ? target : HloSharding::Replicate()).hlo);
  }
  const Shape local = LocalShape(instr.shape(), target);
  if (instr.opcode() == HloOpcode::kSlice) {
    HloAttributes local_attrs;
    for (int64_t d = 0; d < rank; ++d) {
      const bool t = std::find(touched.begin(), touched.end(), d) != touched.end();
      local_attrs.slice.push_back(t ? a.slice[d] : SliceDim{0, local.dimensions(d), 1});
    }
    return PartitionedValue{
        p.b().AddInstruction(HloOpcode::kSlice, operands, std::move(local_attrs)), instr.shape(),
        target};
  }
  return PartitionedValue{EmitLike(p, instr, std::move(operands), local), instr.shape(), target};
}

namespace {

// Start indices for a local dynamic-(update-)slice: the given index on whole
// dims, 0 on split dims (the slice covers them entirely).
std::vector<HloInstruction*> LocalStarts(ComputationPartitioner& p, const HloInstruction& instr,
                                         int64_t first_index, const std::vector<int64_t>& touched) {
  std::vector<HloInstruction*> starts;
  const int64_t rank = instr.operand(0)->shape().rank();
  for (int64_t d = 0; d < rank; ++d) {
    const HloInstruction* index = instr.operand(first_index + d);
    if (std::find(touched.begin(), touched.end(), d) != touched.end()) {
      starts.push_back(p.GetAs(index, HloSharding::Replicate()).hlo);
    } else {
      starts.push_back(p.b().ConstantScalar(index->shape().element_type(), 0));
    }
  }
  return starts;
}

}  // namespace

PartitionedValue HandleDynamicSlice(ComputationPartitioner& p, const HloInstruction& instr,
                                    const HloSharding& sharding) {
  // Dims sliced partially must be whole; dims taken entirely keep their split
  // (the scan case: one layer of a stacked buffer split on its other dims).
  const Shape& operand_shape = instr.operand(0)->shape();
  const std::vector<int64_t>& sizes = instr.attrs().dynamic_slice_sizes;
  std::vector<int64_t> touched;
  for (int64_t d = 0; d < operand_shape.rank(); ++d) {
    if (sizes[d] != operand_shape.dimensions(d)) touched.push_back(d);
  }
  const HloSharding target = Unsplit(sharding, touched);
  PartitionedValue x = p.GetAs(instr.operand(0), target);
  std::vector<HloInstruction*> starts = LocalStarts(p, instr, 1, touched);
  HloInstruction* result =
      p.b().DynamicSlice(x.hlo, starts, LocalShape(instr.shape(), target).dimensions());
  return PartitionedValue{result, instr.shape(), target};
}

PartitionedValue HandleDynamicUpdateSlice(ComputationPartitioner& p, const HloInstruction& instr,
                                          const HloSharding& sharding) {
  const Shape& operand_shape = instr.operand(0)->shape();
  const Shape& update_shape = instr.operand(1)->shape();
  std::vector<int64_t> touched;
  for (int64_t d = 0; d < operand_shape.rank(); ++d) {
    if (update_shape.dimensions(d) != operand_shape.dimensions(d)) touched.push_back(d);
  }
  const HloSharding target = Unsplit(sharding, touched);
  PartitionedValue x = p.GetAs(instr.operand(0), target);
  PartitionedValue update = p.GetAs(instr.operand(1), target);
  return PartitionedValue{
      p.b().DynamicUpdateSlice(x.hlo, update.hlo, LocalStarts(p, instr, 2, touched)), instr.shape(),
      target};
}

PartitionedValue HandleReduce(ComputationPartitioner& p, const HloInstruction& instr,
                              const HloSharding& sharding) {
  if (instr.operand_count() != 2) return HandleReplicated(p, instr);
  SpmdBuilder& b = p.b();
  const Shape& in_shape = instr.operand(0)->shape();
  const std::vector<int64_t>& reduced = instr.dimensions();
  std::vector<int64_t> kept_to_in;  // result dim -> operand dim
  for (int64_t d = 0; d < in_shape.rank(); ++d) {
    if (std::find(reduced.begin(), reduced.end(), d) == reduced.end()) kept_to_in.push_back(d);
  }
  std::vector<int64_t> in_to_out(in_shape.rank(), -1);
  for (size_t i = 0; i < kept_to_in.size(); ++i) in_to_out[kept_to_in[i]] = static_cast<int64_t>(i);

  // Option A: reduce the operand as it is split, all-reduce the partial
  // results. Option B: reshard the operand so the result comes out as wanted
  // (reduced dims whole). Take the cheaper.
  const PartitionedValue& in = p.Get(instr.operand(0));
  const std::vector<int64_t> tiles = TilesPerDim(in.sharding, in_shape.rank());
  std::vector<int64_t> split_reduced;
  for (int64_t d : reduced) {
    if (tiles[d] > 1) split_reduced.push_back(d);
  }
  const HloSharding a_result = NormalizeSharding(
      sharding_util::RemoveShapeDimensions(Unsplit(in.sharding, split_reduced), reduced));
  const HloSharding b_operand =
      NormalizeSharding(MapShardingDims(sharding, in_to_out, in_shape.rank()));
  const std::vector<std::vector<int64_t>> groups =
      split_reduced.empty() ? std::vector<std::vector<int64_t>>{}
                            : GroupsAlongTileDims(in.sharding.tile_assignment(), split_reduced);
  // An add-reduce's local sums may be the addends its result wants.
  const bool keep = IsAddReducer(*instr.to_apply()) && KeepsAddends(p, a_result, groups);
  const int64_t result_bytes = LocalShape(instr.shape(), a_result).ByteSize();
  const int64_t cost_a = keep ? 0
                              : (split_reduced.empty() ? 0 : 2 * result_bytes) +
                                    ReshardCost(p.context(), instr.shape(), a_result, sharding);
  const int64_t cost_b = ReshardCost(p.context(), in_shape, in.sharding, b_operand);

  HloInstruction* init = p.GetAs(instr.operand(1), HloSharding::Replicate()).hlo;
  if (cost_b < cost_a) {
    PartitionedValue x = p.GetAs(instr.operand(0), b_operand);
    return PartitionedValue{EmitLike(p, instr, {x.hlo, init}, Shape()), instr.shape(), sharding};
  }
  HloInstruction* x = MaskPadding(b, in, split_reduced, init);
  HloInstruction* partial = EmitLike(p, instr, {x, init}, Shape());
  if (keep) return PartitionedValue{partial, instr.shape(), *p.unreduced_target()};
  if (!split_reduced.empty()) {
    partial = b.AllReduce(partial, p.CloneCalled(instr.to_apply()), groups);
  }
  return PartitionedValue{partial, instr.shape(), a_result};
}

}  // namespace weft::spmd
