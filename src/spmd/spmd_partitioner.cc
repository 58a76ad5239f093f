// The partitioner's driver: walks each computation, dispatches per opcode, and
// reshards every result to its instruction's sharding. Simple ops (parameter,
// constant, iota, tuple, get-tuple-element, while, conditional, elementwise)
// live here; the others in spmd_partitioner_<kind>.cc.
#include "weft/spmd/spmd_partitioner.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "spmd_partitioner_handlers.h"
#include "weft/base/algorithm.h"
#include "weft/base/error.h"
#include "weft/hlo/block_scaled_dot.h"
#include "weft/hlo/custom_call_targets.h"
#include "weft/hlo/verifier.h"

namespace weft::spmd {

HloSharding ShardingOf(const HloInstruction& instr) {
  const Shape& shape = instr.shape();
  const std::optional<HloSharding> given = instr.ResultSharding();
  if (shape.IsTuple()) {
    for (const Shape& e : shape.tuple_shapes()) {
      WEFT_CHECK(!e.IsTuple(),
                 "{}: nested tuple {} is not supported by the partitioner; flatten it",
                 instr.Describe(), shape.ToString());
    }
    if (!given || !given->IsTuple()) {
      const HloSharding leaf = given ? NormalizeSharding(*given) : HloSharding::Replicate();
      WEFT_CHECK(leaf.IsReplicated() || leaf.IsManual(),
                 "{}: tiled sharding {} on tuple shape; give one per element", instr.Describe(),
                 leaf.ToString());
      return HloSharding::Tuple(std::vector<HloSharding>(shape.tuple_shapes().size(), leaf));
    }
  }
  if (!given) return HloSharding::Replicate();
  try {
    return NormalizeSharding(*given);
  } catch (const Error& e) {
    Fail("{}: {}", instr.Describe(), e.what());
  }
}

Shape LocalShapeOf(const Shape& base, const HloSharding& sharding) {
  if (!base.IsTuple()) return LocalShape(base, sharding);
  std::vector<Shape> elements;
  for (size_t i = 0; i < base.tuple_shapes().size(); ++i) {
    elements.push_back(LocalShape(base.tuple_shapes(i), sharding.tuple_elements().at(i)));
  }
  return Shape::Tuple(std::move(elements));
}

PartitionedValue ReshardAny(SpmdBuilder& b, const PartitionedValue& v, const HloSharding& target) {
  if (!v.base.IsTuple()) return Reshard(b, v, target);
  if (v.sharding == target) return v;
  std::vector<HloInstruction*> elements;
  std::vector<HloSharding> shardings;
  bool changed = false;
  for (int64_t i = 0; i < static_cast<int64_t>(v.base.tuple_shapes().size()); ++i) {
    HloInstruction* element = nullptr;
    if (v.hlo->opcode() == HloOpcode::kTuple) {
      element = v.hlo->operand(i);
    } else {
      element = b.GetTupleElement(v.hlo, i);
    }
    PartitionedValue e{element, v.base.tuple_shapes(i), v.sharding.tuple_elements().at(i)};
    PartitionedValue r = Reshard(b, e, target.tuple_elements().at(i));
    changed = changed || r.hlo != e.hlo;
    elements.push_back(r.hlo);
    shardings.push_back(r.sharding);
  }
  if (!changed) return PartitionedValue{v.hlo, v.base, target};
  return PartitionedValue{b.Tuple(std::move(elements)), v.base,
                          HloSharding::Tuple(std::move(shardings))};
}

// ---------------------------------------------------------------------------

ComputationPartitioner::ComputationPartitioner(PartitionContext* context,
                                               const HloComputation& source, std::string name,
                                               std::vector<HloSharding> param_shardings,
                                               std::optional<HloSharding> root_sharding,
                                               bool is_entry)
    : context_(context),
      source_(source),
      b_(std::move(name), context),
      param_shardings_(std::move(param_shardings)),
      root_sharding_(std::move(root_sharding)),
      is_entry_(is_entry),
      called_in_region_(context->manual_groups != nullptr) {}

const PartitionedValue& ComputationPartitioner::Get(const HloInstruction* operand) const {
  auto it = values_.find(operand);
  WEFT_CHECK(it != values_.end(), "internal: {} used before it was partitioned",
             operand->Describe());
  return it->second;
}

PartitionedValue ComputationPartitioner::GetAs(const HloInstruction* operand,
                                               const HloSharding& sharding) {
  const HloSharding target = NormalizeSharding(sharding);
  const PartitionedValue& value = Get(operand);
  PartitionedValue v = ReshardAny(b_, value, target);
  // Inside a manual region a sharding is as each group sees it: not noted.
  if (v.hlo != value.hlo && context_->manual_groups == nullptr && !HasReshard(operand, target)) {
    reshards_[operand].push_back(target);
  }
  return v;
}

bool ComputationPartitioner::HasReshard(const HloInstruction* operand,
                                        const HloSharding& sharding) const {
  if (context_->manual_groups != nullptr) return false;
  auto it = reshards_.find(operand);
  return it != reshards_.end() && Contains(it->second, NormalizeSharding(sharding));
}

HloComputation* ComputationPartitioner::CloneCalled(const HloComputation* computation) {
  auto it = context_->clones.find(computation);
  if (it != context_->clones.end()) return it->second;
  auto clone = std::make_unique<HloComputation>(computation->name());
  std::unordered_map<const HloInstruction*, HloInstruction*> map;
  for (const HloInstruction* instr : computation->instructions()) {
    std::vector<HloInstruction*> operands;
    for (const HloInstruction* op : instr->operands()) operands.push_back(map.at(op));
    std::vector<HloComputation*> called;
    for (const HloComputation* c : instr->called_computations()) called.push_back(CloneCalled(c));
    auto copy = HloInstruction::Create(instr->opcode(), instr->shape(), std::move(operands),
                                       instr->attrs(), std::move(called), instr->name());
    map[instr] = clone->AddInstruction(std::move(copy));
  }
  clone->set_root_instruction(map.at(computation->root_instruction()));
  HloComputation* added = context_->module->AddComputation(std::move(clone));
  context_->clones[computation] = added;
  return added;
}

HloInstruction* EmitLike(ComputationPartitioner& p, const HloInstruction& instr,
                         std::vector<HloInstruction*> operands, Shape shape) {
  std::vector<HloComputation*> called;
  for (const HloComputation* c : instr.called_computations()) called.push_back(p.CloneCalled(c));
  return p.b().AddInstruction(instr.opcode(), std::move(operands), instr.attrs(), std::move(shape),
                              std::move(called));
}

namespace {

HloSharding ReplicatedLike(const Shape& shape) {
  if (!shape.IsTuple()) return HloSharding::Replicate();
  return HloSharding::Tuple(
      std::vector<HloSharding>(shape.tuple_shapes().size(), HloSharding::Replicate()));
}

PartitionedValue HandleIota(ComputationPartitioner& p, const HloInstruction& instr,
                            const HloSharding& sharding) {
  SpmdBuilder& b = p.b();
  const Shape local = LocalShape(instr.shape(), sharding);
  const int64_t dim = instr.attrs().iota_dimension;
  HloInstruction* iota = b.Iota(local, dim);
  const std::vector<int64_t> tiles = TilesPerDim(sharding, instr.shape().rank());
  if (tiles[dim] > 1) {
    std::vector<int64_t> offsets(b.num_partitions());
    const HloSharding::TileIndices table = sharding.TileIndexTable(b.num_partitions());
    for (int64_t d = 0; d < b.num_partitions(); ++d) {
      offsets[d] = table[d][dim] * local.dimensions(dim);
    }
    HloInstruction* offset = b.Convert(b.DeviceValue(offsets), local.element_type());
    iota = b.Binary(HloOpcode::kAdd, iota, b.BroadcastScalar(offset, local.dimensions()));
  }
  return PartitionedValue{iota, instr.shape(), sharding};
}

PartitionedValue HandleWhile(ComputationPartitioner& p, const HloInstruction& instr,
                             const HloSharding& sharding) {
  PartitionContext* context = p.context();
  PartitionedValue init = p.GetAs(instr.operand(0), sharding);
  HloComputation* condition = context->module->AddComputation(
      ComputationPartitioner(context, *instr.while_condition(), instr.while_condition()->name(),
                             {sharding}, HloSharding::Replicate(), false)
          .Run());
  HloComputation* body = context->module->AddComputation(
      ComputationPartitioner(context, *instr.while_body(), instr.while_body()->name(), {sharding},
                             sharding, false)
          .Run());
  // The backend_config stays (a scan's structure, its offloaded state).
  HloAttributes attrs;
  attrs.backend_config = instr.attrs().backend_config;
  HloInstruction* loop = p.b().AddInstruction(HloOpcode::kWhile, {init.hlo}, std::move(attrs),
                                              init.hlo->shape(), {condition, body});
  return PartitionedValue{loop, instr.shape(), sharding};
}

// Each branch partitioned as a computation of its own: its parameter as
// propagation sharded it (its argument resharded to that), its root to the
// conditional's sharding, so every branch returns the same local shape. The
// selector is replicated: every device takes the same branch.
PartitionedValue HandleConditional(ComputationPartitioner& p, const HloInstruction& instr,
                                   const HloSharding& sharding) {
  PartitionContext* context = p.context();
  std::vector<HloInstruction*> operands = {p.GetAs(instr.operand(0), HloSharding::Replicate()).hlo};
  std::vector<HloComputation*> branches;
  for (size_t i = 0; i < instr.called_computations().size(); ++i) {
    const HloComputation& branch = *instr.called_computations()[i];
    // In a partly manual region, as each manual group sees it.
    HloSharding param = ShardingOf(*branch.parameter_instruction(0));
    if (context->manual_groups != nullptr && IsPartlyManual(param)) {
      param =
          GroupLocalShardingOf(*branch.parameter_instruction(0), param, *context->manual_groups);
    }
    operands.push_back(p.GetAs(instr.operand(i + 1), param).hlo);
    branches.push_back(context->module->AddComputation(
        ComputationPartitioner(context, branch, branch.name(), {param}, sharding, false).Run()));
  }
  HloAttributes attrs;
  attrs.backend_config = instr.attrs().backend_config;
  HloInstruction* conditional =
      p.b().AddInstruction(HloOpcode::kConditional, std::move(operands), std::move(attrs),
                           LocalShapeOf(instr.shape(), sharding), std::move(branches));
  return PartitionedValue{conditional, instr.shape(), sharding};
}

}  // namespace

PartitionedValue HandleElementwise(ComputationPartitioner& p, const HloInstruction& instr,
                                   const HloSharding& sharding) {
  std::vector<HloInstruction*> operands;
  for (const HloInstruction* op : instr.operands()) {
    // Scalar operands of select/clamp stay whole.
    const bool scalar = op->shape().rank() == 0 && instr.shape().rank() > 0;
    operands.push_back(p.GetAs(op, scalar ? HloSharding::Replicate() : sharding).hlo);
  }
  return PartitionedValue{
      EmitLike(p, instr, std::move(operands), LocalShape(instr.shape(), sharding)), instr.shape(),
      sharding};
}

namespace {

// An all-reduce outside the manual regions, as XLA's partitioner takes it.
// Without a channel_id it sums across replicas (each partition's value with
// the same partition's of the other replicas): elementwise, and with one
// replica the identity, so the partitioned program passes the piece on
// (weft's executor reads a channel-less all-reduce of a one-replica program
// as one across its devices). With a channel_id it sums across partitions,
// which before partitioning only a replicated value can: every device sums
// its whole copy with its group's, as written.
PartitionedValue HandleAllReduce(ComputationPartitioner& p, const HloInstruction& instr,
                                 const HloSharding& sharding) {
  const HloAttributes& a = instr.attrs();
  WEFT_CHECK(instr.operand_count() == 1 && instr.shape().IsArray(),
             "{}: an all-reduce outside a manual region takes one array (XLA's rule); put a "
             "variadic one inside a manual region (SPMDFullToShardShape)",
             instr.Describe());
  if (!a.channel_id) {
    WEFT_CHECK(p.context()->module->replica_count() <= 1,
               "{}: a cross-replica all-reduce (no channel_id) in a module of {} replicas is not "
               "partitioned; weft partitions modules of one replica",
               instr.Describe(), p.context()->module->replica_count());
    return p.GetAs(instr.operand(0), sharding);
  }
  WEFT_CHECK(sharding.IsReplicated(),
             "{}: a cross-partition all-reduce (channel_id) outside a manual region sums whole "
             "values, so its sharding must be replicated, not {} (XLA's rule); put it inside a "
             "manual region (SPMDFullToShardShape) to sum pieces",
             instr.Describe(), sharding.ToString());
  HloInstruction* operand = p.GetAs(instr.operand(0), HloSharding::Replicate()).hlo;
  HloInstruction* sum = EmitLike(p, instr, {operand}, instr.shape());
  sum->mutable_attrs().channel_id = p.context()->next_channel_id++;
  return PartitionedValue{sum, instr.shape(), HloSharding::Replicate()};
}

}  // namespace

PartitionedValue HandleReplicated(ComputationPartitioner& p, const HloInstruction& instr) {
  std::vector<HloInstruction*> operands;
  for (const HloInstruction* op : instr.operands()) {
    operands.push_back(p.GetAs(op, ReplicatedLike(op->shape())).hlo);
  }
  return PartitionedValue{EmitLike(p, instr, std::move(operands), instr.shape()), instr.shape(),
                          ReplicatedLike(instr.shape())};
}

// Devices grouped by the unpadded extents of their tiles of `leaves`
// (each under its sharding): an uneven tile is fed or drained through a
// conditional with one branch per extent, as XLA's partitioner does.
struct FeedBranches {
  std::vector<int64_t> branch_of_device;
  std::vector<std::vector<Shape>> extents;  // per branch, per leaf
};

FeedBranches BranchesByExtent(const std::vector<Shape>& leaves,
                              const std::vector<HloSharding>& shardings, int64_t n) {
  FeedBranches out;
  std::map<std::vector<std::vector<int64_t>>, int64_t> index;
  for (int64_t device = 0; device < n; ++device) {
    std::vector<std::vector<int64_t>> key;
    std::vector<Shape> shapes;
    for (size_t i = 0; i < leaves.size(); ++i) {
      const HloSharding& s = shardings[i];
      const auto& dims = leaves[i].dimensions();
      key.push_back(s.IsTiled() ? s.TileShapeForDevice(dims, device)
                                : std::vector<int64_t>(dims.begin(), dims.end()));
      shapes.push_back(leaves[i].WithDimensions(key.back()));
    }
    auto [it, added] = index.emplace(key, static_cast<int64_t>(out.extents.size()));
    if (added) out.extents.push_back(std::move(shapes));
    out.branch_of_device.push_back(it->second);
  }
  return out;
}

// The data leaves of an infeed or outfeed and their shardings (from a
// sharding over (data leaves..., token) or over the data alone; none: whole
// on every device). Manual leaves stay as written.
std::vector<HloSharding> FeedLeafShardings(const HloInstruction& instr, const Shape& data) {
  const size_t count = static_cast<size_t>(data.LeafCount());
  std::vector<HloSharding> out(count, HloSharding::Replicate());
  if (!instr.has_sharding()) return out;
  const HloSharding& s = *instr.sharding();
  if (!s.IsTuple()) {
    if (data.IsArray()) out[0] = NormalizeSharding(s);
    return out;
  }
  for (size_t i = 0; i < count && i < s.tuple_elements().size(); ++i) {
    out[i] = NormalizeSharding(s.tuple_elements()[i]);
  }
  return out;
}

HloInstruction* DataTuple(SpmdBuilder& b, const std::vector<HloInstruction*>& leaves,
                          bool is_tuple) {
  return is_tuple ? b.Tuple(leaves) : leaves[0];
}

// infeed: each device infeeds its own tile of the data, as XLA does; an
// uneven tile infeeds its unpadded piece (a branch per extent) and pads it.
// A {manual} leaf is each device's own value, infed as written.
PartitionedValue HandleInfeed(ComputationPartitioner& p, const HloInstruction& instr) {
  WEFT_CHECK(p.context()->manual_groups == nullptr,
             "{}: an infeed inside a partly manual region is not partitioned; infeed outside it "
             "and enter the region through SPMDFullToShardShape",
             instr.Describe());
  SpmdBuilder& b = p.b();
  const Shape& data = instr.shape().tuple_shapes(0);
  const std::vector<Shape> leaves = data.Leaves();
  const std::vector<HloSharding> shardings = FeedLeafShardings(instr, data);
  std::vector<Shape> local;
  for (size_t i = 0; i < leaves.size(); ++i) {
    local.push_back(shardings[i].IsManual() ? leaves[i] : LocalShape(leaves[i], shardings[i]));
  }
  const Shape token_shape = Shape::Scalar(PrimitiveType::kToken);
  auto data_shape = [&](const std::vector<Shape>& shapes) {
    return data.IsTuple() ? Shape::Tuple(shapes) : shapes[0];
  };
  const Shape result = Shape::Tuple({data_shape(local), token_shape});
  HloInstruction* token = p.GetAs(instr.operand(0), HloSharding::Replicate()).hlo;
  const FeedBranches branches = BranchesByExtent(leaves, shardings, b.num_partitions());
  HloInstruction* fed = nullptr;
  if (branches.extents.size() == 1) {
    fed = EmitLike(p, instr, {token}, result);
  } else {
    std::vector<HloComputation*> called;
    for (size_t k = 0; k < branches.extents.size(); ++k) {
      SpmdBuilder bb(fmt::format("{}.branch{}", instr.name(), k), p.context());
      HloInstruction* t = bb.Parameter(0, token_shape, "token");
      const std::vector<Shape>& extent = branches.extents[k];
      HloInstruction* piece = bb.AddInstruction(HloOpcode::kInfeed, {t}, instr.attrs(),
                                                Shape::Tuple({data_shape(extent), token_shape}));
      HloInstruction* got = bb.GetTupleElement(piece, 0);
      std::vector<HloInstruction*> padded;
      for (size_t i = 0; i < leaves.size(); ++i) {
        HloInstruction* leaf = data.IsTuple() ? bb.GetTupleElement(got, i) : got;
        std::vector<int64_t> high;
        for (int64_t d = 0; d < local[i].rank(); ++d) {
          high.push_back(local[i].dimensions(d) - extent[i].dimensions(d));
        }
        padded.push_back(bb.PadHigh(leaf, high));
      }
      HloInstruction* root =
          bb.Tuple({DataTuple(bb, padded, data.IsTuple()), bb.GetTupleElement(piece, 1)});
      called.push_back(p.context()->module->AddComputation(bb.Build(root)));
    }
    std::vector<HloInstruction*> operands = {b.DeviceValue(branches.branch_of_device)};
    operands.insert(operands.end(), called.size(), token);
    fed = b.AddInstruction(HloOpcode::kConditional, std::move(operands), {}, result,
                           std::move(called));
  }
  std::vector<HloSharding> out = shardings;
  out.push_back(HloSharding::Replicate());
  return PartitionedValue{fed, instr.shape(), HloSharding::Tuple(std::move(out))};
}

// outfeed: each device outfeeds its tile of the data, as XLA does, under a
// data sharding (a data-only or a (data, token) one, HloInstruction::
// ShardingShape); data without one is outfed whole by every device. An
// unevenly tiled leaf is outfed as its unpadded piece, through a
// conditional with one branch per extent, as XLA does.
PartitionedValue HandleOutfeed(ComputationPartitioner& p, const HloInstruction& instr) {
  SpmdBuilder& b = p.b();
  const HloInstruction* data = instr.operand(0);
  const Shape& shape = data->shape();
  HloSharding data_sharding = ReplicatedLike(shape);
  const Shape covered = instr.ShardingShape();
  if (instr.has_sharding() && covered == shape) {
    data_sharding = *instr.sharding();
  } else if (instr.has_sharding() && covered.IsTuple() && covered != instr.shape()) {
    const std::vector<HloSharding>& all = instr.sharding()->tuple_elements();
    data_sharding = shape.IsArray() ? all[0]
                                    : HloSharding::Tuple(std::vector<HloSharding>(
                                          all.begin(), all.begin() + shape.LeafCount()));
  }
  const std::vector<Shape> leaves = shape.Leaves();
  std::vector<HloSharding> shardings;
  for (size_t i = 0; i < leaves.size(); ++i) {
    const HloSharding& leaf =
        data_sharding.IsTuple() ? data_sharding.tuple_elements()[i] : data_sharding;
    shardings.push_back(leaf.IsManualOrPartlyManual() ? HloSharding::Replicate()
                                                      : NormalizeSharding(leaf));
  }
  HloInstruction* local = p.GetAs(data, data_sharding).hlo;
  HloInstruction* token = p.GetAs(instr.operand(1), HloSharding::Replicate()).hlo;
  const FeedBranches branches =
      p.context()->manual_groups != nullptr
          ? FeedBranches{std::vector<int64_t>(b.num_partitions(), 0), {leaves}}
          : BranchesByExtent(leaves, shardings, b.num_partitions());
  if (branches.extents.size() == 1) {
    HloInstruction* out = EmitLike(p, instr, {local, token}, instr.shape());
    for (auto& [key, value] : out->mutable_attrs().passthrough) {
      if (key == "outfeed_shape") value = local->shape().ToString();
    }
    return PartitionedValue{out, instr.shape(), HloSharding::Replicate()};
  }
  std::vector<HloInstruction*> local_leaves;
  for (size_t i = 0; i < leaves.size(); ++i) {
    local_leaves.push_back(shape.IsTuple() ? b.GetTupleElement(local, i) : local);
  }
  std::vector<Shape> carried;
  for (HloInstruction* leaf : local_leaves) carried.push_back(leaf->shape());
  carried.push_back(token->shape());
  std::vector<HloInstruction*> packed = local_leaves;
  packed.push_back(token);
  HloInstruction* operand = b.Tuple(packed);
  std::vector<HloComputation*> called;
  for (size_t k = 0; k < branches.extents.size(); ++k) {
    SpmdBuilder bb(fmt::format("{}.branch{}", instr.name(), k), p.context());
    HloInstruction* param = bb.Parameter(0, Shape::Tuple(carried), "piece");
    std::vector<HloInstruction*> pieces;
    for (size_t i = 0; i < leaves.size(); ++i) {
      const Shape& extent = branches.extents[k][i];
      pieces.push_back(bb.Slice(bb.GetTupleElement(param, i),
                                std::vector<int64_t>(extent.rank(), 0), extent.dimensions()));
    }
    HloInstruction* piece = DataTuple(bb, pieces, shape.IsTuple());
    HloAttributes attrs = instr.attrs();
    for (auto& [key, value] : attrs.passthrough) {
      if (key == "outfeed_shape") value = piece->shape().ToString();
    }
    HloInstruction* out =
        bb.AddInstruction(HloOpcode::kOutfeed, {piece, bb.GetTupleElement(param, leaves.size())},
                          std::move(attrs), instr.shape());
    called.push_back(p.context()->module->AddComputation(bb.Build(out)));
  }
  std::vector<HloInstruction*> operands = {b.DeviceValue(branches.branch_of_device)};
  operands.insert(operands.end(), called.size(), operand);
  HloInstruction* out = b.AddInstruction(HloOpcode::kConditional, std::move(operands), {},
                                         instr.shape(), std::move(called));
  return PartitionedValue{out, instr.shape(), HloSharding::Replicate()};
}

PartitionedValue ComputationPartitioner::Partition(const HloInstruction& instr,
                                                   const HloSharding& sharding) {
  if (IsManualRegionOp(instr, sharding)) return HandleManualRegionOp(*this, instr, sharding);
  switch (instr.opcode()) {
    case HloOpcode::kParameter: {
      const int64_t number = instr.parameter_number();
      const HloSharding given = is_entry_ ? sharding : param_shardings_.at(number);
      HloInstruction* param =
          b_.Parameter(number, LocalShapeOf(instr.shape(), given), instr.name());
      if (is_entry_ && instr.has_sharding()) param->set_sharding(*instr.sharding());
      return PartitionedValue{param, instr.shape(), given};
    }
    case HloOpcode::kConstant:
      return PartitionedValue{EmitLike(*this, instr, {}, instr.shape()), instr.shape(),
                              HloSharding::Replicate()};
    case HloOpcode::kOutfeed:
      return HandleOutfeed(*this, instr);
    case HloOpcode::kInfeed:
      return HandleInfeed(*this, instr);
    case HloOpcode::kIota:
      return HandleIota(*this, instr, sharding);
    case HloOpcode::kTuple: {
      std::vector<HloInstruction*> elements;
      std::vector<HloSharding> shardings;
      for (const HloInstruction* op : instr.operands()) {
        const PartitionedValue& v = Get(op);
        WEFT_CHECK(!v.base.IsTuple(), "{}: nested tuples are not supported; flatten them",
                   instr.Describe());
        elements.push_back(v.hlo);
        shardings.push_back(v.sharding);
      }
      return PartitionedValue{b_.Tuple(std::move(elements)), instr.shape(),
                              HloSharding::Tuple(std::move(shardings))};
    }
    case HloOpcode::kGetTupleElement: {
      const PartitionedValue& t = Get(instr.operand(0));
      const int64_t i = instr.tuple_index();
      if (t.hlo->opcode() == HloOpcode::kTuple) {
        return PartitionedValue{t.hlo->operand(i), instr.shape(), t.sharding.tuple_elements()[i]};
      }
      return PartitionedValue{b_.GetTupleElement(t.hlo, i), instr.shape(),
                              t.sharding.tuple_elements().at(i)};
    }
    case HloOpcode::kWhile:
      return HandleWhile(*this, instr, sharding);
    case HloOpcode::kConditional:
      return HandleConditional(*this, instr, sharding);
    case HloOpcode::kRng:
    case HloOpcode::kRngBitGenerator:
      return HandleRandom(*this, instr, sharding);
    case HloOpcode::kBroadcast:
      return HandleBroadcast(*this, instr, sharding);
    case HloOpcode::kReshape:
      return HandleReshape(*this, instr, sharding);
    case HloOpcode::kTranspose:
      return HandleTranspose(*this, instr, sharding);
    case HloOpcode::kSlice:
    case HloOpcode::kPad:
    case HloOpcode::kConcatenate:
    case HloOpcode::kReverse:
      return HandleSliceLike(*this, instr, sharding);
    case HloOpcode::kDynamicSlice:
      return HandleDynamicSlice(*this, instr, sharding);
    case HloOpcode::kDynamicUpdateSlice:
      return HandleDynamicUpdateSlice(*this, instr, sharding);
    case HloOpcode::kReduce:
      return HandleReduce(*this, instr, sharding);
    case HloOpcode::kDot:
      return HandleDot(*this, instr, sharding);
    case HloOpcode::kRaggedDot:
      return HandleRaggedDot(*this, instr, sharding);
    case HloOpcode::kConvolution:
      return HandleConvolution(*this, instr, sharding);
    case HloOpcode::kGather:
      return HandleGather(*this, instr, sharding);
    case HloOpcode::kScatter:
      return HandleScatter(*this, instr, sharding);
    case HloOpcode::kSort:
    case HloOpcode::kTopK:
    case HloOpcode::kCholesky:
    case HloOpcode::kTriangularSolve:
    case HloOpcode::kReduceWindow:
    case HloOpcode::kSelectAndScatter:
    case HloOpcode::kBitcastConvert:
      return HandleDimwise(*this, instr, sharding);
    case HloOpcode::kCustomCall:
      if (instr.attrs().custom_call_target == kTopKTarget)
        return HandleDimwise(*this, instr, sharding);
      if (IsBlockScaledDot(instr)) {
        CheckBlockScaledDot(instr);
        return HandleDot(*this, instr, sharding);
      }
      if (instr.attrs().custom_call_target == "weft.flex_attention" ||
          instr.attrs().custom_call_target == "weft.flex_attention_backward") {
        return HandleAttention(*this, instr, sharding);
      }
      if (IsMemorySpaceMoveTarget(instr.attrs().custom_call_target) && instr.operand_count() == 1 &&
          instr.shape().IsArray() && instr.operand(0)->shape() == instr.shape()) {
        return HandleElementwise(*this, instr, sharding);
      }
      return HandleReplicated(*this, instr);
    case HloOpcode::kAllReduce:
      return HandleAllReduce(*this, instr, sharding);
    case HloOpcode::kPartitionId:
    case HloOpcode::kReplicaId:
    case HloOpcode::kAllGather:
    case HloOpcode::kAllToAll:
    case HloOpcode::kCollectivePermute:
    case HloOpcode::kReduceScatter:
      Fail(
          "{}: the module is already partitioned (it contains {}); partition the unsharded "
          "module instead",
          instr.Describe(), HloOpcodeString(instr.opcode()));
    default:
      if (IsElementwise(instr.opcode())) return HandleElementwise(*this, instr, sharding);
      return HandleReplicated(*this, instr);
  }
}

namespace {

bool IsTarget(const HloInstruction& instr, const char* target) {
  return instr.opcode() == HloOpcode::kCustomCall && instr.attrs().custom_call_target == target;
}

// Sets the builders' manual groups for one instruction of a region.
class InManualGroups {
 public:
  InManualGroups(PartitionContext* context, const ManualGroups* groups)
      : context_(context), saved_(context->manual_groups) {
    context_->manual_groups = groups;
  }
  ~InManualGroups() { context_->manual_groups = saved_; }
  InManualGroups(const InManualGroups&) = delete;
  InManualGroups& operator=(const InManualGroups&) = delete;

 private:
  PartitionContext* context_;
  const ManualGroups* saved_;
};

}  // namespace

void ComputationPartitioner::CheckRegionEdges(const HloInstruction& instr, bool in_region) const {
  const bool enters = IsTarget(instr, kFullToShardTarget);
  const bool leaves = IsTarget(instr, kShardToFullTarget);
  for (int64_t k = 0; k < instr.operand_count(); ++k) {
    const HloInstruction* op = instr.operand(k);
    const bool local = group_local_.count(op) > 0;
    if (enters) {
      WEFT_CHECK(!local,
                 "{} takes {}, a value already inside a partly manual region; regions do not "
                 "nest",
                 instr.Describe(), op->Describe());
    } else if (in_region && !leaves) {
      WEFT_CHECK(local || Get(op).sharding.IsReplicated(),
                 "operand {} of {} (in a partly manual region) is {} of sharding {}, from "
                 "outside the region; values enter a region through SPMDFullToShardShape",
                 k, instr.Describe(), op->Describe(), Get(op).sharding.ToString());
    } else if (!leaves) {
      WEFT_CHECK(!local,
                 "operand {} of {} is {}, a value of a partly manual region (sharding {}); "
                 "values leave a region through SPMDShardToFullShape",
                 k, instr.Describe(), op->Describe(), ShardingOf(*op).ToString());
    }
  }
}

PartitionedValue ComputationPartitioner::PartitionOutsideRegions(const HloInstruction& instr,
                                                                 const HloSharding& sharding) {
  if (!sharding.HasUnreduced()) return ReshardAny(b_, Partition(instr, sharding), sharding);
  switch (instr.opcode()) {
    case HloOpcode::kParameter:  // addends as given
    case HloOpcode::kTuple:
    case HloOpcode::kGetTupleElement:
      return ReshardAny(b_, Partition(instr, sharding), sharding);
    case HloOpcode::kAdd:  // linear: the op of addends is an addend of the result
    case HloOpcode::kSubtract:
    case HloOpcode::kNegate:
    case HloOpcode::kCopy:
      if (instr.shape().IsArray()) return HandleElementwise(*this, instr, sharding);
      break;
    case HloOpcode::kDot:
    case HloOpcode::kReduce: {
      unreduced_target_ = &sharding;
      PartitionedValue v;
      try {
        v = Partition(instr, sharding.WithoutUnreduced());
      } catch (...) {
        unreduced_target_ = nullptr;
        throw;
      }
      unreduced_target_ = nullptr;
      return ReshardAny(b_, v, sharding);
    }
    default:
      break;
  }
  return ReshardAny(b_, Partition(instr, sharding.WithoutUnreduced()), sharding);
}

bool KeepsAddends(const ComputationPartitioner& p, const HloSharding& partial,
                  const std::vector<std::vector<int64_t>>& groups) {
  const HloSharding* target = p.unreduced_target();
  if (target == nullptr || target->IsTuple() || groups.empty() || groups[0].size() < 2 ||
      NormalizeSharding(target->WithoutUnreduced()) != NormalizeSharding(partial)) {
    return false;
  }
  auto sorted = [](std::vector<std::vector<int64_t>> g) {
    for (std::vector<int64_t>& group : g) std::sort(group.begin(), group.end());
    std::sort(g.begin(), g.end());
    return g;
  };
  return sorted(UnreducedGroups(*target, p.context()->num_partitions)) == sorted(groups);
}

PartitionedValue ComputationPartitioner::PartitionInRegion(const HloInstruction& instr,
                                                           const HloSharding& sharding) {
  WEFT_CHECK(!sharding.HasUnreduced(),
             "{}: sharding {} has both manual and unreduced axes; XLA refuses them together "
             "too: sum the addends before the region or inside it",
             instr.Describe(), sharding.ToString());
  const ManualGroups groups = ManualGroupsOf(sharding);
  if (!region_groups_) region_groups_ = groups;
  WEFT_CHECK(*region_groups_ == groups,
             "{}: sharding {} has other manual groups than an earlier partly manual sharding "
             "of computation '{}'; one computation holds regions over one set of manual groups",
             instr.Describe(), sharding.ToString(), source_.name());
  if (IsTarget(instr, kFullToShardTarget)) {
    return HandleFullToShardInGroups(*this, instr, sharding, *region_groups_);
  }
  CheckPartitionableInRegion(instr, is_entry_ || called_in_region_);
  const HloSharding local = GroupLocalShardingOf(instr, sharding, *region_groups_);
  InManualGroups scope(context_, &*region_groups_);
  if (instr.opcode() == HloOpcode::kAllReduce || instr.opcode() == HloOpcode::kCollectivePermute) {
    return ReshardAny(b_, HandleCollectiveInRegion(*this, instr, local, *region_groups_), local);
  }
  return ReshardAny(b_, Partition(instr, local), local);
}

std::unique_ptr<HloComputation> ComputationPartitioner::Run() {
  // Every parameter, even an unused one, keeps its slot.
  std::vector<const HloInstruction*> order;
  for (const HloInstruction* param : source_.parameter_instructions()) order.push_back(param);
  for (const HloInstruction* instr : source_.MakeInstructionPostOrder()) {
    if (instr->opcode() != HloOpcode::kParameter) order.push_back(instr);
  }
  for (const HloInstruction* instr : order) {
    b_.set_name_prefix(instr->name());
    if (instr->opcode() == HloOpcode::kCallStart || instr->opcode() == HloOpcode::kCallDone) {
      Fail(
          "{}: asynchronous calls (call-start / call-done, as XLA's scheduler writes them) are "
          "parsed and propagated but not partitioned; give the module as it was before "
          "scheduling, with a plain call",
          instr->Describe());
    }
    const HloSharding sharding = ShardingOf(*instr);
    const bool in_region = IsPartlyManual(sharding);
    PartitionedValue v;
    try {
      CheckRegionEdges(*instr, in_region);
      v = in_region ? PartitionInRegion(*instr, sharding)
                    : PartitionOutsideRegions(*instr, sharding);
    } catch (const Error& e) {
      const std::string what = e.what();
      if (what.find(instr->name()) != std::string::npos) throw;
      Fail("partitioning {}: {}", instr->Describe(), what);
    }
    // The value that stands for `instr` keeps its name (helpers are "name.op").
    if (v.hlo->opcode() != HloOpcode::kParameter && named_.insert(v.hlo).second) {
      v.hlo->set_name(instr->name());
    }
    values_[instr] = v;
    if (in_region) group_local_.insert(instr);
  }
  // The entry's result may be each manual group's own value, as its
  // parameters may; a called computation's leaves through SPMDShardToFullShape.
  WEFT_CHECK(is_entry_ || called_in_region_ || !group_local_.count(source_.root_instruction()),
             "{} of computation '{}' is a value of a partly manual region (sharding {}); values "
             "leave a region through SPMDShardToFullShape",
             source_.root_instruction()->Describe(), source_.name(),
             ShardingOf(*source_.root_instruction()).ToString());
  PartitionedValue root = values_.at(source_.root_instruction());
  if (root_sharding_) root = ReshardAny(b_, root, *root_sharding_);
  if (is_entry_ && source_.root_instruction()->has_sharding() &&
      root.hlo->opcode() != HloOpcode::kParameter) {
    root.hlo->set_sharding(*source_.root_instruction()->sharding());
  }
  return b_.Build(root.hlo);
}

namespace {

int64_t DevicesInShardings(const HloModule& module) {
  int64_t devices = 1;
  auto visit = [&](const HloSharding& s, auto& self) -> void {
    if (s.IsTuple()) {
      for (const HloSharding& e : s.tuple_elements()) self(e, self);
    } else if (s.IsTiled()) {
      devices = std::max(devices, s.tile_assignment().num_elements());
    } else if (s.IsMaximal()) {
      devices = std::max(devices, s.device() + 1);
    }
  };
  for (const HloComputation* c : module.computations()) {
    for (const HloInstruction* instr : c->instructions()) {
      if (instr->has_sharding()) visit(*instr->sharding(), visit);
    }
  }
  return devices;
}

}  // namespace
}  // namespace weft::spmd

namespace weft {

std::unique_ptr<HloModule> PartitionModule(const HloModule& module,
                                           const PartitionOptions& options) {
  using namespace spmd;
  const HloComputation* entry = module.entry_computation();
  WEFT_CHECK(entry != nullptr, "module '{}' has no entry computation", module.name());
  int64_t n = options.num_partitions;
  std::string why = fmt::format("partitioned for {} as asked", n);
  if (n <= 0) {
    n = module.num_partitions() > 1 ? module.num_partitions() : DevicesInShardings(module);
    why = module.num_partitions() > 1
              ? fmt::format("the module's num_partitions={}", n)
              : fmt::format("the {} devices the module's shardings span", n);
  }
  // Every sharding, replica group and permute pair names one of the n
  // devices: the rule weft run, compile, partition and the parser share.
  CheckDeviceIds(module, n, why);

  auto result = std::make_unique<HloModule>(module.name());
  result->set_num_partitions(n);
  result->set_replica_count(module.replica_count());
  PartitionContext context;
  context.module = result.get();
  context.num_partitions = n;
  std::vector<HloSharding> params;
  for (const HloInstruction* param : entry->parameter_instructions()) {
    params.push_back(ShardingOf(*param));
  }
  ComputationPartitioner partitioner(&context, *entry, entry->name(), std::move(params),
                                     std::nullopt, true);
  result->AddEntryComputation(partitioner.Run());
  return result;
}

}  // namespace weft
