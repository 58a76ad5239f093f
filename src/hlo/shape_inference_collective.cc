// Shape rules of the collectives (all-reduce, all-gather, reduce-scatter,
// all-to-all, collective-permute) and their replica groups.
#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <set>

#include "shape_inference_internal.h"
#include "weft/base/error.h"
#include "weft/hlo/computation.h"
#include "weft/hlo/shape_inference.h"
#include "weft/sharding/tile_assignment.h"

namespace weft {

int64_t ReplicaGroupSize(const std::vector<std::vector<int64_t>>& groups) {
  if (groups.empty()) return 0;
  const size_t size = groups[0].size();
  int64_t most = 0;
  for (const auto& g : groups) {
    WEFT_CHECK(g.size() == size && !g.empty(),
               "replica groups must all have the same non-zero size; got sizes {} and {}", size,
               g.size());
    for (int64_t id : g) {
      WEFT_CHECK(id >= 0, "replica group id {} is negative", id);
      WEFT_CHECK(id < kMaxDevices,
                 "replica group id {} is not below {}, the most devices weft "
                 "supports",
                 id, kMaxDevices);
      most = std::max(most, id);
    }
  }
  // A bitmap of the ids named (no tree per id on large meshes), as long as
  // the largest: not kMaxDevices per collective, which cost a partitioned
  // module of many small collectives more than the rest of its shape rules.
  std::vector<bool> seen(static_cast<size_t>(most) + 1, false);
  for (const auto& g : groups) {
    for (int64_t id : g) {
      WEFT_CHECK(!seen[id], "device {} appears in two replica groups", id);
      seen[id] = true;
    }
  }
  return static_cast<int64_t>(size);
}

}  // namespace weft

namespace weft::hlo {

Shape InferCollective(const HloInstruction& instr) {
  const HloAttributes& a = instr.attrs();
  const int64_t group = ReplicaGroupSize(a.replica_groups);
  const std::string_view name = HloOpcodeString(instr.opcode());
  switch (instr.opcode()) {
    case HloOpcode::kAllReduce: {
      WEFT_CHECK(instr.operand_count() >= 1, "all-reduce needs an operand");
      std::vector<Shape> shapes;
      for (int64_t i = 0; i < instr.operand_count(); ++i) shapes.push_back(ArrayOperand(instr, i));
      for (const Shape& s : shapes) {
        const PrimitiveType t = s.element_type();
        CheckScalarComputation(instr.called_computations().empty() ? nullptr : instr.to_apply(),
                               std::span(&t, 1), "all-reduce");
      }
      return shapes.size() == 1 ? shapes[0] : Shape::Tuple(shapes);
    }
    case HloOpcode::kCollectivePermute: {
      ExpectOperandCount(instr, 1);
      std::set<int64_t> sources, targets;
      for (auto [s, t] : a.source_target_pairs) {
        WEFT_CHECK(s >= 0 && t >= 0, "collective-permute pair {{{},{}}} has a negative id", s, t);
        WEFT_CHECK(s < kMaxDevices && t < kMaxDevices,
                   "collective-permute pair {{{},{}}} names a device not below {}, the most "
                   "devices weft supports",
                   s, t, kMaxDevices);
        WEFT_CHECK(sources.insert(s).second, "collective-permute sends from {} twice", s);
        WEFT_CHECK(targets.insert(t).second, "collective-permute sends to {} twice", t);
      }
      return ArrayOperand(instr, 0);
    }
    default:
      break;
  }
  // all-to-all: one operand, one dimension.
  WEFT_CHECK(a.dimensions.size() == 1, "{} takes one dimension, got {}", name,
             DimsString(a.dimensions));
  const int64_t d = a.dimensions[0];
  if (instr.opcode() == HloOpcode::kAllToAll) {
    ExpectOperandCount(instr, 1);
    const Shape& x = ArrayOperand(instr, 0);
    WEFT_CHECK(d >= 0 && d < x.rank(), "{} dimension {} out of range for {}", name, d,
               x.ToString());
    WEFT_CHECK(group == 0 || x.dimensions(d) % group == 0,
               "all-to-all splits dim {} of {} into {} parts, which does not divide it", d,
               x.ToString(), group);
    return x;
  }
  // all-gather and reduce-scatter: one or more operands (XLA's variadic
  // form, a tuple of results: one collective moving several arrays), each
  // gathered or scattered along the same dimension over the same groups.
  WEFT_CHECK(instr.operand_count() >= 1, "{} needs an operand", name);
  std::vector<Shape> results;
  for (int64_t i = 0; i < instr.operand_count(); ++i) {
    const Shape& x = ArrayOperand(instr, i);
    WEFT_CHECK(d >= 0 && d < x.rank(), "{} dimension {} out of range for {}", name, d,
               x.ToString());
    if (instr.opcode() == HloOpcode::kReduceScatter) {
      const PrimitiveType t = x.element_type();
      CheckScalarComputation(instr.called_computations().empty() ? nullptr : instr.to_apply(),
                             std::span(&t, 1), "reduce-scatter");
    }
    if (group > 0) {
      Dims out = x.dimensions();
      if (instr.opcode() == HloOpcode::kAllGather) {
        const std::optional<int64_t> gathered = CheckedMul(out[d], group);
        WEFT_CHECK(gathered.has_value(),
                   "all-gather of dim {} of {} over {} devices gives a size that overflows int64",
                   d, x.ToString(), group);
        out[d] = *gathered;
      } else {
        WEFT_CHECK(out[d] % group == 0,
                   "reduce-scatter splits dim {} of {} over {} devices, which does not divide it",
                   d, x.ToString(), group);
        out[d] /= group;
      }
      results.push_back(x.WithDimensions(out));
      continue;
    }
    // All devices: the group size is the declared/operand ratio.
    const Shape& whole = Declared(instr, "no replica_groups to derive it from");
    const int64_t leaves = instr.operand_count();
    WEFT_CHECK(leaves == 1
                   ? whole.IsArray()
                   : whole.IsTuple() && static_cast<int64_t>(whole.tuple_shapes().size()) == leaves,
               "{} of {} operand(s) must declare {}, got {}", name, leaves,
               leaves == 1 ? "an array" : fmt::format("a tuple of {} arrays", leaves),
               whole.ToString());
    const Shape& declared = leaves == 1 ? whole : whole.tuple_shapes(i);
    WEFT_CHECK(declared.IsArray() && declared.rank() == x.rank() &&
                   declared.element_type() == x.element_type(),
               "{} result {} must be an array like the operand {}", name, declared.ToString(),
               x.ToString());
    for (int64_t k = 0; k < x.rank(); ++k) {
      const int64_t big =
          instr.opcode() == HloOpcode::kAllGather ? declared.dimensions(k) : x.dimensions(k);
      const int64_t small =
          instr.opcode() == HloOpcode::kAllGather ? x.dimensions(k) : declared.dimensions(k);
      WEFT_CHECK(k == d ? (small > 0 && big % small == 0) : big == small,
                 "{} from {} to {} must only scale dim {}", name, x.ToString(), declared.ToString(),
                 d);
    }
    results.push_back(declared);
  }
  return results.size() == 1 ? results[0] : Shape::Tuple(results);
}

}  // namespace weft::hlo
