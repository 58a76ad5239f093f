// Output fusion (kind=kOutput, a dot and its add / multiply chain) runs as
// one oneDNN matmul with binary post-ops (EvalOutputFusion, below, through
// eval_dot.cc's RunDot).
//
// Loop fusion (fusion kind=kLoop): runs the fused computation a tile of
// the output's linear index range at a time (kTile elements), so every
// intermediate value lives in a tile-sized scratch buffer that stays in
// cache instead of a whole-tensor buffer.
//
// Within a tile, the fused computation is walked in post order:
//  - a parameter (or constant) with the output's dimensions is read in
//    place (pointer + offset; bf16/f16 are widened to f32 into scratch);
//    a rank-0 one used elementwise is splatted over the tile;
//  - a broadcast gathers its operand's elements for the tile's indices
//    (fast paths: a scalar, a repeated row — the operand is a suffix of the
//    output's dimensions —, a repeated element per row — a prefix —);
//  - iota writes the tile's coordinates along its dimension;
//  - a reshape (row-major: the same linear indices) passes its operand's
//    tile on; an index map read at the tile's own indices (transpose, slice,
//    reverse, concatenate, pad, or a broadcast of one) gathers its tile
//    through the chain of index maps below it down to the parameters and
//    constants: each level maps the tile's linear indices to its operand's
//    (an affine map — transpose, slice, reverse, broadcast — computed a row
//    of the innermost dimension at a time; pad and concatenate split the
//    elements among their operands and the padding value), and the sources
//    are read at the composed indices (a plain copy where they are
//    contiguous);
//  - elementwise ops (unary, binary, compare, select, clamp, convert) call the
//    span kernels of elementwise_kernels.h, the same ones eval_elementwise.cc
//    runs. bf16 and f16 are computed in f32 and every result is rounded to
//    its element type, as the unfused program stores it: fused and unfused
//    give the same bits.
// The root's tile is computed straight into the output buffer (or converted
// into it for bf16/f16). Tiles are split over the thread pool.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <unordered_map>
#include <vector>

#include "elementwise_kernels.h"
#include "executor_eval.h"
#include "weft/base/error.h"
#include "weft/compiler/fusion.h"
#include "weft/hlo/computation.h"

namespace weft::runtime::exec {
namespace {

constexpr int64_t kTile = 2048;              // elements per tile (values stay in L1/L2)
constexpr int64_t kParallelChunk = 1 << 15;  // elements per thread-pool task, as elementwise

enum class NodeKind : uint8_t {
  kSource,  // parameter or constant
  kBroadcast,
  kIota,
  kUnary,
  kBinary,
  kCompare,
  kSelect,
  kClamp,
  kConvert,
  kReshape,   // row-major: the same linear indices as its operand
  kIndexMap,  // transpose, slice, reverse, concatenate, pad (and a general broadcast)
};

// How a tile's values are held: f32 for the float types, the storage type
// otherwise (pred as bytes).
PrimitiveType ReprType(PrimitiveType t) { return IsHalf(t) ? PrimitiveType::kF32 : t; }

enum class BroadcastMode : uint8_t { kScalar, kSuffix, kPrefix, kGeneral };

struct Node {
  NodeKind kind = NodeKind::kSource;
  HloOpcode op = HloOpcode::kParameter;
  const HloInstruction* instr = nullptr;
  PrimitiveType type = PrimitiveType::kInvalid;  // the HLO element type
  PrimitiveType repr = PrimitiveType::kInvalid;  // in tiles
  std::vector<int32_t> operands;                 // node indices
  ComparisonDirection direction = ComparisonDirection::kEq;
  bool total_order = false;  // compare's type=TOTALORDER
  // kSource: the fusion operand (parameter number), or -1 for a constant
  // (constant: its index into FusionPlan::constants).
  int64_t fusion_operand = -1;
  int32_t constant = -1;
  bool in_place = false;  // kSource read at the tile's own indices, no copy
  bool splat = false;     // kSource of rank 0 in a fusion of rank > 0
  bool has_tile = true;   // false: a source only broadcasts read
  // kBroadcast: operand's element count, the mode and per output dim the
  // operand's stride (0 where the operand is repeated).
  BroadcastMode mode = BroadcastMode::kGeneral;
  int64_t source_count = 1, row = 1;  // suffix: row length; prefix: repeat count
  std::vector<int64_t> source_strides;
  // kIota: index along the dimension = (k / inner) % extent.
  int64_t iota_inner = 1, iota_extent = 1;
  int32_t slot = -1;  // scratch slot; -1 none (in place, or the root into the output)
  int32_t last_use = -1;
  // Index maps. `aligned`: computed per tile at the tile's own linear
  // indices (the fusion's; every aligned node has its element count).
  // `gathered`: read at other indices by an index map above it (then it is
  // a source, a reshape or an index map itself).
  bool aligned = false, gathered = false;
  std::vector<int64_t> dims;  // this node's dimensions
  // kIndexMap affine (transpose, slice, reverse, broadcast): operand linear
  // index = offset + sum_d coord[d] * strides[d] over this node's coords.
  bool affine = false;
  int64_t offset = 0;
  std::vector<int64_t> strides;
  // pad: per dim low, interior + 1, operand dim; concatenate: the dimension
  // and each operand's start along it.
  std::vector<int64_t> pad_low, pad_step, operand_dims;
  int64_t concat_dim = -1;
  std::vector<int64_t> concat_starts;
  // A pad padded only in its innermost dimension, without interior padding,
  // or a concatenate along its innermost dimension, whose operands are
  // sources (through reshapes): seen as rows of `row_width` elements, each
  // operand k a band of columns [column_start[k], + column_width[k]) read
  // from source node column_source[k] (none: not such a node). A contiguous
  // tile of it is copied column band by band, no indices (CopyColumnBand).
  int64_t row_width = 0;
  std::vector<int64_t> column_start, column_width;
  std::vector<int32_t> column_source;
};

struct FusionPlan {
  std::vector<Node> nodes;  // post order of the fused computation; root last
  std::vector<HostTensor> constants;
  Shape shape;  // the fusion's result
  int32_t num_slots = 0;
  bool root_to_output = false;  // the root writes the output buffer directly
  // Fusion operands read only in place with the output's dimensions: the
  // output may take one's buffer over (each element is read before written).
  std::vector<int64_t> reuse_candidates;
  // Fusion operands some broadcast or index map reads (at other indices
  // than its own).
  std::vector<int64_t> broadcast_sources;
  int32_t max_depth = 0;  // of the gathered chains (index scratch per level)
  // Input fusion (kInput): the nodes compute the reduce's input (`shape`);
  // each output element folds a row of `row` of them.
  bool input = false;
  ReducerKind reducer = ReducerKind::kAdd;
  int64_t row = 0;
  int64_t init_operand = -1;  // fusion operand holding the init value, or
  float init_value = 0;       // the init value (a fused constant)
};

// `root` and what it reads inside its computation, operands first.
std::vector<const HloInstruction*> PostOrderFrom(const HloInstruction* root) {
  std::vector<const HloInstruction*> order;
  std::unordered_map<const HloInstruction*, bool> seen;
  std::vector<std::pair<const HloInstruction*, int64_t>> stack{{root, 0}};
  seen[root] = true;
  while (!stack.empty()) {
    auto& [instr, next] = stack.back();
    if (next < instr->operand_count()) {
      const HloInstruction* operand = instr->operand(next++);
      if (!seen[operand]) {
        seen[operand] = true;
        stack.push_back({operand, 0});
      }
    } else {
      order.push_back(instr);
      stack.pop_back();
    }
  }
  return order;
}

HostTensor MaterializeConstant(const HloInstruction& instr) {
  const Literal& literal = instr.literal();
  const Shape& shape = instr.shape();
  HostTensor t = HostTensor::Uninitialized(shape);
  for (int64_t i = 0; i < literal.size(); ++i) {
    if (IsFloatingPoint(shape.element_type())) {
      StoreDouble(shape.element_type(), t.mutable_raw_data(), i, literal.Get(i));
    } else {  // exact 64-bit integers, wrapped to the type
      const int64_t v = literal.GetInt(i);
      ConvertElements(
          PrimitiveType::kS64, &v, shape.element_type(),
          static_cast<std::byte*>(t.mutable_raw_data()) + i * ByteWidth(shape.element_type()), 1);
    }
  }
  return t;
}

bool IsIndexMapOp(HloOpcode op) {
  return op == HloOpcode::kTranspose || op == HloOpcode::kSlice || op == HloOpcode::kReverse ||
         op == HloOpcode::kConcatenate || op == HloOpcode::kPad;
}

// An input fusion's root: a reduce of f32 rows (its innermost dims) by add,
// multiply, max or min, its init a fused parameter or constant.
void PlanInputRoot(const HloInstruction& fusion, const HloInstruction& reduce, FusionPlan& plan) {
  const auto fail = [&](std::string_view why) {
    Fail("input fusion {}: its root {} {}", fusion.Describe(), reduce.Describe(), why);
  };
  if (reduce.opcode() != HloOpcode::kReduce || reduce.operand_count() != 2) {
    fail("must be a reduce of one input");
  }
  const Shape& in = reduce.operand(0)->shape();
  if (!in.IsArray() || in.element_type() != PrimitiveType::kF32 ||
      reduce.shape() != fusion.shape() || fusion.shape().element_type() != PrimitiveType::kF32) {
    fail("must reduce f32 to the fusion's f32 shape");
  }
  const ReducerKind kind = ClassifyReducer(*reduce.to_apply());
  if (kind != ReducerKind::kAdd && kind != ReducerKind::kMultiply &&
      kind != ReducerKind::kMaximum && kind != ReducerKind::kMinimum) {
    fail("must reduce by add, multiply, maximum or minimum");
  }
  std::vector<int64_t> dims = reduce.dimensions();
  std::sort(dims.begin(), dims.end());
  int64_t row = 1;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] != in.rank() - static_cast<int64_t>(dims.size() - i)) {
      fail("must reduce the innermost dims");
    }
    row *= in.dimensions(dims[i]);
  }
  if (row > compiler::kMaxInputFusionRow) {
    fail(fmt::format("reduces rows of {} elements, more than {}", row,
                     compiler::kMaxInputFusionRow));
  }
  const HloInstruction* init = reduce.operand(1);
  if (!init->shape().IsArray() || init->shape().rank() != 0 ||
      init->shape().element_type() != PrimitiveType::kF32) {
    fail("needs an f32 scalar init value");
  }
  if (init->opcode() == HloOpcode::kParameter) {
    plan.init_operand = init->parameter_number();
    WEFT_CHECK(plan.init_operand < fusion.operand_count() &&
                   fusion.operand(plan.init_operand)->shape() == init->shape(),
               "fused parameter {} does not match operand {} of the fusion", init->Describe(),
               plan.init_operand);
  } else if (init->opcode() == HloOpcode::kConstant) {
    plan.init_value = MaterializeConstant(*init).data<float>()[0];
  } else {
    fail("needs its init value as a parameter or a constant");
  }
  plan.input = true;
  plan.reducer = kind;
  plan.row = row;
}

std::shared_ptr<FusionPlan> MakeFusionPlan(const HloInstruction& fusion) {
  const FusionKind fusion_kind = fusion.attrs().fusion_kind;
  WEFT_CHECK(fusion_kind == FusionKind::kLoop || fusion_kind == FusionKind::kInput,
             "fusion kind {} is not supported by the executor (kLoop, kInput and kOutput are)",
             FusionKindString(fusion_kind));
  WEFT_CHECK(fusion.called_computations().size() == 1 && fusion.called_computations()[0] != nullptr,
             "fusion needs one fused computation (calls=)");
  const HloComputation& fused = *fusion.called_computations()[0];
  WEFT_CHECK(fusion.shape().IsArray() && IsFusibleElementType(fusion.shape().element_type()),
             "a loop fusion's result must be an array of f32, bf16, f16, s32, s64, u32 or pred; "
             "got {}",
             fusion.shape().ToString());
  WEFT_CHECK(fused.root_instruction() != nullptr, "fused computation '{}' has no root",
             fused.name());
  auto plan = std::make_shared<FusionPlan>();
  // The value the nodes compute a tile at a time: the fusion's result, or an
  // input fusion's reduce input.
  const HloInstruction* value = fused.root_instruction();
  if (fusion_kind == FusionKind::kInput) {
    PlanInputRoot(fusion, *value, *plan);
    value = value->operand(0);
  }
  plan->shape = value->shape();
  const int64_t count = plan->shape.ElementsCount();
  const std::vector<const HloInstruction*> order = PostOrderFrom(value);
  std::unordered_map<const HloInstruction*, int32_t> index;
  auto fail = [&](const HloInstruction* instr, std::string_view why) {
    Fail("fused instruction {} of '{}': {}", instr->Describe(), fused.name(), why);
  };
  // Nodes, in post order.
  for (const HloInstruction* instr : order) {
    Node node;
    node.instr = instr;
    node.op = instr->opcode();
    if (!instr->shape().IsArray() || !IsFusibleElementType(instr->shape().element_type())) {
      fail(instr, fmt::format("element type of {} is not supported in a loop fusion",
                              instr->shape().ToString()));
    }
    node.type = instr->shape().element_type();
    node.repr = ReprType(node.type);
    node.dims = instr->shape().dimensions();
    const int64_t rank = instr->shape().rank();
    for (const HloInstruction* operand : instr->operands())
      node.operands.push_back(index.at(operand));
    const HloOpcode op = instr->opcode();
    if (op == HloOpcode::kParameter || op == HloOpcode::kConstant) {
      node.kind = NodeKind::kSource;
      if (op == HloOpcode::kParameter) {
        node.fusion_operand = instr->parameter_number();
        WEFT_CHECK(node.fusion_operand < fusion.operand_count() &&
                       fusion.operand(node.fusion_operand)->shape() == instr->shape(),
                   "fused parameter {} does not match operand {} of the fusion", instr->Describe(),
                   node.fusion_operand);
      } else {
        node.constant = static_cast<int32_t>(plan->constants.size());
        plan->constants.push_back(MaterializeConstant(*instr));
      }
      node.has_tile = false;  // set below when an aligned user reads it
    } else if (op == HloOpcode::kBroadcast) {
      node.kind = NodeKind::kBroadcast;
      const Shape& in = instr->operand(0)->shape();
      const std::vector<int64_t>& bdims = instr->dimensions();
      WEFT_CHECK(static_cast<int64_t>(bdims.size()) == in.rank(),
                 "broadcast dimensions {} do not match operand rank {}", bdims.size(), in.rank());
      node.source_count = in.ElementsCount();
      node.source_strides.assign(rank, 0);
      const std::vector<int64_t> in_strides = RowMajorStrides(in.dimensions());
      bool suffix = true, prefix = true;
      for (int64_t i = 0; i < in.rank(); ++i) {
        WEFT_CHECK(bdims[i] >= 0 && bdims[i] < rank && node.dims[bdims[i]] == in.dimensions(i),
                   "broadcast dimension {} does not match", i);
        node.source_strides[bdims[i]] = in_strides[i];
        if (bdims[i] != rank - in.rank() + i) suffix = false;
        if (bdims[i] != i) prefix = false;
      }
      if (node.source_count <= 1) {
        node.mode = BroadcastMode::kScalar;
      } else if (suffix) {
        node.mode = BroadcastMode::kSuffix;
        node.row = node.source_count;
      } else if (prefix) {
        node.mode = BroadcastMode::kPrefix;
        node.row = instr->shape().ElementsCount() / node.source_count;
      }
      node.affine = true;
      node.strides = node.source_strides;
      // Read from a source directly (the fast modes) or through index maps.
      if (plan->nodes[node.operands[0]].kind != NodeKind::kSource) node.kind = NodeKind::kIndexMap;
    } else if (op == HloOpcode::kIota) {
      node.kind = NodeKind::kIota;
      const int64_t d = instr->attrs().iota_dimension;
      WEFT_CHECK(d >= 0 && d < rank, "iota dimension {} out of range", d);
      node.iota_extent = node.dims[d];
      for (int64_t i = d + 1; i < rank; ++i) node.iota_inner *= node.dims[i];
    } else if (op == HloOpcode::kReshape) {
      node.kind = NodeKind::kReshape;
      if (instr->operand(0)->shape().ElementsCount() != instr->shape().ElementsCount()) {
        fail(instr, "reshape changes the element count");
      }
    } else if (IsIndexMapOp(op)) {
      node.kind = NodeKind::kIndexMap;
      const Shape& in = instr->operand(0)->shape();
      node.operand_dims = in.dimensions();
      const std::vector<int64_t> in_strides = RowMajorStrides(in.dimensions());
      if (op == HloOpcode::kTranspose) {
        const std::vector<int64_t>& perm = instr->dimensions();
        WEFT_CHECK(static_cast<int64_t>(perm.size()) == rank, "transpose dimensions do not match");
        node.affine = true;
        for (int64_t i = 0; i < rank; ++i) {
          WEFT_CHECK(perm[i] >= 0 && perm[i] < rank && in.dimensions(perm[i]) == node.dims[i],
                     "transpose dimension {} does not match", i);
          node.strides.push_back(in_strides[perm[i]]);
        }
      } else if (op == HloOpcode::kSlice) {
        const std::vector<SliceDim>& sl = instr->attrs().slice;
        WEFT_CHECK(static_cast<int64_t>(sl.size()) == rank, "slice dimensions do not match");
        node.affine = true;
        for (int64_t i = 0; i < rank; ++i) {
          node.offset += sl[i].start * in_strides[i];
          node.strides.push_back(sl[i].stride * in_strides[i]);
        }
      } else if (op == HloOpcode::kReverse) {
        node.affine = true;
        node.strides = in_strides;
        for (int64_t d : instr->dimensions()) {
          WEFT_CHECK(d >= 0 && d < rank, "reverse dimension {} out of range", d);
          node.offset += (node.dims[d] - 1) * in_strides[d];
          node.strides[d] = -in_strides[d];
        }
      } else if (op == HloOpcode::kPad) {
        const std::vector<PadDim>& pad = instr->attrs().padding;
        WEFT_CHECK(static_cast<int64_t>(pad.size()) == rank, "padding does not match the rank");
        if (instr->operand(1)->opcode() != HloOpcode::kParameter &&
            instr->operand(1)->opcode() != HloOpcode::kConstant) {
          fail(instr, "a pad's value in a loop fusion must be a parameter or a constant");
        }
        for (const PadDim& p : pad) {
          node.pad_low.push_back(p.low);
          node.pad_step.push_back(p.interior + 1);
        }
      } else {  // concatenate
        WEFT_CHECK(instr->dimensions().size() == 1, "concatenate needs one dimension");
        node.concat_dim = instr->dimensions()[0];
        int64_t start = 0;
        for (const HloInstruction* operand : instr->operands()) {
          node.concat_starts.push_back(start);
          start += operand->shape().dimensions(node.concat_dim);
        }
        node.concat_starts.push_back(start);
      }
    } else if (IsElementwise(op) && op != HloOpcode::kCopy) {
      CheckElementwise(*instr);
      node.kind = op == HloOpcode::kCompare   ? NodeKind::kCompare
                  : op == HloOpcode::kSelect  ? NodeKind::kSelect
                  : op == HloOpcode::kClamp   ? NodeKind::kClamp
                  : op == HloOpcode::kConvert ? NodeKind::kConvert
                  : IsElementwiseUnary(op)    ? NodeKind::kUnary
                                              : NodeKind::kBinary;
      node.direction = instr->attrs().comparison_direction;
      node.total_order = instr->attrs().comparison_type == "TOTALORDER";
    } else {
      fail(instr, fmt::format("{} is not supported in a loop fusion", HloOpcodeString(op)));
    }
    index.emplace(instr, static_cast<int32_t>(plan->nodes.size()));
    plan->nodes.push_back(std::move(node));
  }
  std::vector<Node>& nodes = plan->nodes;
  const int32_t root = static_cast<int32_t>(nodes.size()) - 1;
  WEFT_CHECK(plan->input || nodes[root].instr->shape() == fusion.shape(),
             "fusion result {} differs from its fused root {}", fusion.shape().ToString(),
             nodes[root].instr->shape().ToString());

  // Pads and concatenates whose contiguous tiles are column bands.
  for (Node& node : nodes) {
    if (node.kind != NodeKind::kIndexMap || node.dims.empty()) continue;
    const int64_t last = static_cast<int64_t>(node.dims.size()) - 1;
    auto source_of = [&](int32_t id) {
      while (nodes[id].kind == NodeKind::kReshape) id = nodes[id].operands[0];
      return nodes[id].kind == NodeKind::kSource ? id : -1;
    };
    if (node.op == HloOpcode::kPad) {
      bool inner_only = node.pad_step[last] == 1;
      for (int64_t d = 0; d < last; ++d) {
        inner_only = inner_only && node.pad_low[d] == 0 && node.pad_step[d] == 1 &&
                     node.operand_dims[d] == node.dims[d];
      }
      const int32_t source = source_of(node.operands[0]);
      if (!inner_only || source < 0) continue;
      node.column_start = {node.pad_low[last]};
      node.column_width = {node.operand_dims[last]};
      node.column_source = {source};
    } else if (node.op == HloOpcode::kConcatenate && node.concat_dim == last) {
      std::vector<int32_t> sources;
      for (int32_t operand : node.operands) sources.push_back(source_of(operand));
      if (std::find(sources.begin(), sources.end(), -1) != sources.end()) continue;
      for (size_t k = 0; k < node.operands.size(); ++k) {
        node.column_start.push_back(node.concat_starts[k]);
        node.column_width.push_back(node.concat_starts[k + 1] - node.concat_starts[k]);
      }
      node.column_source = std::move(sources);
    } else {
      continue;
    }
    node.row_width = node.dims[last];
  }

  // Regions, from the root down: aligned nodes are computed per tile; an
  // index map's operands are gathered.
  nodes[root].aligned = true;
  std::vector<int32_t> depth(nodes.size(), 0);
  for (int32_t i = root; i >= 0; --i) {
    Node& node = nodes[i];
    if (!node.aligned && !node.gathered) continue;  // unused
    const HloInstruction* instr = node.instr;
    if (node.aligned) {
      if (node.instr->shape().ElementsCount() != count &&
          !(node.kind == NodeKind::kSource && node.dims.empty())) {
        fail(instr, "an aligned instruction of a loop fusion must have the fusion's element count");
      }
      if (node.kind == NodeKind::kSource) {
        node.has_tile = true;
        node.splat = instr->shape().rank() == 0 && plan->shape.rank() > 0;
        node.in_place = !node.splat;
      }
    }
    if (node.gathered && node.kind != NodeKind::kSource && node.kind != NodeKind::kReshape &&
        node.kind != NodeKind::kIndexMap && node.kind != NodeKind::kBroadcast) {
      fail(instr,
           "only parameters, constants, reshapes, broadcasts and index maps may feed an "
           "index map in a loop fusion");
    }
    for (size_t k = 0; k < node.operands.size(); ++k) {
      Node& operand = nodes[node.operands[k]];
      switch (node.kind) {
        case NodeKind::kBroadcast:
        case NodeKind::kIndexMap:
          if (node.op == HloOpcode::kPad && k == 1) {
            if (operand.kind != NodeKind::kSource || operand.instr->shape().rank() != 0) {
              fail(instr, "a pad's value must be a scalar parameter or constant");
            }
            break;
          }
          operand.gathered = true;
          depth[node.operands[k]] = std::max(depth[node.operands[k]], depth[i] + 1);
          break;
        case NodeKind::kReshape:
          if (node.aligned) operand.aligned = true;
          if (node.gathered) {
            operand.gathered = true;
            depth[node.operands[k]] = std::max(depth[node.operands[k]], depth[i] + 1);
          }
          break;
        case NodeKind::kSource:
          break;
        default: {  // elementwise: operands of the same dimensions, or a splatted scalar
          const bool same = operand.dims == node.dims;
          if (!same && !(operand.kind == NodeKind::kSource && operand.dims.empty())) {
            fail(instr, "operand shapes differ from the fusion's");
          }
          operand.aligned = true;
        }
      }
    }
    plan->max_depth = std::max(plan->max_depth, depth[i] + 1);
  }
  for (Node& node : nodes) {
    if (!node.aligned && node.kind != NodeKind::kSource) node.has_tile = false;
  }

  // Sources read in place become reuse candidates unless an index map or a
  // broadcast reads the same operand.
  for (const Node& node : nodes) {
    if (node.kind == NodeKind::kSource && node.gathered && node.fusion_operand >= 0) {
      plan->broadcast_sources.push_back(node.fusion_operand);
    }
  }
  for (const Node& node : nodes) {
    if (plan->input) break;  // the result is smaller than its input
    if (node.kind == NodeKind::kSource && node.fusion_operand >= 0 && node.in_place &&
        std::find(plan->broadcast_sources.begin(), plan->broadcast_sources.end(),
                  node.fusion_operand) == plan->broadcast_sources.end()) {
      plan->reuse_candidates.push_back(node.fusion_operand);
    }
  }

  // Scratch slots by liveness over the walk (aligned nodes only; a reshape
  // passes its operand's tile on); the root writes the output directly unless
  // it is a source, a reshape or of a half type (converted at the end).
  for (int32_t i = 0; i <= root; ++i) {
    if (!nodes[i].has_tile) continue;
    for (int32_t k : nodes[i].operands) nodes[k].last_use = i;
  }
  // A reshape's tile is its operand's: keep the operand alive while the
  // reshape's users run.
  for (int32_t i = root; i >= 0; --i) {
    if (nodes[i].kind == NodeKind::kReshape && nodes[i].has_tile) {
      int32_t& use = nodes[nodes[i].operands[0]].last_use;
      use = std::max(use, nodes[i].last_use);
    }
  }
  plan->root_to_output = nodes[root].kind != NodeKind::kSource &&
                         nodes[root].kind != NodeKind::kReshape && !IsHalf(nodes[root].type);
  std::vector<int32_t> free_slots;
  for (int32_t i = 0; i <= root; ++i) {
    Node& node = nodes[i];
    if (!node.has_tile) continue;
    const bool needs_slot =
        !(node.kind == NodeKind::kSource && node.in_place && !IsHalf(node.type)) &&
        node.kind != NodeKind::kReshape && !(i == root && plan->root_to_output);
    if (needs_slot) {
      if (free_slots.empty()) {
        node.slot = plan->num_slots++;
      } else {
        node.slot = free_slots.back();
        free_slots.pop_back();
      }
    }
    for (int32_t k : node.operands) {
      if (nodes[k].last_use == i && nodes[k].slot >= 0 &&
          std::find(free_slots.begin(), free_slots.end(), nodes[k].slot) == free_slots.end()) {
        free_slots.push_back(nodes[k].slot);
      }
    }
  }
  return plan;
}

// Calls f(j, run) for each row of the innermost dimension that the n
// linear indices base, base + 1, ... cross (j: the first position, run: how
// many of the row's elements), with coord at the row's first element.
template <typename F>
void ForEachRow(const std::vector<int64_t>& dims, int64_t base, int64_t n,
                std::vector<int64_t>& coord, F&& f) {
  const int64_t rank = static_cast<int64_t>(dims.size());
  const int64_t last = rank - 1;
  int64_t k = base;
  for (int64_t d = last; d >= 0; --d) {
    coord[d] = k % dims[d];
    k /= dims[d];
  }
  int64_t j = 0;
  while (j < n) {
    const int64_t run = std::min(n - j, dims[last] - coord[last]);
    f(j, run);
    j += run;
    coord[last] += run;
    for (int64_t d = last; d > 0 && coord[d] == dims[d]; --d) {
      coord[d] = 0;
      ++coord[d - 1];
    }
  }
}

// Elements [b, b + n) of broadcast `node` (output dims `dims`), copied from
// its source (`src`, storage elements) into `dst`.
template <int kBytes>
void GatherBroadcast(const Node& node, const std::vector<int64_t>& dims, const void* src_v,
                     void* dst_v, int64_t b, int64_t n) {
  using T = typename Bits<kBytes>::type;
  const T* src = static_cast<const T*>(src_v);
  T* dst = static_cast<T*>(dst_v);
  switch (node.mode) {
    case BroadcastMode::kScalar:
      std::fill(dst, dst + n, src[0]);
      return;
    case BroadcastMode::kSuffix: {  // a repeated row: index k % row
      int64_t k = b % node.row, j = 0;
      while (j < n) {
        const int64_t run = std::min(n - j, node.row - k);
        std::memcpy(dst + j, src + k, static_cast<size_t>(run) * kBytes);
        j += run;
        k = 0;
      }
      return;
    }
    case BroadcastMode::kPrefix: {  // an element per row: index k / row
      int64_t e = b / node.row, k = b % node.row, j = 0;
      while (j < n) {
        const int64_t run = std::min(n - j, node.row - k);
        std::fill(dst + j, dst + j + run, src[e]);
        j += run;
        k = 0;
        ++e;
      }
      return;
    }
    case BroadcastMode::kGeneral:
      break;
  }
  const int64_t rank = static_cast<int64_t>(dims.size());
  std::vector<int64_t> coord(rank);
  const std::vector<int64_t>& stride = node.source_strides;
  const int64_t inner_stride = stride[rank - 1];
  ForEachRow(dims, b, n, coord, [&](int64_t j, int64_t run) {
    int64_t base = 0;
    for (int64_t d = 0; d < rank; ++d) base += coord[d] * stride[d];
    if (inner_stride == 0) {
      std::fill(dst + j, dst + j + run, src[base]);
    } else if (inner_stride == 1) {
      std::memcpy(dst + j, src + base, static_cast<size_t>(run) * kBytes);
    } else {
      for (int64_t i = 0; i < run; ++i) dst[j + i] = src[base + i * inner_stride];
    }
  });
}

void Gather(const Node& node, const std::vector<int64_t>& dims, PrimitiveType storage,
            const void* src, void* dst, int64_t b, int64_t n) {
  switch (ByteWidth(storage)) {
    case 1:
      return GatherBroadcast<1>(node, dims, src, dst, b, n);
    case 2:
      return GatherBroadcast<2>(node, dims, src, dst, b, n);
    case 4:
      return GatherBroadcast<4>(node, dims, src, dst, b, n);
    default:
      return GatherBroadcast<8>(node, dims, src, dst, b, n);
  }
}

// Index maps: typed gathers and scatters of storage elements.
template <int kBytes>
void GatherIdx(const void* src_v, const int64_t* idx, int64_t n, void* dst_v) {
  using T = typename Bits<kBytes>::type;
  const T* src = static_cast<const T*>(src_v);
  T* dst = static_cast<T*>(dst_v);
  for (int64_t j = 0; j < n; ++j) dst[j] = src[idx[j]];
}
template <int kBytes>
void ScatterPos(const void* src_v, const int64_t* pos, int64_t n, void* dst_v) {
  using T = typename Bits<kBytes>::type;
  const T* src = static_cast<const T*>(src_v);
  T* dst = static_cast<T*>(dst_v);
  for (int64_t j = 0; j < n; ++j) dst[pos[j]] = src[j];
}
// Positions [b, b + n) of rows of `row_width` elements, columns [start,
// start + width) of each row from a source of rows of `width` elements
// (src[r * width + c - start]); the other columns are left as they are. A
// negative start or a band past the row crops it (a pad's negative padding).
template <int kBytes>
void CopyColumnBand(const void* src_v, int64_t start, int64_t width, int64_t row_width, int64_t b,
                    int64_t n, void* dst_v) {
  using T = typename Bits<kBytes>::type;
  const T* src = static_cast<const T*>(src_v);
  T* dst = static_cast<T*>(dst_v);
  int64_t r = b / row_width, c = b % row_width, j = 0;
  const int64_t lo = std::max<int64_t>(start, 0), hi = std::min(start + width, row_width);
  if (width == 1 && lo < hi) {                    // one column a row (RoPE's pairs): a strided copy
    int64_t first = c <= lo ? 0 : row_width - c;  // position of the first row's column
    first += lo - (c <= lo ? c : 0);
    for (int64_t p = first, rr = c <= lo ? r : r + 1; p < n; p += row_width, ++rr) {
      dst[p] = src[rr];
    }
    return;
  }
  while (j < n) {
    const int64_t end = std::min(row_width, c + (n - j));
    const int64_t k0 = std::max(c, lo), k1 = std::min(end, hi);
    for (int64_t k = k0; k < k1; ++k) dst[j + k - c] = src[r * width + k - start];
    j += end - c;
    c = 0;
    ++r;
  }
}

template <int kBytes>
void FillValue(const void* value, int64_t n, void* dst_v) {
  using T = typename Bits<kBytes>::type;
  T v;
  std::memcpy(&v, value, kBytes);
  std::fill(static_cast<T*>(dst_v), static_cast<T*>(dst_v) + n, v);
}
template <typename F>
void ByWidth(int64_t width, F&& f) {
  switch (width) {
    case 1:
      return f(std::integral_constant<int, 1>{});
    case 2:
      return f(std::integral_constant<int, 2>{});
    case 4:
      return f(std::integral_constant<int, 4>{});
    default:
      return f(std::integral_constant<int, 8>{});
  }
}

// Calls f(j, coord) for the n linear indices (contiguous from `base` when
// idx is null) in row-major `dims`; coord is updated in place.
template <typename F>
void ForEachCoord(const std::vector<int64_t>& dims, const int64_t* idx, int64_t base, int64_t n,
                  std::vector<int64_t>& coord, F&& f) {
  const int64_t rank = static_cast<int64_t>(dims.size());
  auto decompose = [&](int64_t k) {
    for (int64_t d = rank - 1; d >= 0; --d) {
      coord[d] = k % dims[d];
      k /= dims[d];
    }
  };
  if (idx != nullptr) {
    for (int64_t j = 0; j < n; ++j) {
      decompose(idx[j]);
      f(j, coord);
    }
    return;
  }
  decompose(base);
  for (int64_t j = 0; j < n; ++j) {
    f(j, coord);
    for (int64_t d = rank - 1; d >= 0; --d) {
      if (++coord[d] < dims[d]) break;
      coord[d] = 0;
    }
  }
}

// A thread's scratch: the plan's slots, each a tile of the widest element,
// plus a storage tile for half broadcasts and an index tile for iota. Kept
// per thread across calls (fusions run a tile at a time, often).
struct Scratch {
  std::vector<uint64_t> slots;
  std::vector<uint16_t> half = std::vector<uint16_t>(kTile);
  std::vector<int64_t> ints = std::vector<int64_t>(kTile);
  // Per level of a gathered chain: operand indices, positions, a value tile.
  std::vector<int64_t> levels;
  void Reserve(int32_t num_slots, int32_t max_depth) {
    const size_t need = static_cast<size_t>(num_slots) * kTile;
    if (slots.size() < need) slots.resize(need);
    const size_t need_levels = static_cast<size_t>(max_depth) * 3 * kTile;
    if (levels.size() < need_levels) levels.resize(need_levels);
  }
  void* slot(int32_t s) { return slots.data() + static_cast<size_t>(s) * kTile; }
  int64_t* level(int32_t l, int k) {
    return levels.data() + (static_cast<size_t>(l) * 3 + k) * kTile;
  }
};

Scratch& ThreadScratch(const FusionPlan& plan) {
  thread_local Scratch scratch;
  scratch.Reserve(plan.num_slots, plan.max_depth);
  return scratch;
}

class TileRunner {
 public:
  TileRunner(const FusionPlan& plan, std::vector<const void*> sources, void* out)
      : plan_(plan), sources_(std::move(sources)), out_(out), ptr_(plan.nodes.size()) {}

  // Element `origin` of the computed value goes to out[0] (an input
  // fusion's row buffer holds one row); 0 by default.
  void set_origin(int64_t origin) { origin_ = origin; }

  // Computes elements [b, b + n) of the value (n <= kTile).
  void Run(Scratch& scratch, int64_t b, int64_t n) {
    const std::vector<Node>& nodes = plan_.nodes;
    const int32_t root = static_cast<int32_t>(nodes.size()) - 1;
    const PrimitiveType out_type = plan_.shape.element_type();
    std::byte* out = static_cast<std::byte*>(out_) + (b - origin_) * ByteWidth(out_type);
    for (int32_t i = 0; i <= root; ++i) {
      const Node& node = nodes[i];
      if (!node.has_tile) continue;
      void* dst = node.slot >= 0 ? scratch.slot(node.slot) : (i == root ? out : nullptr);
      auto in = [&](int k) { return ptr_[node.operands[k]]; };
      switch (node.kind) {
        case NodeKind::kSource: {
          const std::byte* src = static_cast<const std::byte*>(Source(node));
          if (node.splat) {
            FillScalar(node, src, dst, n);
          } else if (IsHalf(node.type) && i != root) {
            cached::HalfToFloat(node.type, reinterpret_cast<const uint16_t*>(src) + b,
                                static_cast<float*>(dst), n);
          } else {
            dst = const_cast<std::byte*>(src) + b * ByteWidth(node.type);  // in place
          }
          break;
        }
        case NodeKind::kBroadcast: {
          const Node& source = nodes[node.operands[0]];
          const void* src = Source(source);
          if (IsHalf(node.type) && i != root) {
            Gather(node, node.dims, node.type, src, scratch.half.data(), b, n);
            cached::HalfToFloat(node.type, scratch.half.data(), static_cast<float*>(dst), n);
          } else {  // storage elements (f32, integers, pred; or the half root)
            Gather(node, node.dims, node.type, src, dst, b, n);
          }
          break;
        }
        case NodeKind::kIndexMap:
          if (IsHalf(node.type) && i != root) {
            GatherTree(scratch, i, nullptr, b, n, scratch.half.data(), 0);
            cached::HalfToFloat(node.type, scratch.half.data(), static_cast<float*>(dst), n);
          } else {
            GatherTree(scratch, i, nullptr, b, n, dst, 0);
          }
          break;
        case NodeKind::kReshape:
          dst = const_cast<void*>(in(0));
          break;
        case NodeKind::kIota: {
          int64_t* ints = scratch.ints.data();
          int64_t v = (b / node.iota_inner) % node.iota_extent, r = b % node.iota_inner;
          for (int64_t j = 0; j < n; ++j) {
            ints[j] = v;
            if (++r == node.iota_inner) {
              r = 0;
              if (++v == node.iota_extent) v = 0;
            }
          }
          ConvertElements(PrimitiveType::kS64, ints, node.repr, dst, n);
          break;
        }
        case NodeKind::kUnary:
          if (node.repr == PrimitiveType::kF32) {
            cached::UnaryFloat(node.op, static_cast<const float*>(in(0)), static_cast<float*>(dst),
                               n);
          } else if (node.repr == PrimitiveType::kPred) {
            NotPred(static_cast<const uint8_t*>(in(0)), static_cast<uint8_t*>(dst), n);
          } else {
            DispatchInt(node.repr, [&](auto* tag) {
              using T = std::remove_pointer_t<decltype(tag)>;
              UnaryInt(node.op, static_cast<const T*>(in(0)), static_cast<T*>(dst), n);
            });
          }
          break;
        case NodeKind::kBinary:
          if (node.repr == PrimitiveType::kF32) {
            cached::BinaryFloat(node.op, static_cast<const float*>(in(0)),
                                static_cast<const float*>(in(1)), static_cast<float*>(dst), n);
          } else if (node.repr == PrimitiveType::kPred) {
            BinaryPred(node.op, static_cast<const uint8_t*>(in(0)),
                       static_cast<const uint8_t*>(in(1)), static_cast<uint8_t*>(dst), n);
          } else {
            DispatchInt(node.repr, [&](auto* tag) {
              using T = std::remove_pointer_t<decltype(tag)>;
              BinaryInt(node.op, static_cast<const T*>(in(0)), static_cast<const T*>(in(1)),
                        static_cast<T*>(dst), n);
            });
          }
          break;
        case NodeKind::kCompare: {
          const PrimitiveType t = nodes[node.operands[0]].repr;
          uint8_t* o = static_cast<uint8_t*>(dst);
          if (t == PrimitiveType::kF32 && node.total_order) {
            CompareTotalOrder(node.direction, static_cast<const float*>(in(0)),
                              static_cast<const float*>(in(1)), o, n);
          } else if (t == PrimitiveType::kF32) {
            cached::Compare(node.direction, static_cast<const float*>(in(0)),
                            static_cast<const float*>(in(1)), o, n);
          } else if (t == PrimitiveType::kPred) {
            CompareValues(node.direction, static_cast<const uint8_t*>(in(0)),
                          static_cast<const uint8_t*>(in(1)), o, n);
          } else {
            DispatchInt(t, [&](auto* tag) {
              using T = std::remove_pointer_t<decltype(tag)>;
              CompareValues(node.direction, static_cast<const T*>(in(0)),
                            static_cast<const T*>(in(1)), o, n);
            });
          }
          break;
        }
        case NodeKind::kSelect: {
          const uint8_t* p = static_cast<const uint8_t*>(in(0));
          switch (ByteWidth(node.repr)) {
            case 1:
              SelectBytes<1>(p, false, in(1), in(2), dst, 0, n);
              break;
            case 2:
              SelectBytes<2>(p, false, in(1), in(2), dst, 0, n);
              break;
            case 4:
              SelectBytes<4>(p, false, in(1), in(2), dst, 0, n);
              break;
            default:
              SelectBytes<8>(p, false, in(1), in(2), dst, 0, n);
          }
          break;
        }
        case NodeKind::kClamp:
          if (node.repr == PrimitiveType::kF32) {
            cached::ClampFloat(static_cast<const float*>(in(0)), false,
                               static_cast<const float*>(in(1)), static_cast<const float*>(in(2)),
                               false, static_cast<float*>(dst), n);
          } else {
            DispatchInt(node.repr, [&](auto* tag) {
              using T = std::remove_pointer_t<decltype(tag)>;
              ClampInt(static_cast<const T*>(in(0)), false, static_cast<const T*>(in(1)),
                       static_cast<const T*>(in(2)), false, static_cast<T*>(dst), n);
            });
          }
          break;
        case NodeKind::kConvert: {
          const PrimitiveType from = nodes[node.operands[0]].repr;
          if (from == node.repr) {
            if (dst != in(0)) std::memcpy(dst, in(0), static_cast<size_t>(n) * ByteWidth(from));
          } else {
            ConvertElements(from, in(0), node.repr, dst, n);
          }
          break;
        }
      }
      // A half-typed value is rounded as a store would round it; the root
      // is rounded by its conversion into the output.
      const bool computed =
          node.kind != NodeKind::kSource && node.kind != NodeKind::kReshape &&
          !((node.kind == NodeKind::kBroadcast || node.kind == NodeKind::kIndexMap) && i == root);
      if (i == root && node.kind == NodeKind::kReshape && IsHalf(node.type)) {
        cached::FloatToHalf(node.type, static_cast<const float*>(dst),
                            reinterpret_cast<uint16_t*>(out), n);
      } else if (IsHalf(node.type) && computed) {
        if (i == root) {
          cached::FloatToHalf(node.type, static_cast<const float*>(dst),
                              reinterpret_cast<uint16_t*>(out), n);
        } else {
          cached::RoundToHalf(node.type, static_cast<float*>(dst), n);
        }
      } else if (i == root && dst != out) {
        std::memcpy(out, dst, static_cast<size_t>(n) * ByteWidth(out_type));
      }
      ptr_[i] = dst;
    }
  }

 private:
  // The storage elements of node `id` (gathered: a source, reshape, broadcast
  // or index map) at its linear indices idx[0..n) — or base, base + 1, ...
  // when idx is null — into dst. Composes the index maps down to the sources.
  void GatherTree(Scratch& scratch, int32_t id, const int64_t* idx, int64_t base, int64_t n,
                  void* dst, int32_t level) {
    const Node& node = plan_.nodes[id];
    const int64_t w = ByteWidth(node.type);
    if (node.kind == NodeKind::kSource) {
      const std::byte* src = static_cast<const std::byte*>(Source(node));
      if (idx == nullptr) {
        std::memcpy(dst, src + base * w, static_cast<size_t>(n * w));
      } else {
        ByWidth(w, [&](auto k) { GatherIdx<decltype(k)::value>(src, idx, n, dst); });
      }
      return;
    }
    if (node.kind == NodeKind::kReshape) {
      return GatherTree(scratch, node.operands[0], idx, base, n, dst, level);
    }
    int64_t* out_idx = scratch.level(level, 0);
    const int64_t rank = static_cast<int64_t>(node.dims.size());
    std::vector<int64_t> coord(rank, 0);
    if (node.affine) {
      if (rank == 0) {
        std::fill(out_idx, out_idx + n, node.offset);
      } else if (idx == nullptr) {  // runs along the last dimension
        const int64_t last = rank - 1, step = node.strides[last];
        const Node& operand = plan_.nodes[node.operands[0]];
        // Rows contiguous in a source (a slice or a transpose that keeps the
        // last dimension): copied a row at a time, no indices.
        const bool copy_rows = step == 1 && operand.kind == NodeKind::kSource;
        const std::byte* src = copy_rows ? static_cast<const std::byte*>(Source(operand)) : nullptr;
        ForEachRow(node.dims, base, n, coord, [&](int64_t j, int64_t run) {
          int64_t o = node.offset;
          for (int64_t d = 0; d < rank; ++d) o += coord[d] * node.strides[d];
          if (copy_rows) {
            std::memcpy(static_cast<std::byte*>(dst) + j * w, src + o * w,
                        static_cast<size_t>(run * w));
          } else {
            for (int64_t r = 0; r < run; ++r) out_idx[j + r] = o + r * step;
          }
        });
        if (copy_rows) return;
      } else {
        for (int64_t j = 0; j < n; ++j) {
          int64_t k = idx[j], o = node.offset;
          for (int64_t d = rank - 1; d >= 0; --d) {
            o += (k % node.dims[d]) * node.strides[d];
            k /= node.dims[d];
          }
          out_idx[j] = o;
        }
      }
      return GatherTree(scratch, node.operands[0], out_idx, 0, n, dst, level + 1);
    }
    if (!node.column_source.empty() && idx == nullptr) {
      if (node.op == HloOpcode::kPad) {
        const void* value = Source(plan_.nodes[node.operands[1]]);
        ByWidth(w, [&](auto k) { FillValue<decltype(k)::value>(value, n, dst); });
      }
      for (size_t k = 0; k < node.column_source.size(); ++k) {
        const void* src = Source(plan_.nodes[node.column_source[k]]);
        ByWidth(w, [&](auto width) {
          CopyColumnBand<decltype(width)::value>(src, node.column_start[k], node.column_width[k],
                                                 node.row_width, base, n, dst);
        });
      }
      return;
    }
    int64_t* pos = scratch.level(level, 1);
    void* tmp = scratch.level(level, 2);
    auto gather_part = [&](int32_t operand, int64_t m) {
      GatherTree(scratch, operand, out_idx, 0, m, tmp, level + 1);
      ByWidth(w, [&](auto k) { ScatterPos<decltype(k)::value>(tmp, pos, m, dst); });
    };
    if (node.op == HloOpcode::kPad) {
      const void* value = Source(plan_.nodes[node.operands[1]]);
      ByWidth(w, [&](auto k) { FillValue<decltype(k)::value>(value, n, dst); });
      const int64_t m = PadIndices(node, idx, base, n, coord, pos, out_idx);
      return gather_part(node.operands[0], m);
    }
    // concatenate: each operand's elements in turn.
    for (size_t part = 0; part < node.operands.size(); ++part) {
      const int64_t m = ConcatIndices(node, part, idx, base, n, coord, pos, out_idx);
      if (m > 0) gather_part(node.operands[part], m);
    }
  }

  // Operand index along dim d of pad `node` for coordinate c, or -1 where c
  // is padding. The modulo only where there is interior padding.
  static int64_t PadCoord(const Node& node, int64_t d, int64_t c) {
    int64_t t = c - node.pad_low[d];
    if (t < 0) return -1;
    if (node.pad_step[d] != 1) {
      if (t % node.pad_step[d] != 0) return -1;
      t /= node.pad_step[d];
    }
    return t < node.operand_dims[d] ? t : -1;
  }

  // The elements of pad `node` among the n linear indices (idx, or base,
  // base + 1, ...) that come from its operand: their positions j (pos) and
  // operand linear indices (out_idx); returns how many. The contiguous case
  // walks rows of the innermost dimension: the outer coordinates are checked
  // once per row.
  static int64_t PadIndices(const Node& node, const int64_t* idx, int64_t base, int64_t n,
                            std::vector<int64_t>& coord, int64_t* pos, int64_t* out_idx) {
    const int64_t rank = static_cast<int64_t>(node.dims.size());
    int64_t m = 0;
    if (idx != nullptr || rank == 0) {
      ForEachCoord(node.dims, idx, base, n, coord, [&](int64_t j, const std::vector<int64_t>& c) {
        int64_t o = 0;
        for (int64_t d = 0; d < rank; ++d) {
          const int64_t t = PadCoord(node, d, c[d]);
          if (t < 0) return;
          o = o * node.operand_dims[d] + t;
        }
        pos[m] = j;
        out_idx[m++] = o;
      });
      return m;
    }
    const int64_t last = rank - 1, inner = node.operand_dims[last];
    ForEachRow(node.dims, base, n, coord, [&](int64_t j, int64_t run) {
      int64_t o = 0;
      for (int64_t d = 0; d < last; ++d) {
        const int64_t t = PadCoord(node, d, coord[d]);
        if (t < 0) return;
        o = o * node.operand_dims[d] + t;
      }
      o *= inner;
      const int64_t c0 = coord[last];
      if (node.pad_step[last] == 1) {  // the operand's part of the row is one run
        const int64_t lo = std::max<int64_t>(0, node.pad_low[last] - c0);
        const int64_t hi = std::min<int64_t>(run, node.pad_low[last] + inner - c0);
        for (int64_t r = lo; r < hi; ++r) {
          pos[m] = j + r;
          out_idx[m++] = o + c0 + r - node.pad_low[last];
        }
        return;
      }
      for (int64_t r = 0; r < run; ++r) {
        const int64_t t = PadCoord(node, last, c0 + r);
        if (t < 0) continue;
        pos[m] = j + r;
        out_idx[m++] = o + t;
      }
    });
    return m;
  }

  // The elements of concatenate `node` among the n linear indices that come
  // from operand `part`: positions and the operand's linear indices, as
  // PadIndices; the contiguous case a row of the innermost dimension at a
  // time.
  static int64_t ConcatIndices(const Node& node, size_t part, const int64_t* idx, int64_t base,
                               int64_t n, std::vector<int64_t>& coord, int64_t* pos,
                               int64_t* out_idx) {
    const int64_t rank = static_cast<int64_t>(node.dims.size());
    const int64_t cd = node.concat_dim;
    const int64_t lo = node.concat_starts[part], hi = node.concat_starts[part + 1];
    int64_t m = 0;
    if (idx != nullptr) {
      ForEachCoord(node.dims, idx, base, n, coord, [&](int64_t j, const std::vector<int64_t>& c) {
        if (c[cd] < lo || c[cd] >= hi) return;
        int64_t o = 0;
        for (int64_t d = 0; d < rank; ++d) {
          o = d == cd ? o * (hi - lo) + (c[d] - lo) : o * node.dims[d] + c[d];
        }
        pos[m] = j;
        out_idx[m++] = o;
      });
      return m;
    }
    const int64_t last = rank - 1;
    ForEachRow(node.dims, base, n, coord, [&](int64_t j, int64_t run) {
      int64_t o = 0;
      for (int64_t d = 0; d < last; ++d) {
        if (d == cd) {
          if (coord[d] < lo || coord[d] >= hi) return;
          o = o * (hi - lo) + (coord[d] - lo);
        } else {
          o = o * node.dims[d] + coord[d];
        }
      }
      const int64_t c0 = coord[last];
      if (cd == last) {  // the part's columns of the row
        const int64_t r0 = std::max<int64_t>(0, lo - c0), r1 = std::min<int64_t>(run, hi - c0);
        o = o * (hi - lo);
        for (int64_t r = r0; r < r1; ++r) {
          pos[m] = j + r;
          out_idx[m++] = o + c0 + r - lo;
        }
        return;
      }
      o = o * node.dims[last] + c0;
      for (int64_t r = 0; r < run; ++r) {
        pos[m] = j + r;
        out_idx[m++] = o + r;
      }
    });
    return m;
  }

  const void* Source(const Node& node) const {
    return node.fusion_operand >= 0 ? sources_[node.fusion_operand]
                                    : plan_.constants[node.constant].raw_data();
  }
  // A rank-0 source splatted over the tile, in its tile representation.
  static void FillScalar(const Node& node, const std::byte* src, void* dst, int64_t n) {
    if (IsHalf(node.type)) {
      float v;
      cached::HalfToFloat(node.type, reinterpret_cast<const uint16_t*>(src), &v, 1);
      std::fill(static_cast<float*>(dst), static_cast<float*>(dst) + n, v);
      return;
    }
    const int64_t w = ByteWidth(node.type);
    for (int64_t j = 0; j < n; ++j) std::memcpy(static_cast<std::byte*>(dst) + j * w, src, w);
  }

  const FusionPlan& plan_;
  std::vector<const void*> sources_;  // per fusion operand
  void* out_;
  int64_t origin_ = 0;
  std::vector<const void*> ptr_;  // per node: its values for the current tile
};

const FusionPlan& GetPlan(const HloInstruction& instr, InstructionCache& cache) {
  if (const FusionPlan* plan = cache.Find<FusionPlan>(instr)) return *plan;
  return cache.Put(instr, MakeFusionPlan(instr));
}

}  // namespace

// An output fusion (kOutput): a dot of two parameters and a chain of add /
// multiply steps, each with the previous value (the dot first) and a
// parameter of the dot's shape; root the last step. The dot runs through
// eval_dot.cc's RunDot with one binary post-op per step.
struct OutputFusion {
  const HloInstruction* dot = nullptr;
  int64_t lhs = -1, rhs = -1;  // fusion operands
  struct Step {
    HloOpcode op;
    int64_t operand;  // the fusion operand of the step's other value
  };
  std::vector<Step> steps;  // from the dot outwards
};

OutputFusion AnalyzeOutputFusion(const HloInstruction& fusion) {
  auto fail = [&](std::string_view why) {
    Fail("output fusion '{}' (kind=kOutput) cannot be run: {}", fusion.name(), why);
  };
  if (fusion.called_computations().size() != 1 || fusion.called_computations()[0] == nullptr) {
    fail("it needs one fused computation (calls=)");
  }
  const HloComputation& fused = *fusion.called_computations()[0];
  const HloInstruction* x = fused.root_instruction();
  if (x == nullptr) fail(fmt::format("fused computation '{}' has no root", fused.name()));
  if (!fusion.shape().IsArray() || fusion.shape().element_type() != PrimitiveType::kF32) {
    fail(fmt::format("its result is {}, the executor runs f32 output fusions only",
                     fusion.shape().ToString()));
  }
  // The fusion operand a fused parameter stands for, checked against it.
  auto operand_of = [&](const HloInstruction* p) -> int64_t {
    const int64_t number = p->attrs().parameter_number;
    if (number < 0 || number >= fusion.operand_count()) {
      fail(fmt::format("parameter {} has no fusion operand (the fusion has {})", number,
                       fusion.operand_count()));
    }
    if (fusion.operand(number)->shape() != p->shape()) {
      fail(fmt::format("parameter {} is {} but the fusion operand is {}", number,
                       p->shape().ToString(), fusion.operand(number)->shape().ToString()));
    }
    return number;
  };
  OutputFusion out;
  std::vector<OutputFusion::Step> steps;  // from the root inwards
  while (x->opcode() != HloOpcode::kDot) {
    if ((x->opcode() != HloOpcode::kAdd && x->opcode() != HloOpcode::kMultiply) ||
        x->operand_count() != 2) {
      fail(fmt::format("its root is not a chain of add / multiply over a dot ({} is in the way)",
                       x->Describe()));
    }
    const bool p0 = x->operand(0)->opcode() == HloOpcode::kParameter;
    const bool p1 = x->operand(1)->opcode() == HloOpcode::kParameter;
    if (p0 == p1) {
      fail(fmt::format("{} must combine the chain's value with one parameter", x->Describe()));
    }
    const HloInstruction* other = p0 ? x->operand(0) : x->operand(1);
    if (x->shape() != fusion.shape() || other->shape() != fusion.shape()) {
      fail(fmt::format("{} and its parameter must have the dot's shape {}", x->Describe(),
                       fusion.shape().ToString()));
    }
    steps.push_back({x->opcode(), operand_of(other)});
    x = p0 ? x->operand(1) : x->operand(0);
  }
  if (steps.empty()) fail("its root is the dot itself (no add / multiply after it)");
  if (x->operand_count() != 2 || x->operand(0)->opcode() != HloOpcode::kParameter ||
      x->operand(1)->opcode() != HloOpcode::kParameter) {
    fail(fmt::format("the dot {} must read two parameters", x->Describe()));
  }
  if (x->shape() != fusion.shape() ||
      x->operand(0)->shape().element_type() != PrimitiveType::kF32 ||
      x->operand(1)->shape().element_type() != PrimitiveType::kF32) {
    fail(fmt::format("the dot {} must be f32 of f32 operands with the fusion's shape {}",
                     x->Describe(), fusion.shape().ToString()));
  }
  CheckDot(*x);
  out.dot = x;
  out.lhs = operand_of(x->operand(0));
  out.rhs = operand_of(x->operand(1));
  out.steps.assign(steps.rbegin(), steps.rend());
  return out;
}

Value EvalOutputFusion(const HloInstruction& instr, EvalArgs& args) {
  const OutputFusion f = AnalyzeOutputFusion(instr);
  std::vector<DotPostOp> post_ops;
  for (const OutputFusion::Step& step : f.steps) {
    post_ops.push_back({step.op, &args.array(step.operand)});
  }
  return RunDot(*f.dot, instr, args.array(f.lhs), args.array(f.rhs), post_ops, args);
}

void CheckFusion(const HloInstruction& instr) {
  if (instr.attrs().fusion_kind == FusionKind::kOutput) {
    AnalyzeOutputFusion(instr);
  } else {
    MakeFusionPlan(instr);
  }
}

// An input fusion: each output element folds its row of the reduce's input,
// computed a tile at a time into a row buffer, as EvalReduce folds a
// contiguous row (FoldRowF32): the unfused bits.
Value EvalInputFusion(const FusionPlan& plan, const HloInstruction& instr, EvalArgs& args,
                      const std::vector<const void*>& sources) {
  HostTensor out = args.ctx().Allocate(instr.shape());
  float* result = out.mutable_data<float>();
  const int64_t rows = out.element_count(), row = plan.row;
  const float init =
      plan.init_operand >= 0 ? args.array(plan.init_operand).data<float>()[0] : plan.init_value;
  if (row == 0) {  // empty rows: nothing to fold, every output is the init value
    std::fill(result, result + rows, init);
    return Value{std::move(out)};
  }
  ParallelRanges(rows, std::max<int64_t>(1, kParallelChunk / row),
                 args.ctx().options().use_thread_pool, [&](int64_t begin, int64_t end) {
                   Scratch& scratch = ThreadScratch(plan);
                   thread_local std::vector<float> values;
                   if (static_cast<int64_t>(values.size()) < row) values.resize(row);
                   TileRunner runner(plan, sources, values.data());
                   for (int64_t r = begin; r < end; ++r) {
                     const int64_t first = r * row;
                     runner.set_origin(first);
                     for (int64_t b = first; b < first + row; b += kTile) {
                       runner.Run(scratch, b, std::min(kTile, first + row - b));
                     }
                     result[r] = FoldRowF32(plan.reducer, init, values.data(), row);
                   }
                 });
  return Value{std::move(out)};
}

Value EvalFusion(const HloInstruction& instr, EvalArgs& args) {
  if (instr.attrs().fusion_kind == FusionKind::kOutput) return EvalOutputFusion(instr, args);
  const FusionPlan& plan = GetPlan(instr, args.cache());
  std::vector<const void*> sources;
  for (int64_t i = 0; i < args.size(); ++i) sources.push_back(args.array(i).raw_data());
  if (plan.input) return EvalInputFusion(plan, instr, args, sources);
  // Take over a dying operand's buffer as eval_elementwise would; not one
  // that a broadcast also reads (through the same storage).
  HostTensor out;
  for (int64_t i : plan.reuse_candidates) {
    const bool read_elsewhere =
        std::any_of(plan.broadcast_sources.begin(), plan.broadcast_sources.end(),
                    [&](int64_t k) { return args.array(k).storage() == args.array(i).storage(); });
    if (read_elsewhere) continue;
    out = args.TryReuse(i, plan.shape);
    if (out.valid()) break;
  }
  if (!out.valid()) out = args.ctx().Allocate(plan.shape);
  const int64_t n = plan.shape.ElementsCount();
  ParallelRanges(n, kParallelChunk, args.ctx().options().use_thread_pool,
                 [&](int64_t begin, int64_t end) {
                   Scratch& scratch = ThreadScratch(plan);
                   TileRunner runner(plan, sources, out.mutable_raw_data());
                   for (int64_t b = begin; b < end; b += kTile) {
                     runner.Run(scratch, b, std::min(kTile, end - b));
                   }
                 });
  return Value{std::move(out)};
}

}  // namespace weft::runtime::exec
