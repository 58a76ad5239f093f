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
#include "weft/base/error.h"
#include "weft/hlo/computation.h"
#include "weft/runtime/executor_eval.h"

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
  // Fusion operands some broadcast reads (at other indices than its own).
  std::vector<int64_t> broadcast_sources;
};

HostTensor MaterializeConstant(const HloInstruction& instr) {
  const Literal& literal = instr.literal();
  const Shape& shape = instr.shape();
  HostTensor t = HostTensor::Uninitialized(shape);
  for (int64_t i = 0; i < literal.size(); ++i) {
    if (IsFloatingPoint(shape.element_type())) {
      StoreDouble(shape.element_type(), t.mutable_raw_data(), i, literal.Get(i));
    } else {  // exact 64-bit integers, wrapped to the type
      const int64_t v = literal.GetInt(i);
      ConvertElements(PrimitiveType::kS64, &v, shape.element_type(),
                      static_cast<std::byte*>(t.mutable_raw_data()) + i * ByteWidth(shape.element_type()),
                      1);
    }
  }
  return t;
}

std::shared_ptr<FusionPlan> MakeFusionPlan(const HloInstruction& fusion) {
  WEFT_CHECK(fusion.attrs().fusion_kind == FusionKind::kLoop,
             "fusion kind {} is not supported by the executor (only kLoop)",
             FusionKindString(fusion.attrs().fusion_kind));
  WEFT_CHECK(fusion.called_computations().size() == 1 && fusion.called_computations()[0] != nullptr,
             "fusion needs one fused computation (calls=)");
  const HloComputation& fused = *fusion.called_computations()[0];
  WEFT_CHECK(fusion.shape().IsArray() && IsFusibleElementType(fusion.shape().element_type()),
             "a loop fusion's result must be an array of f32, bf16, f16, s32, s64, u32 or pred; "
             "got {}",
             fusion.shape().ToString());
  auto plan = std::make_shared<FusionPlan>();
  plan->shape = fusion.shape();
  const std::vector<int64_t>& dims = fusion.shape().dimensions();
  const int64_t rank = fusion.shape().rank();
  const std::vector<HloInstruction*> order = fused.MakeInstructionPostOrder();
  WEFT_CHECK(!order.empty() && order.back() == fused.root_instruction(),
             "fused computation '{}' has no root", fused.name());
  std::unordered_map<const HloInstruction*, int32_t> index;
  auto fail = [&](const HloInstruction* instr, std::string_view why) {
    Fail("fused instruction {} of '{}': {}", instr->Describe(), fused.name(), why);
  };
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
    for (const HloInstruction* operand : instr->operands()) node.operands.push_back(index.at(operand));
    const bool full = instr->shape().dimensions() == dims;
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
      node.in_place = full;
      node.splat = !full && instr->shape().rank() == 0;
      node.has_tile = false;  // set below when an elementwise user reads it
    } else if (op == HloOpcode::kBroadcast) {
      node.kind = NodeKind::kBroadcast;
      if (!full) fail(instr, "a broadcast in a loop fusion must have the fusion's dimensions");
      const Node& source = plan->nodes[node.operands.at(0)];
      if (source.kind != NodeKind::kSource) {
        fail(instr, "a broadcast in a loop fusion must read a parameter or a constant");
      }
      const Shape& in = instr->operand(0)->shape();
      const std::vector<int64_t>& bdims = instr->dimensions();
      WEFT_CHECK(static_cast<int64_t>(bdims.size()) == in.rank(), "broadcast dimensions {} do not match operand rank {}",
                 bdims.size(), in.rank());
      node.source_count = in.ElementsCount();
      node.source_strides.assign(rank, 0);
      const std::vector<int64_t> in_strides = RowMajorStrides(in.dimensions());
      bool suffix = true, prefix = true;
      for (int64_t i = 0; i < in.rank(); ++i) {
        WEFT_CHECK(bdims[i] >= 0 && bdims[i] < rank && dims[bdims[i]] == in.dimensions(i),
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
        node.row = plan->shape.ElementsCount() / node.source_count;
      }
    } else if (op == HloOpcode::kIota) {
      node.kind = NodeKind::kIota;
      if (!full) fail(instr, "an iota in a loop fusion must have the fusion's dimensions");
      const int64_t d = instr->attrs().iota_dimension;
      WEFT_CHECK(d >= 0 && d < rank, "iota dimension {} out of range", d);
      node.iota_extent = dims[d];
      for (int64_t i = d + 1; i < rank; ++i) node.iota_inner *= dims[i];
    } else if (IsElementwise(op) && op != HloOpcode::kCopy) {
      if (!full) fail(instr, "an elementwise op in a loop fusion must have the fusion's dimensions");
      CheckElementwise(*instr);
      node.kind = op == HloOpcode::kCompare  ? NodeKind::kCompare
                  : op == HloOpcode::kSelect ? NodeKind::kSelect
                  : op == HloOpcode::kClamp  ? NodeKind::kClamp
                  : op == HloOpcode::kConvert ? NodeKind::kConvert
                  : IsElementwiseUnary(op)    ? NodeKind::kUnary
                                              : NodeKind::kBinary;
      node.direction = instr->attrs().comparison_direction;
      for (int32_t k : node.operands) {
        Node& operand = plan->nodes[k];
        const bool operand_full = operand.instr->shape().dimensions() == dims;
        if (operand.kind == NodeKind::kSource) {
          if (!operand_full && !operand.splat) fail(instr, "operand shapes differ from the fusion's");
          operand.has_tile = true;
        } else if (!operand_full) {
          fail(instr, "operand shapes differ from the fusion's");
        }
      }
    } else {
      fail(instr, fmt::format("{} is not supported in a loop fusion", HloOpcodeString(op)));
    }
    index.emplace(instr, static_cast<int32_t>(plan->nodes.size()));
    plan->nodes.push_back(std::move(node));
  }
  std::vector<Node>& nodes = plan->nodes;
  const int32_t root = static_cast<int32_t>(nodes.size()) - 1;
  WEFT_CHECK(nodes[root].instr->shape() == fusion.shape(),
             "fusion result {} differs from its fused root {}", fusion.shape().ToString(),
             nodes[root].instr->shape().ToString());
  if (nodes[root].kind == NodeKind::kSource) nodes[root].has_tile = true;

  // Sources read in place become reuse candidates unless a broadcast reads
  // the same operand.
  for (const Node& node : nodes) {
    if (node.kind == NodeKind::kBroadcast) {
      const Node& source = nodes[node.operands[0]];
      if (source.fusion_operand >= 0) plan->broadcast_sources.push_back(source.fusion_operand);
    }
  }
  for (const Node& node : nodes) {
    if (node.kind == NodeKind::kSource && node.fusion_operand >= 0 && node.in_place &&
        std::find(plan->broadcast_sources.begin(), plan->broadcast_sources.end(),
                  node.fusion_operand) == plan->broadcast_sources.end()) {
      plan->reuse_candidates.push_back(node.fusion_operand);
    }
  }

  // Scratch slots by liveness over the walk; the root writes the output
  // directly unless it is a source or of a half type (converted at the end).
  for (int32_t i = 0; i <= root; ++i) {
    for (int32_t k : nodes[i].operands) nodes[k].last_use = i;
  }
  plan->root_to_output = nodes[root].kind != NodeKind::kSource && !IsHalf(nodes[root].type);
  std::vector<int32_t> free_slots;
  for (int32_t i = 0; i <= root; ++i) {
    Node& node = nodes[i];
    const bool needs_slot = node.has_tile && !(node.kind == NodeKind::kSource && node.in_place &&
                                               !IsHalf(node.type)) &&
                            !(i == root && plan->root_to_output);
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
  int64_t rem = b;
  for (int64_t d = rank - 1; d >= 0; --d) {
    coord[d] = rem % dims[d];
    rem /= dims[d];
  }
  const std::vector<int64_t>& stride = node.source_strides;
  const int64_t last = rank - 1, inner_stride = stride[last];
  int64_t j = 0;
  while (j < n) {
    int64_t base = 0;
    for (int64_t d = 0; d < rank; ++d) base += coord[d] * stride[d];
    const int64_t run = std::min(n - j, dims[last] - coord[last]);
    if (inner_stride == 0) {
      std::fill(dst + j, dst + j + run, src[base]);
    } else if (inner_stride == 1) {
      std::memcpy(dst + j, src + base, static_cast<size_t>(run) * kBytes);
    } else {
      for (int64_t i = 0; i < run; ++i) dst[j + i] = src[base + i * inner_stride];
    }
    j += run;
    coord[last] += run;
    for (int64_t d = last; d > 0 && coord[d] == dims[d]; --d) {
      coord[d] = 0;
      ++coord[d - 1];
    }
  }
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

// A thread's scratch: the plan's slots, each a tile of the widest element,
// plus a storage tile for half broadcasts and an index tile for iota. Kept
// per thread across calls (fusions run a tile at a time, often).
struct Scratch {
  std::vector<uint64_t> slots;
  std::vector<uint16_t> half = std::vector<uint16_t>(kTile);
  std::vector<int64_t> ints = std::vector<int64_t>(kTile);
  void Reserve(int32_t num_slots) {
    const size_t need = static_cast<size_t>(num_slots) * kTile;
    if (slots.size() < need) slots.resize(need);
  }
  void* slot(int32_t s) { return slots.data() + static_cast<size_t>(s) * kTile; }
};

Scratch& ThreadScratch(int32_t num_slots) {
  thread_local Scratch scratch;
  scratch.Reserve(num_slots);
  return scratch;
}

class TileRunner {
 public:
  TileRunner(const FusionPlan& plan, std::vector<const void*> sources, void* out)
      : plan_(plan), sources_(std::move(sources)), out_(out), ptr_(plan.nodes.size()) {}

  // Computes output elements [b, b + n) (n <= kTile).
  void Run(Scratch& scratch, int64_t b, int64_t n) {
    const std::vector<Node>& nodes = plan_.nodes;
    const int32_t root = static_cast<int32_t>(nodes.size()) - 1;
    const PrimitiveType out_type = plan_.shape.element_type();
    std::byte* out = static_cast<std::byte*>(out_) + b * ByteWidth(out_type);
    for (int32_t i = 0; i <= root; ++i) {
      const Node& node = nodes[i];
      if (!node.has_tile && node.kind == NodeKind::kSource) continue;
      void* dst = node.slot >= 0 ? scratch.slot(node.slot) : (i == root ? out : nullptr);
      auto in = [&](int k) { return ptr_[node.operands[k]]; };
      switch (node.kind) {
        case NodeKind::kSource: {
          const std::byte* src = static_cast<const std::byte*>(Source(node));
          if (node.splat) {
            FillScalar(node, src, dst, n);
          } else if (IsHalf(node.type) && i != root) {
            HalfToFloat(node.type, reinterpret_cast<const uint16_t*>(src) + b,
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
            Gather(node, plan_.shape.dimensions(), node.type, src, scratch.half.data(), b, n);
            HalfToFloat(node.type, scratch.half.data(), static_cast<float*>(dst), n);
          } else {  // storage elements (f32, integers, pred; or the half root)
            Gather(node, plan_.shape.dimensions(), node.type, src, dst, b, n);
          }
          break;
        }
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
            UnaryFloat(node.op, static_cast<const float*>(in(0)), static_cast<float*>(dst), n);
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
            BinaryFloat(node.op, static_cast<const float*>(in(0)), static_cast<const float*>(in(1)),
                        static_cast<float*>(dst), n);
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
          if (t == PrimitiveType::kF32) {
            Compare(node.direction, static_cast<const float*>(in(0)),
                    static_cast<const float*>(in(1)), o, n);
          } else if (t == PrimitiveType::kPred) {
            Compare(node.direction, static_cast<const uint8_t*>(in(0)),
                    static_cast<const uint8_t*>(in(1)), o, n);
          } else {
            DispatchInt(t, [&](auto* tag) {
              using T = std::remove_pointer_t<decltype(tag)>;
              Compare(node.direction, static_cast<const T*>(in(0)), static_cast<const T*>(in(1)),
                      o, n);
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
            ClampFloat(static_cast<const float*>(in(0)), false, static_cast<const float*>(in(1)),
                       static_cast<const float*>(in(2)), false, static_cast<float*>(dst), n);
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
      const bool computed = node.kind != NodeKind::kSource &&
                            !(node.kind == NodeKind::kBroadcast && i == root);
      if (IsHalf(node.type) && computed) {
        if (i == root) {
          FloatToHalf(node.type, static_cast<const float*>(dst), reinterpret_cast<uint16_t*>(out), n);
        } else {
          RoundToHalf(node.type, static_cast<float*>(dst), n);
        }
      } else if (i == root && dst != out) {
        std::memcpy(out, dst, static_cast<size_t>(n) * ByteWidth(out_type));
      }
      ptr_[i] = dst;
    }
  }

 private:
  const void* Source(const Node& node) const {
    return node.fusion_operand >= 0 ? sources_[node.fusion_operand]
                                    : plan_.constants[node.constant].raw_data();
  }
  // A rank-0 source splatted over the tile, in its tile representation.
  static void FillScalar(const Node& node, const std::byte* src, void* dst, int64_t n) {
    if (IsHalf(node.type)) {
      float v;
      HalfToFloat(node.type, reinterpret_cast<const uint16_t*>(src), &v, 1);
      std::fill(static_cast<float*>(dst), static_cast<float*>(dst) + n, v);
      return;
    }
    const int64_t w = ByteWidth(node.type);
    for (int64_t j = 0; j < n; ++j) std::memcpy(static_cast<std::byte*>(dst) + j * w, src, w);
  }

  const FusionPlan& plan_;
  std::vector<const void*> sources_;  // per fusion operand
  void* out_;
  std::vector<const void*> ptr_;  // per node: its values for the current tile
};

const FusionPlan& GetPlan(const HloInstruction& instr, InstructionCache& cache) {
  if (const FusionPlan* plan = cache.Find<FusionPlan>(instr)) return *plan;
  return cache.Put(instr, MakeFusionPlan(instr));
}

}  // namespace

void CheckFusion(const HloInstruction& instr) { MakeFusionPlan(instr); }

Value EvalFusion(const HloInstruction& instr, EvalArgs& args) {
  const FusionPlan& plan = GetPlan(instr, args.cache());
  std::vector<const void*> sources;
  for (int64_t i = 0; i < args.size(); ++i) sources.push_back(args.array(i).raw_data());
  // Take over a dying operand's buffer as eval_elementwise would; not one
  // that a broadcast also reads (through the same storage).
  HostTensor out;
  for (int64_t i : plan.reuse_candidates) {
    const bool read_elsewhere =
        std::any_of(plan.broadcast_sources.begin(), plan.broadcast_sources.end(), [&](int64_t k) {
          return args.array(k).storage() == args.array(i).storage();
        });
    if (read_elsewhere) continue;
    out = args.TryReuse(i, plan.shape);
    if (out.valid()) break;
  }
  if (!out.valid()) out = args.ctx().Allocate(plan.shape);
  const int64_t n = plan.shape.ElementsCount();
  ParallelRanges(n, kParallelChunk, args.ctx().options().use_thread_pool,
                 [&](int64_t begin, int64_t end) {
                   Scratch& scratch = ThreadScratch(plan.num_slots);
                   TileRunner runner(plan, sources, out.mutable_raw_data());
                   for (int64_t b = begin; b < end; b += kTile) {
                     runner.Run(scratch, b, std::min(kTile, end - b));
                   }
                 });
  return Value{std::move(out)};
}

}  // namespace weft::runtime::exec
