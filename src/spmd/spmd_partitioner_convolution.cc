// Convolution, as XLA's partitioner does it, by estimated communication plus
// local work (as for dot) among:
//   - output-driven: the input split as the result on the batch and spatial
//     dims, the kernel as the result on the output features, so every device
//     computes its own tile with no reduction. Feature groups (batch groups)
//     split whole groups: the input's features (batch) follow the result's
//     features and each device runs the local convolution on its groups.
//   - operand-driven (input or kernel; one group only): the operand keeps its
//     sharding, the other follows on the contracted features; each device
//     convolves its share of the features and the partial results are
//     summed over the devices splitting them (all-reduce, or reduce-scatter
//     chains: PlanPartialSum, as dot), or, with no such split, resharded to
//     the result's sharding (a result wanted replicated from an input split
//     along its batch: convolve the batch split, gather the result).
// A spatial dim the result (and so the input) is split along needs a halo:
// the window at a tile's first and last positions reads input elements of
// the neighbouring tiles. Each device receives them from its neighbours
// (collective-permute, a fixed count each way), zeroes what lies outside the
// input (the convolution's padding, and the padding of uneven tiles), takes
// the part its outputs read (a dynamic-slice where tiles start at different
// phases of the stride) and convolves it with padding adjusted to its tile.
// A window reaching past the neighbours takes its halo from as many tiles
// away as it reaches. A spatial split whose halo would come from the
// farthest tiles (about the whole dim), or whose tiles start at different
// phases of the lhs dilation, is gathered instead:
// the dim is made whole on every device (the instructions doing that are
// named "<conv>.whole_spatial.*" in the per-device program).
#include <algorithm>

#include "spmd_partitioner_handlers.h"
#include "weft/base/error.h"
#include "weft/sharding/sharding_util.h"

namespace weft::spmd {
namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return a >= 0 ? (a + b - 1) / b : -((-a) / b); }
int64_t FloorDiv(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

// The halo of one spatial dim split into `tiles` (input and result alike):
// the elements a tile's windows read beyond it, received from the tiles on
// either side (from as many tiles away as the window reaches).
struct SpatialHalo {
  int64_t tiles = 1;
  int64_t in_tile = 0;          // input elements per tile
  int64_t left = 0, right = 0;  // elements received from the left / right neighbour
  int64_t length = 0;           // input elements the local window reads
  // Per tile index: where the read part starts in [left halo, tile, right halo].
  std::vector<int64_t> offset;
  WindowDim window;  // the local window: padding set for the tile
};

// The halo plan, or nullopt when the neighbours do not hold it all or the
// tiles would need different local paddings.
std::optional<SpatialHalo> PlanSpatialHalo(int64_t in, int64_t out, int64_t tiles,
                                           const WindowDim& w) {
  SpatialHalo h;
  h.tiles = tiles;
  h.window = w;
  h.in_tile = CeilDiv(in, tiles);
  if (h.in_tile == 0) return std::nullopt;
  const int64_t out_tile = CeilDiv(out, tiles);
  const int64_t dl = w.base_dilation;
  const int64_t reach = (w.size - 1) * w.window_dilation;  // last tap's distance from the first
  std::vector<int64_t> start(tiles);
  int64_t phase = -1;
  for (int64_t j = 0; j < tiles; ++j) {
    // Positions in the padded, dilated input of the tile's first and last taps.
    const int64_t first = j * out_tile * w.stride - w.padding_low;
    const int64_t last = (j * out_tile + out_tile - 1) * w.stride - w.padding_low + reach;
    start[j] = CeilDiv(first, dl);
    const int64_t tile_phase = start[j] * dl - first;
    if (phase >= 0 && tile_phase != phase) return std::nullopt;
    phase = tile_phase;
    h.length = std::max(h.length, FloorDiv(last, dl) + 1 - start[j]);
  }
  h.length = std::max<int64_t>(h.length, 1);
  for (int64_t j = 0; j < tiles; ++j) {
    h.left = std::max(h.left, j * h.in_tile - start[j]);
    h.right = std::max(h.right, start[j] + h.length - (j + 1) * h.in_tile);
  }
  // A halo from the farthest tiles is about the whole dim: gathered instead.
  const int64_t hops = std::max(CeilDiv(h.left, h.in_tile), CeilDiv(h.right, h.in_tile));
  if (hops > 1 && hops >= tiles - 1) return std::nullopt;
  for (int64_t j = 0; j < tiles; ++j) h.offset.push_back(start[j] - (j * h.in_tile - h.left));
  // The local convolution yields out_tile positions from `length` elements.
  const int64_t padded = (out_tile - 1) * w.stride + reach + 1;
  h.window.padding_low = phase;
  h.window.padding_high = padded - phase - ((h.length - 1) * dl + 1);
  return h;
}

// Replaces dim `dim` of the device's input tile `x` (of the input `lhs`,
// split as `sharding`) by the part of the input its window reads: the halos
// from both neighbours, the elements outside the input zeroed.
HloInstruction* ExchangeHalo(SpmdBuilder& b, HloInstruction* x, const Shape& lhs,
                             const HloSharding& sharding, int64_t dim, const SpatialHalo& h) {
  const int64_t n = b.num_partitions();
  const int64_t ci = h.in_tile;
  std::vector<HloInstruction*> parts;
  const std::vector<std::vector<int64_t>> groups =
      GroupsAlongTileDims(sharding.tile_assignment(), {dim});
  auto edge = [&](int64_t from, int64_t to) {
    std::vector<int64_t> starts(x->shape().rank(), 0), limits = x->shape().dimensions();
    starts[dim] = from;
    limits[dim] = to;
    return b.Slice(x, starts, limits);
  };
  // Tile j's elements to tile j + hops (hops < 0: to the left).
  auto shift = [&](HloInstruction* piece, int64_t hops) {
    std::vector<std::pair<int64_t, int64_t>> pairs;
    for (const auto& g : groups) {
      const int64_t t = static_cast<int64_t>(g.size());
      for (int64_t j = 0; j < t; ++j) {
        if (j + hops >= 0 && j + hops < t) pairs.push_back({g[j], g[j + hops]});
      }
    }
    return b.CollectivePermute(piece, std::move(pairs));
  };
  // The left halo, farthest tile first: from tile j - d, its elements past
  // d * ci - left (a whole tile but for the farthest).
  for (int64_t d = CeilDiv(h.left, ci); d >= 1; --d) {
    parts.push_back(shift(edge(std::max<int64_t>(0, d * ci - h.left), ci), d));
  }
  parts.push_back(x);
  // The right halo, nearest tile first: from tile j + d, its first
  // right - (d - 1) * ci elements (at most a tile).
  for (int64_t d = 1; d <= CeilDiv(h.right, ci); ++d) {
    parts.push_back(shift(edge(0, std::min(ci, h.right - (d - 1) * ci)), -d));
  }
  HloInstruction* extended = x;
  if (parts.size() > 1) {
    extended = b.Concatenate(std::move(parts), dim);
  }
  // Zero what lies outside the input: the edges and uneven tiles' padding.
  const HloSharding::TileIndices table = sharding.TileIndexTable(n);
  std::vector<int64_t> first(n), offset(n);
  for (int64_t device = 0; device < n; ++device) {
    const int64_t j = table[device][dim];
    first[device] = j * ci - h.left;
    offset[device] = h.offset[j];
  }
  const std::vector<int64_t>& dims = extended->shape().dimensions();
  HloInstruction* index = b.Binary(HloOpcode::kAdd, b.Iota(Shape(PrimitiveType::kS32, dims), dim),
                                   b.BroadcastScalar(b.DeviceValue(first), dims));
  HloInstruction* inside = b.Binary(
      HloOpcode::kAnd,
      b.Compare(index, b.BroadcastScalar(b.S32Constant(0), dims), ComparisonDirection::kGe),
      b.Compare(index, b.BroadcastScalar(b.S32Constant(lhs.dimensions(dim)), dims),
                ComparisonDirection::kLt));
  HloInstruction* zero = b.ConstantScalar(x->shape().element_type(), 0);
  extended = b.Select(inside, extended, b.BroadcastScalar(zero, dims));
  // The part the device's window reads.
  if (std::all_of(offset.begin(), offset.end(), [&](int64_t o) { return o == offset[0]; })) {
    std::vector<int64_t> starts(dims.size(), 0), limits = dims;
    starts[dim] = offset[0];
    limits[dim] = offset[0] + h.length;
    return b.Slice(extended, starts, limits);
  }
  std::vector<HloInstruction*> starts(dims.size(), b.S32Constant(0));
  starts[dim] = b.DeviceValue(offset);
  std::vector<int64_t> sizes = dims;
  sizes[dim] = h.length;
  return b.DynamicSlice(extended, std::move(starts), std::move(sizes));
}

// The dims of one convolution and how they correspond.
struct ConvDims {
  const ConvolutionDimensionNumbers& dn;
  int64_t lhs_rank, out_rank, groups;
  bool feature_groups, batch_groups;

  explicit ConvDims(const HloInstruction& conv)
      : dn(conv.attrs().convolution),
        lhs_rank(conv.operand(0)->shape().rank()),
        out_rank(conv.shape().rank()),
        groups(std::max(conv.attrs().feature_group_count, conv.attrs().batch_group_count)),
        feature_groups(conv.attrs().feature_group_count > 1),
        batch_groups(conv.attrs().batch_group_count > 1) {}

  // Input dim -> the result dim it is split as (-1: whole or contracted).
  std::vector<int64_t> LhsToOut() const {
    std::vector<int64_t> map(lhs_rank, -1);
    map[dn.input_batch_dimension] =
        batch_groups ? dn.output_feature_dimension : dn.output_batch_dimension;
    if (feature_groups) map[dn.input_feature_dimension] = dn.output_feature_dimension;
    for (int64_t k = 0; k < dn.num_spatial_dims(); ++k) {
      map[dn.input_spatial_dimensions[k]] = dn.output_spatial_dimensions[k];
    }
    return map;
  }
  // Kernel dim -> result dim (only the output features).
  std::vector<int64_t> RhsToOut() const {
    std::vector<int64_t> map(lhs_rank, -1);
    map[dn.kernel_output_feature_dimension] = dn.output_feature_dimension;
    return map;
  }
  // Result dims no dim of the operand maps to.
  std::vector<int64_t> Unmapped(const std::vector<int64_t>& to_out) const {
    std::vector<int64_t> dims;
    for (int64_t d = 0; d < out_rank; ++d) {
      if (std::find(to_out.begin(), to_out.end(), d) == to_out.end()) dims.push_back(d);
    }
    return dims;
  }
};

// The local convolution on the devices' pieces: the windows of split
// spatial dims from their halo plans, the group counts over the groups
// split across devices.
HloInstruction* LocalConvolution(SpmdBuilder& b, const HloInstruction& instr, HloInstruction* lhs,
                                 HloInstruction* rhs, const std::vector<SpatialHalo>& halos,
                                 int64_t group_tiles, Shape shape) {
  HloAttributes a = instr.attrs();
  for (size_t k = 0; k < halos.size(); ++k) {
    if (halos[k].tiles > 1) a.window[k] = halos[k].window;
  }
  if (a.feature_group_count > 1) a.feature_group_count /= group_tiles;
  if (a.batch_group_count > 1) a.batch_group_count /= group_tiles;
  return b.AddInstruction(HloOpcode::kConvolution, {lhs, rhs}, std::move(a), std::move(shape));
}

// The halo plans of the spatial dims under the result tiling `out_tiles`;
// dims whose halo cannot be exchanged between neighbours are added to
// `unsplit` (result dims) and get no plan.
std::vector<SpatialHalo> PlanHalos(const HloInstruction& instr, const ConvDims& cd,
                                   const std::vector<int64_t>& out_tiles,
                                   std::vector<int64_t>& unsplit) {
  std::vector<SpatialHalo> halos(cd.dn.num_spatial_dims());
  for (int64_t k = 0; k < cd.dn.num_spatial_dims(); ++k) {
    const int64_t out_dim = cd.dn.output_spatial_dimensions[k];
    if (out_tiles[out_dim] <= 1) continue;
    std::optional<SpatialHalo> h = PlanSpatialHalo(
        instr.operand(0)->shape().dimensions(cd.dn.input_spatial_dimensions[k]),
        instr.shape().dimensions(out_dim), out_tiles[out_dim], instr.attrs().window[k]);
    if (h) {
      halos[k] = std::move(*h);
    } else {
      unsplit.push_back(out_dim);
    }
  }
  return halos;
}

// The input tile with the halos of its split spatial dims.
HloInstruction* WithHalos(SpmdBuilder& b, const HloInstruction& instr, const ConvDims& cd,
                          HloInstruction* x, const HloSharding& sharding,
                          const std::vector<SpatialHalo>& halos) {
  for (int64_t k = 0; k < cd.dn.num_spatial_dims(); ++k) {
    if (halos[k].tiles <= 1) continue;
    x = ExchangeHalo(b, x, instr.operand(0)->shape(), sharding, cd.dn.input_spatial_dimensions[k],
                     halos[k]);
  }
  return x;
}

int64_t WorkCost(const HloInstruction& instr, const Shape& local_out, int64_t group_in) {
  int64_t window = 1;
  for (const WindowDim& w : instr.attrs().window) window *= w.size;
  return 2 * local_out.ElementsCount() * window * group_in / kFlopsPerByte;
}

struct ContractionPlan {
  int driver = 0;  // 0: the input's features, 1: the kernel's
  HloSharding lhs_target, rhs_target;
  HloSharding partial;             // the local results' sharding before the sum
  std::vector<SpatialHalo> halos;  // input-driven: the split spatial dims
  bool summed = false;             // whether the driver splits the contracted features
  PartialSum sum;
  int64_t cost = 0;
};

// Driven by operand `driver`'s sharding (convolutions of one group only):
// the input keeps its batch, spatial and feature splits, or the kernel its
// feature splits; the other operand follows on the contracted features; the
// local results are summed over a split of the contracted features, then
// resharded to the result's sharding.
std::optional<ContractionPlan> PlanContraction(ComputationPartitioner& p,
                                               const HloInstruction& instr, const ConvDims& cd,
                                               int driver, const HloSharding& sharding) {
  const ConvolutionDimensionNumbers& dn = cd.dn;
  const HloInstruction* lhs = instr.operand(0);
  const HloInstruction* rhs = instr.operand(1);
  const int64_t contracted[2] = {dn.input_feature_dimension, dn.kernel_input_feature_dimension};
  const HloInstruction* op = instr.operand(driver);
  const HloSharding& ds = p.Get(op).sharding;
  if (!ds.IsTiled()) return std::nullopt;
  ContractionPlan plan;
  plan.driver = driver;
  std::vector<int64_t> other_to_driver(cd.lhs_rank, -1);
  other_to_driver[contracted[1 - driver]] = contracted[driver];
  std::vector<int64_t> driver_dims;  // the driver's dims the other operand does not share
  for (int64_t d = 0; d < cd.lhs_rank; ++d) {
    if (d != contracted[driver]) driver_dims.push_back(d);
  }
  ReshardCostCache cost(p.context());
  HloSharding working = ds;
  std::vector<int64_t> out_to_driver(cd.out_rank, -1);
  if (driver == 0) {
    const std::vector<int64_t> lhs_to_out = cd.LhsToOut();
    for (int64_t d = 0; d < cd.lhs_rank; ++d) {
      if (lhs_to_out[d] >= 0) out_to_driver[lhs_to_out[d]] = d;
    }
    // Spatial splits without a neighbour halo are made whole.
    std::vector<int64_t> unsplit;
    const std::vector<int64_t> out_tiles =
        TilesPerDim(NormalizeSharding(
                        MapShardingDims(Unsplit(ds, {contracted[0]}), out_to_driver, cd.out_rank)),
                    cd.out_rank);
    plan.halos = PlanHalos(instr, cd, out_tiles, unsplit);
    std::vector<int64_t> lhs_unsplit;
    for (int64_t out_dim : unsplit) lhs_unsplit.push_back(out_to_driver[out_dim]);
    working = Unsplit(ds, lhs_unsplit);
    plan.lhs_target = working;
    plan.rhs_target = NormalizeSharding(
        MapShardingDims(Unsplit(working, driver_dims), other_to_driver, rhs->shape().rank()));
  } else {
    const std::vector<int64_t> rhs_to_out = cd.RhsToOut();
    for (int64_t d = 0; d < cd.lhs_rank; ++d) {
      if (rhs_to_out[d] >= 0) out_to_driver[rhs_to_out[d]] = d;
    }
    working = Unsplit(ds, dn.kernel_spatial_dimensions);  // the window stays whole
    plan.halos.assign(dn.num_spatial_dims(), SpatialHalo{});
    plan.rhs_target = working;
    plan.lhs_target = NormalizeSharding(
        MapShardingDims(Unsplit(working, driver_dims), other_to_driver, lhs->shape().rank()));
  }
  plan.partial = NormalizeSharding(
      MapShardingDims(Unsplit(working, {contracted[driver]}), out_to_driver, cd.out_rank));
  const int64_t group_in = CeilDiv(rhs->shape().dimensions(dn.kernel_input_feature_dimension),
                                   TilesPerDim(working, op->shape().rank())[contracted[driver]]);
  plan.cost = cost(lhs->shape(), p.Get(lhs).sharding, plan.lhs_target) +
              cost(rhs->shape(), p.Get(rhs).sharding, plan.rhs_target) +
              WorkCost(instr, LocalShape(instr.shape(), plan.partial), group_in);
  plan.summed = TilesPerDim(working, op->shape().rank())[contracted[driver]] > 1;
  if (!plan.summed) {  // the local results, resharded to the result's sharding
    plan.cost += cost(instr.shape(), plan.partial, sharding);
    return plan;
  }
  plan.sum = PlanPartialSum(cost, instr.shape(), plan.partial, sharding,
                            GroupsAlongTileDims(working.tile_assignment(), {contracted[driver]}));
  plan.cost += plan.sum.cost;
  return plan;
}

PartitionedValue EmitContraction(ComputationPartitioner& p, const HloInstruction& instr,
                                 const ConvDims& cd, const ContractionPlan& plan) {
  SpmdBuilder& b = p.b();
  const PartitionedValue lhs = p.GetAs(instr.operand(0), plan.lhs_target);
  const PartitionedValue rhs = p.GetAs(instr.operand(1), plan.rhs_target);
  // Padding along the split features must add nothing: zero it on both.
  HloInstruction* zero_l = b.ConstantScalar(lhs.base.element_type(), 0);
  HloInstruction* zero_r = b.ConstantScalar(rhs.base.element_type(), 0);
  HloInstruction* l = MaskPadding(b, lhs, {cd.dn.input_feature_dimension}, zero_l);
  HloInstruction* r = MaskPadding(b, rhs, {cd.dn.kernel_input_feature_dimension}, zero_r);
  l = WithHalos(b, instr, cd, l, plan.lhs_target, plan.halos);
  HloInstruction* partial =
      LocalConvolution(b, instr, l, r, plan.halos, 1, LocalShape(instr.shape(), plan.partial));
  if (!plan.summed) return PartitionedValue{partial, instr.shape(), plan.partial};
  return PartitionedValue{EmitPartialSum(b, partial, plan.sum), instr.shape(), plan.sum.result};
}

}  // namespace

PartitionedValue HandleConvolution(ComputationPartitioner& p, const HloInstruction& instr,
                                   const HloSharding& sharding) {
  SpmdBuilder& b = p.b();
  const ConvDims cd(instr);
  const ConvolutionDimensionNumbers& dn = cd.dn;
  const HloInstruction* lhs = instr.operand(0);
  const HloInstruction* rhs = instr.operand(1);
  // Output-driven: the result dims the operands can follow stay split.
  std::vector<int64_t> out_tiles = TilesPerDim(sharding, cd.out_rank);
  std::vector<int64_t> unsplit;
  if (cd.batch_groups && out_tiles[dn.output_batch_dimension] > 1) {
    unsplit.push_back(dn.output_batch_dimension);  // a minor factor of the input batch
  }
  if (cd.groups > 1 && cd.groups % out_tiles[dn.output_feature_dimension] != 0) {
    unsplit.push_back(dn.output_feature_dimension);  // tiles must hold whole groups
  }
  std::vector<int64_t> spatial_unsplit;
  std::vector<SpatialHalo> halos = PlanHalos(instr, cd, out_tiles, spatial_unsplit);
  unsplit.insert(unsplit.end(), spatial_unsplit.begin(), spatial_unsplit.end());
  const HloSharding working = unsplit.empty() ? sharding : Unsplit(sharding, unsplit);
  out_tiles = TilesPerDim(working, cd.out_rank);
  const std::vector<int64_t> lhs_to_out = cd.LhsToOut(), rhs_to_out = cd.RhsToOut();
  const HloSharding lhs_target = NormalizeSharding(
      MapShardingDims(Unsplit(working, cd.Unmapped(lhs_to_out)), lhs_to_out, cd.lhs_rank));
  const HloSharding rhs_target = NormalizeSharding(
      MapShardingDims(Unsplit(working, cd.Unmapped(rhs_to_out)), rhs_to_out, cd.lhs_rank));
  const int64_t group_in = rhs->shape().dimensions(dn.kernel_input_feature_dimension);
  const int64_t output_cost =
      ReshardCost(p.context(), lhs->shape(), p.Get(lhs).sharding, lhs_target) +
      ReshardCost(p.context(), rhs->shape(), p.Get(rhs).sharding, rhs_target) +
      WorkCost(instr, LocalShape(instr.shape(), working), group_in);

  if (!cd.feature_groups && !cd.batch_groups) {
    std::optional<ContractionPlan> best;
    for (int driver = 0; driver < 2; ++driver) {
      std::optional<ContractionPlan> plan = PlanContraction(p, instr, cd, driver, sharding);
      if (plan && (!best || plan->cost < best->cost)) best = std::move(plan);
    }
    if (best && best->cost < output_cost) return EmitContraction(p, instr, cd, *best);
  }

  if (!spatial_unsplit.empty()) b.set_name_prefix(instr.name() + ".whole_spatial");
  const PartitionedValue l = p.GetAs(lhs, lhs_target);
  b.set_name_prefix(instr.name());
  const PartitionedValue r = p.GetAs(rhs, rhs_target);
  HloInstruction* x = WithHalos(b, instr, cd, l.hlo, lhs_target, halos);
  HloInstruction* conv =
      LocalConvolution(b, instr, x, r.hlo, halos, out_tiles[dn.output_feature_dimension],
                       LocalShape(instr.shape(), working));
  return PartitionedValue{conv, instr.shape(), working};
}

}  // namespace weft::spmd
