#include "weft/compiler/hierarchical_collectives.h"

#include <algorithm>
#include <numeric>
#include <optional>
#include <set>

#include "weft/base/error.h"
#include "weft/hlo/shape_inference.h"

namespace weft::compiler {
namespace {

using Groups = std::vector<std::vector<int64_t>>;

// A collective's groups split into the two levels: `inner` holds each
// group's members of one slice (in group order), `outer` each group's
// members at one position across its slices (in slice order).
struct Levels {
  int64_t slices = 0, per_slice = 0;  // s and m of every group
  Groups inner, outer;
};

std::optional<Levels> SplitGroups(const Groups& groups, int64_t devices_per_slice) {
  if (groups.empty()) return std::nullopt;  // "every device": not written out; left flat
  Levels levels;
  for (const std::vector<int64_t>& g : groups) {
    // Runs of members in one slice: all of one length m, each slice once.
    std::vector<size_t> starts = {0};
    for (size_t i = 1; i < g.size(); ++i) {
      if (g[i] / devices_per_slice != g[i - 1] / devices_per_slice) starts.push_back(i);
    }
    const int64_t s = static_cast<int64_t>(starts.size());
    const int64_t m = static_cast<int64_t>(g.size()) / s;
    if (s < 2 || m < 2 || m * s != static_cast<int64_t>(g.size())) return std::nullopt;
    std::set<int64_t> seen;
    for (int64_t j = 0; j < s; ++j) {
      if (static_cast<int64_t>(starts[j]) != j * m) return std::nullopt;
      if (!seen.insert(g[j * m] / devices_per_slice).second) return std::nullopt;
    }
    if (levels.slices != 0 && (levels.slices != s || levels.per_slice != m)) return std::nullopt;
    levels.slices = s;
    levels.per_slice = m;
    for (int64_t j = 0; j < s; ++j)
      levels.inner.emplace_back(g.begin() + j * m, g.begin() + (j + 1) * m);
    for (int64_t p = 0; p < m; ++p) {
      std::vector<int64_t> across;
      for (int64_t j = 0; j < s; ++j) across.push_back(g[j * m + p]);
      levels.outer.push_back(std::move(across));
    }
  }
  return levels;
}

// Emits instructions just before the collective they replace.
class Emitter {
 public:
  Emitter(HloComputation* computation, const HloInstruction* collective, int64_t* next_channel)
      : c_(computation), before_(collective), next_channel_(next_channel) {}

  HloInstruction* Add(HloOpcode opcode, std::vector<HloInstruction*> operands, HloAttributes attrs,
                      Shape shape = {}, std::vector<HloComputation*> called = {}) {
    auto instr = HloInstruction::Create(
        opcode, std::move(shape), std::move(operands), std::move(attrs), std::move(called),
        before_->name() + "." + std::string(HloOpcodeString(opcode)));
    instr->set_shape(InferHloShape(*instr));
    return c_->AddInstructionBefore(std::move(instr), before_);
  }

  // The collective's own attributes (id mode), with new groups, a new channel
  // and `dims`.
  HloAttributes Collective(Groups groups, std::vector<int64_t> dims = {}) const {
    HloAttributes a;
    a.replica_groups = std::move(groups);
    a.channel_id = (*next_channel_)++;
    a.use_global_device_ids = before_->attrs().use_global_device_ids;
    a.dimensions = std::move(dims);
    return a;
  }

  HloInstruction* AllReduce(HloInstruction* x, Groups groups) {
    return Add(HloOpcode::kAllReduce, {x}, Collective(std::move(groups)), {},
               {before_->to_apply()});
  }
  HloInstruction* ReduceScatter(HloInstruction* x, int64_t dim, Groups groups) {
    return Add(HloOpcode::kReduceScatter, {x}, Collective(std::move(groups), {dim}), {},
               {before_->to_apply()});
  }
  HloInstruction* AllGather(HloInstruction* x, int64_t dim, Groups groups) {
    return Add(HloOpcode::kAllGather, {x}, Collective(std::move(groups), {dim}));
  }
  HloInstruction* Reshape(HloInstruction* x, std::vector<int64_t> dims) {
    return Add(HloOpcode::kReshape, {x}, {}, x->shape().WithDimensions(std::move(dims)));
  }
  HloInstruction* Transpose(HloInstruction* x, std::vector<int64_t> perm) {
    HloAttributes a;
    a.dimensions = std::move(perm);
    return Add(HloOpcode::kTranspose, {x}, std::move(a));
  }
  HloInstruction* PadHigh(HloInstruction* x, int64_t dim, int64_t high) {
    if (high == 0) return x;
    HloAttributes zero;
    zero.literal = Literal::Scalar(x->shape().element_type(), 0);
    HloInstruction* value =
        Add(HloOpcode::kConstant, {}, std::move(zero), Shape::Scalar(x->shape().element_type()));
    HloAttributes a;
    for (int64_t d = 0; d < x->shape().rank(); ++d)
      a.padding.push_back({0, d == dim ? high : 0, 0});
    return Add(HloOpcode::kPad, {x, value}, std::move(a));
  }
  HloInstruction* SliceTo(HloInstruction* x, int64_t dim, int64_t size) {
    if (x->shape().dimensions(dim) == size) return x;
    HloAttributes a;
    for (int64_t d = 0; d < x->shape().rank(); ++d) {
      a.slice.push_back({0, d == dim ? size : x->shape().dimensions(d), 1});
    }
    return Add(HloOpcode::kSlice, {x}, std::move(a));
  }

  // dim d of x (size a*b*c) as [a, b, c] with the first two swapped.
  HloInstruction* SwapBlocks(HloInstruction* x, int64_t d, int64_t a, int64_t b) {
    const std::vector<int64_t>& dims = x->shape().dimensions();
    const int64_t c = dims[d] / (a * b);
    std::vector<int64_t> split(dims.begin(), dims.begin() + d);
    split.insert(split.end(), {a, b, c});
    split.insert(split.end(), dims.begin() + d + 1, dims.end());
    std::vector<int64_t> perm(split.size());
    std::iota(perm.begin(), perm.end(), 0);
    std::swap(perm[d], perm[d + 1]);
    return Reshape(Transpose(Reshape(x, split), perm), dims);
  }

 private:
  HloComputation* c_;
  const HloInstruction* before_;
  int64_t* next_channel_;
};

HloInstruction* DecomposeAllReduce(Emitter& e, const HloInstruction& ar, const Levels& l) {
  HloInstruction* x = ar.operand(0);
  const Shape& shape = x->shape();
  const int64_t m = l.per_slice;
  if (shape.rank() == 0 || shape.ElementsCount() < m) {
    return e.AllReduce(e.AllReduce(x, l.inner), l.outer);
  }
  const std::vector<int64_t>& dims = shape.dimensions();
  const int64_t d = std::max_element(dims.begin(), dims.end()) - dims.begin();
  const int64_t size = dims[d], chunk = (size + m - 1) / m;
  HloInstruction* shard = e.ReduceScatter(e.PadHigh(x, d, chunk * m - size), d, l.inner);
  return e.SliceTo(e.AllGather(e.AllReduce(shard, l.outer), d, l.inner), d, size);
}

HloInstruction* DecomposeAllGather(Emitter& e, const HloInstruction& ag, const Levels& l) {
  const int64_t d = ag.attrs().dimensions.at(0);
  // Across slices first (the device's shard), then inside: chunk (p, j) of
  // the result belongs at j * m + p.
  HloInstruction* gathered = e.AllGather(e.AllGather(ag.operand(0), d, l.outer), d, l.inner);
  return e.SwapBlocks(gathered, d, l.per_slice, l.slices);
}

HloInstruction* DecomposeReduceScatter(Emitter& e, const HloInstruction& rs, const Levels& l) {
  const int64_t d = rs.attrs().dimensions.at(0);
  // Chunk j * m + p goes to member p of slice j: group the chunks by p, sum
  // each group inside the slice, then chunk j of it across slices.
  HloInstruction* by_member = e.SwapBlocks(rs.operand(0), d, l.slices, l.per_slice);
  return e.ReduceScatter(e.ReduceScatter(by_member, d, l.inner), d, l.outer);
}

}  // namespace

HierarchyStats DecomposeCrossSliceCollectives(HloModule& module, int64_t num_devices,
                                              int64_t slices) {
  HierarchyStats stats;
  if (slices <= 1) return stats;
  WEFT_INTERNAL_CHECK(num_devices % slices == 0, "{} devices do not split into {} equal slices",
                      num_devices, slices);
  const int64_t per_slice = num_devices / slices;
  int64_t next_channel = 1;
  for (const HloComputation* c : module.computations()) {
    for (const HloInstruction* i : c->instructions()) {
      if (i->attrs().channel_id) next_channel = std::max(next_channel, *i->attrs().channel_id + 1);
    }
  }
  for (HloComputation* c : module.computations()) {
    for (HloInstruction* instr : c->instructions()) {
      const HloOpcode op = instr->opcode();
      if (op != HloOpcode::kAllReduce && op != HloOpcode::kAllGather &&
          op != HloOpcode::kReduceScatter) {
        continue;
      }
      if (instr->operand_count() != 1 || !instr->shape().IsArray()) continue;
      Groups groups = instr->attrs().replica_groups;
      if (op == HloOpcode::kAllReduce) {
        // Member order is only the order of the sum: take the members slice
        // by slice (a group in mesh order over a hybrid mesh interleaves them).
        for (std::vector<int64_t>& g : groups) {
          std::stable_sort(g.begin(), g.end(),
                           [&](int64_t a, int64_t b) { return a / per_slice < b / per_slice; });
        }
      }
      const std::optional<Levels> levels = SplitGroups(groups, per_slice);
      if (!levels) continue;
      Emitter e(c, instr, &next_channel);
      HloInstruction* replacement = nullptr;
      if (op == HloOpcode::kAllReduce) {
        replacement = DecomposeAllReduce(e, *instr, *levels);
        ++stats.all_reduces;
      } else if (op == HloOpcode::kAllGather) {
        replacement = DecomposeAllGather(e, *instr, *levels);
        ++stats.all_gathers;
      } else {
        const int64_t d = instr->attrs().dimensions.at(0);
        const int64_t n = levels->slices * levels->per_slice;
        if (instr->operand(0)->shape().dimensions(d) % n != 0) continue;  // left flat
        replacement = DecomposeReduceScatter(e, *instr, *levels);
        ++stats.reduce_scatters;
      }
      WEFT_INTERNAL_CHECK(replacement->shape() == instr->shape(), "hierarchical {} made {} for {}",
                          instr->name(), replacement->shape().ToString(),
                          instr->shape().ToString());
      const bool root = c->root_instruction() == instr;
      instr->ReplaceAllUsesWith(replacement);
      if (root) c->set_root_instruction(replacement);
      c->RemoveInstruction(instr);
    }
  }
  return stats;
}

}  // namespace weft::compiler
