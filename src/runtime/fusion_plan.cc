// The plan of a fused computation (fusion_plan.h): one node per fused
// instruction in post order (MakeNode), then the named steps over them —
// column bands, regions (aligned and gathered), reuse candidates, scratch
// slots.
#include "fusion_plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "weft/base/error.h"
#include "weft/compiler/fusion.h"
#include "weft/hlo/computation.h"

namespace weft::runtime::exec::fusion {
namespace {

// `root` and what it reads inside its computation, operands first; a
// convolution's operands are not walked (it is evaluated whole).
std::vector<const HloInstruction*> PostOrderFrom(const HloInstruction* root) {
  std::vector<const HloInstruction*> order;
  std::unordered_map<const HloInstruction*, bool> seen;
  std::vector<std::pair<const HloInstruction*, int64_t>> stack{{root, 0}};
  seen[root] = true;
  while (!stack.empty()) {
    auto& [instr, next] = stack.back();
    if (instr->opcode() != HloOpcode::kConvolution && next < instr->operand_count()) {
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

// A fused parameter must stand for the fusion operand of its number.
void CheckFusedParameter(const HloInstruction& fusion, const HloInstruction& parameter) {
  const int64_t number = parameter.parameter_number();
  WEFT_CHECK(number >= 0 && number < fusion.operand_count() &&
                 fusion.operand(number)->shape() == parameter.shape(),
             "fused parameter {} does not match operand {} of the fusion", parameter.Describe(),
             number);
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
[[noreturn]] void FailAt(const HloComputation& fused, const HloInstruction* instr,
                         std::string_view why) {
  Fail("fused instruction {} of '{}': {}", instr->Describe(), fused.name(), why);
}

// A convolution of fused parameters: a source computed whole before the
// tiles, numbered after the fusion's operands.
void PlanConvolutionNode(const HloInstruction& fusion, const HloComputation& fused,
                         const HloInstruction* instr, FusionPlan& plan, Node& node) {
  for (const HloInstruction* operand : instr->operands()) {
    if (operand->opcode() != HloOpcode::kParameter) {
      FailAt(fused, instr,
             fmt::format("a fused convolution must read fused parameters, not {}",
                         operand->Describe()));
    }
    CheckFusedParameter(fusion, *operand);
  }
  CheckConvolution(*instr);
  node.kind = NodeKind::kSource;
  node.fusion_operand = plan.num_operands + static_cast<int64_t>(plan.convolutions.size());
  plan.convolutions.push_back(instr);
  node.has_tile = false;  // set by PlanRegions when an aligned user reads it
}

// A parameter or a constant.
void PlanSourceNode(const HloInstruction& fusion, const HloInstruction* instr, FusionPlan& plan,
                    Node& node) {
  node.kind = NodeKind::kSource;
  if (instr->opcode() == HloOpcode::kParameter) {
    CheckFusedParameter(fusion, *instr);
    node.fusion_operand = instr->parameter_number();
  } else {
    node.constant = static_cast<int32_t>(plan.constants.size());
    plan.constants.push_back(MaterializeConstant(*instr));
  }
  node.has_tile = false;  // set by PlanRegions when an aligned user reads it
}

// An affine node's merged run dims and, where it pays, its periodic map.
void PlanRuns(Node& node) {
  constexpr int64_t kMaxPeriod = 4096, kShortRow = 32;
  node.run_dims.clear();
  node.run_strides.clear();
  for (size_t d = 0; d < node.dims.size(); ++d) {
    if (node.dims[d] == 1) continue;
    if (!node.run_dims.empty() && node.run_strides.back() == node.strides[d] * node.dims[d]) {
      node.run_dims.back() *= node.dims[d];
      node.run_strides.back() = node.strides[d];
    } else {
      node.run_dims.push_back(node.dims[d]);
      node.run_strides.push_back(node.strides[d]);
    }
  }
  if (node.run_dims.empty()) {
    node.run_dims = {1};
    node.run_strides = {0};
  }
  const int64_t rank = static_cast<int64_t>(node.run_dims.size());
  if (rank < 2) return;
  int64_t period = 1;
  for (int64_t d = 1; d < rank; ++d) period *= node.run_dims[d];
  const bool short_rows = node.run_strides.back() != 1 || node.run_dims.back() < kShortRow;
  if (node.run_strides[0] != period || period > kMaxPeriod || !short_rows) return;
  node.period = period;
  node.period_map.resize(static_cast<size_t>(period));
  for (int64_t r = 0; r < period; ++r) {
    int64_t k = r, o = node.offset;
    for (int64_t d = rank - 1; d >= 1; --d) {
      o += (k % node.run_dims[d]) * node.run_strides[d];
      k /= node.run_dims[d];
    }
    node.period_map[static_cast<size_t>(r)] = o;
  }
}

void PlanBroadcastNode(const HloInstruction* instr, const FusionPlan& plan, Node& node) {
  const int64_t rank = instr->shape().rank();
  node.kind = NodeKind::kBroadcast;
  const Shape& in = instr->operand(0)->shape();
  const std::vector<int64_t>& bdims = instr->dimensions();
  WEFT_CHECK(static_cast<int64_t>(bdims.size()) == in.rank(),
             "broadcast dimensions {} do not match operand rank {}", bdims.size(), in.rank());
  node.source_count = in.ElementsCount();
  node.source_strides.assign(rank, 0);
  const DimensionVector in_strides = RowMajorStrides(in.dimensions());
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
  PlanRuns(node);
  // Read from a source directly (the fast modes) or through index maps.
  if (plan.nodes[node.operands[0]].kind != NodeKind::kSource) node.kind = NodeKind::kIndexMap;
}

// Transpose, slice, reverse, pad, concatenate.
void PlanIndexMapNode(const HloComputation& fused, const HloInstruction* instr, Node& node) {
  const HloOpcode op = instr->opcode();
  const int64_t rank = instr->shape().rank();
  node.kind = NodeKind::kIndexMap;
  const Shape& in = instr->operand(0)->shape();
  node.operand_dims = in.dimensions();
  const DimensionVector in_strides = RowMajorStrides(in.dimensions());
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
      FailAt(fused, instr, "a pad's value in a loop fusion must be a parameter or a constant");
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
  if (node.affine) PlanRuns(node);
}

// The node of `instr`, whose operands (but a convolution's) are planned.
Node MakeNode(const HloInstruction& fusion, const HloComputation& fused,
              const HloInstruction* instr,
              const std::unordered_map<const HloInstruction*, int32_t>& index, FusionPlan& plan) {
  Node node;
  node.instr = instr;
  node.op = instr->opcode();
  if (!instr->shape().IsArray() || !IsFusibleElementType(instr->shape().element_type())) {
    FailAt(fused, instr,
           fmt::format("element type of {} is not supported in a loop fusion",
                       instr->shape().ToString()));
  }
  node.type = instr->shape().element_type();
  node.repr = ReprType(node.type);
  node.dims = instr->shape().dimensions();
  const HloOpcode op = instr->opcode();
  if (op != HloOpcode::kConvolution) {
    for (const HloInstruction* operand : instr->operands())
      node.operands.push_back(index.at(operand));
  }
  if (op == HloOpcode::kConvolution) {
    PlanConvolutionNode(fusion, fused, instr, plan, node);
  } else if (op == HloOpcode::kParameter || op == HloOpcode::kConstant) {
    PlanSourceNode(fusion, instr, plan, node);
  } else if (op == HloOpcode::kBroadcast) {
    PlanBroadcastNode(instr, plan, node);
  } else if (op == HloOpcode::kIota) {
    node.kind = NodeKind::kIota;
    const int64_t rank = instr->shape().rank();
    const int64_t d = instr->attrs().iota_dimension;
    WEFT_CHECK(d >= 0 && d < rank, "iota dimension {} out of range", d);
    node.iota_extent = node.dims[d];
    for (int64_t i = d + 1; i < rank; ++i) node.iota_inner *= node.dims[i];
  } else if (op == HloOpcode::kReshape) {
    node.kind = NodeKind::kReshape;
    if (instr->operand(0)->shape().ElementsCount() != instr->shape().ElementsCount()) {
      FailAt(fused, instr, "reshape changes the element count");
    }
  } else if (IsIndexMapOp(op)) {
    PlanIndexMapNode(fused, instr, node);
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
    FailAt(fused, instr, fmt::format("{} is not supported in a loop fusion", HloOpcodeString(op)));
  }
  return node;
}

void PlanColumnBands(std::vector<Node>& nodes) {
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
}

void PlanRegions(const HloComputation& fused, FusionPlan& plan) {
  std::vector<Node>& nodes = plan.nodes;
  const int32_t root = static_cast<int32_t>(nodes.size()) - 1;
  const int64_t count = plan.shape.ElementsCount();
  auto fail = [&](const HloInstruction* instr, std::string_view why) { FailAt(fused, instr, why); };
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
        node.splat = instr->shape().rank() == 0 && plan.shape.rank() > 0;
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
    plan.max_depth = std::max(plan.max_depth, depth[i] + 1);
  }
  for (Node& node : nodes) {
    if (!node.aligned && node.kind != NodeKind::kSource) node.has_tile = false;
  }
}

void PlanReuse(FusionPlan& plan) {
  const std::vector<Node>& nodes = plan.nodes;
  for (const Node& node : nodes) {
    if (node.kind == NodeKind::kSource && node.gathered && node.fusion_operand >= 0 &&
        node.fusion_operand < plan.num_operands) {
      plan.broadcast_sources.push_back(node.fusion_operand);
    }
  }
  for (const Node& node : nodes) {
    if (plan.input) break;  // the result is smaller than its input
    if (node.kind == NodeKind::kSource && node.fusion_operand >= 0 &&
        node.fusion_operand < plan.num_operands && node.in_place &&
        std::find(plan.broadcast_sources.begin(), plan.broadcast_sources.end(),
                  node.fusion_operand) == plan.broadcast_sources.end()) {
      plan.reuse_candidates.push_back(node.fusion_operand);
    }
  }
}

void PlanRawSources(FusionPlan& plan) {
  std::vector<Node>& nodes = plan.nodes;
  const int32_t root = static_cast<int32_t>(nodes.size()) - 1;
  std::vector<std::vector<int32_t>> users(nodes.size());
  for (int32_t i = 0; i <= root; ++i) {
    if (!nodes[i].has_tile) continue;
    for (int32_t k : nodes[i].operands) users[k].push_back(i);
  }
  // Whether every user of node i's tile widens bf16 bits itself.
  auto widened_by_users = [&](auto& self, int32_t i) -> bool {
    if (i == root || users[i].empty()) return false;
    for (int32_t u : users[i]) {
      const NodeKind kind = nodes[u].kind;
      if (kind == NodeKind::kReshape) {
        if (!self(self, u)) return false;
      } else if (kind != NodeKind::kUnary && kind != NodeKind::kBinary) {
        return false;
      }
    }
    return true;
  };
  for (int32_t i = 0; i <= root; ++i) {
    Node& node = nodes[i];
    if (node.kind == NodeKind::kSource && node.has_tile && node.in_place && !node.splat &&
        node.type == PrimitiveType::kBF16 && widened_by_users(widened_by_users, i)) {
      node.raw_bf16 = true;
    }
    if (node.kind == NodeKind::kReshape && node.has_tile && nodes[node.operands[0]].raw_bf16) {
      node.raw_bf16 = true;
    }
  }
}

void PlanSlots(FusionPlan& plan) {
  std::vector<Node>& nodes = plan.nodes;
  const int32_t root = static_cast<int32_t>(nodes.size()) - 1;
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
  plan.root_to_output = nodes[root].kind != NodeKind::kSource &&
                        nodes[root].kind != NodeKind::kReshape && !IsHalf(nodes[root].type);
  std::vector<int32_t> free_slots;
  for (int32_t i = 0; i <= root; ++i) {
    Node& node = nodes[i];
    if (!node.has_tile) continue;
    const bool needs_slot = !(node.kind == NodeKind::kSource && node.in_place &&
                              (!IsHalf(node.type) || node.raw_bf16)) &&
                            node.kind != NodeKind::kReshape && !(i == root && plan.root_to_output);
    if (needs_slot) {
      if (free_slots.empty()) {
        node.slot = plan.num_slots++;
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
}

}  // namespace

// Whether the fusion's computation holds a convolution (then it is planned
// as a loop over the convolution's result, whatever its kind).
bool FusesConvolution(const HloInstruction& fusion) {
  if (fusion.called_computations().size() != 1 || fusion.called_computations()[0] == nullptr) {
    return false;
  }
  for (const HloInstruction* instr : fusion.called_computations()[0]->instructions()) {
    if (instr->opcode() == HloOpcode::kConvolution) return true;
  }
  return false;
}

std::shared_ptr<FusionPlan> MakeFusionPlan(const HloInstruction& fusion) {
  const FusionKind fusion_kind = fusion.attrs().fusion_kind;
  WEFT_CHECK(fusion_kind == FusionKind::kLoop || fusion_kind == FusionKind::kInput ||
                 (fusion_kind == FusionKind::kOutput && FusesConvolution(fusion)),
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
  plan->num_operands = fusion.operand_count();
  // The value the nodes compute a tile at a time: the fusion's result, or an
  // input fusion's reduce input.
  const HloInstruction* value = fused.root_instruction();
  if (fusion_kind == FusionKind::kInput) {
    PlanInputRoot(fusion, *value, *plan);
    value = value->operand(0);
  }
  plan->shape = value->shape();
  std::unordered_map<const HloInstruction*, int32_t> index;
  for (const HloInstruction* instr : PostOrderFrom(value)) {
    Node node = MakeNode(fusion, fused, instr, index, *plan);
    index.emplace(instr, static_cast<int32_t>(plan->nodes.size()));
    plan->nodes.push_back(std::move(node));
  }
  const Node& root = plan->nodes.back();
  WEFT_CHECK(plan->input || root.instr->shape() == fusion.shape(),
             "fusion result {} differs from its fused root {}", fusion.shape().ToString(),
             root.instr->shape().ToString());
  // Pads and concatenates whose contiguous tiles are column bands.
  PlanColumnBands(plan->nodes);
  // Regions, from the root down: aligned nodes are computed per tile; an
  // index map's operands are gathered.
  PlanRegions(fused, *plan);
  // Sources read in place become reuse candidates unless an index map or a
  // broadcast reads the same operand.
  PlanReuse(*plan);
  // bf16 sources read by unary and binary nodes only stay bf16 in the tile.
  PlanRawSources(*plan);
  // Scratch slots by liveness over the walk (aligned nodes only; a reshape
  // passes its operand's tile on); the root writes the output directly unless
  // it is a source, a reshape or of a half type (converted at the end).
  PlanSlots(*plan);
  return plan;
}

}  // namespace weft::runtime::exec::fusion
