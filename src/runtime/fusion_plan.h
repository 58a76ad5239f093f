// Internal to the executor's fusion evaluator (eval_fusion.cc): the plan
// of a fused computation run a tile at a time (fusion_tiles.h runs it).
//
// The plan walks the fused computation from its root in post order, one
// Node per instruction, and decides per node how a tile of it is made:
//  - aligned nodes are computed per tile at the tile's own linear indices
//    (every one has the fusion's element count, or is a splatted scalar);
//  - gathered nodes (sources, reshapes, broadcasts and index maps below an
//    index map or a broadcast) are read at the indices the maps above them
//    compose;
//  - a source is a fusion parameter, a constant, or a convolution of fused
//    parameters evaluated whole before the tiles (eval_convolution.cc).
// Scratch slots, one tile each, are given out by liveness over the walk; the
// root writes the output buffer directly unless it is a source, a reshape
// or of a half type.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "elementwise_kernels.h"
#include "executor_eval.h"

namespace weft::runtime::exec::fusion {

constexpr int64_t kTile = 2048;  // elements per tile (values stay in L1/L2)

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
inline PrimitiveType ReprType(PrimitiveType t) { return IsHalf(t) ? PrimitiveType::kF32 : t; }

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
  // The tile holds bf16 bits, not f32 values: a bf16 source read in place
  // whose every user (through reshapes, which are then raw too) is a unary
  // or binary node, whose kernel widens it as it reads (PlanRawSources).
  bool raw_bf16 = false;
  bool splat = false;    // kSource of rank 0 in a fusion of rank > 0
  bool has_tile = true;  // false: a source only broadcasts read
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
  // The same map over fewer dims (PlanRuns): size-1 dims dropped, and each
  // pair of adjacent dims merged where the operand holds them contiguously
  // (strides[d] == strides[d + 1] * dims[d + 1]), so rows run longer.
  std::vector<int64_t> run_dims, run_strides;
  // A periodic map (its outermost run dim is the node's own linear index,
  // the inner ones span at most kMaxPeriod elements with short rows, as
  // reversing RoPE's pairs does): index i reads i - i % period +
  // period_map[i % period], offset included. 0: not periodic.
  int64_t period = 0;
  std::vector<int64_t> period_map;
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
  // Convolutions of fused parameters, evaluated whole before the tiles
  // (eval_convolution.cc); convolution k is read as the source numbered
  // num_operands + k.
  int64_t num_operands = 0;
  std::vector<const HloInstruction*> convolutions;
};

// Whether the fusion's computation holds a convolution (then it is planned
// as a loop over the convolution's result, whatever its kind).
bool FusesConvolution(const HloInstruction& fusion);

// The plan of a kLoop or kInput fusion, or of a kOutput fusion of a
// convolution; throws weft::Error naming what it cannot run.
std::shared_ptr<FusionPlan> MakeFusionPlan(const HloInstruction& fusion);

}  // namespace weft::runtime::exec::fusion
