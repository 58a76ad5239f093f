// Memory of a per-device program from the compiler's buffer assignment: a
// walk of its execution (loops trip by trip, calls) in which every buffer is
// one the assignment made, live over the positions the assignment gave it.
// There are no allocation rules here (which instruction allocates, forwards,
// reuses an operand in place, when a buffer dies): those are the
// assignment's (compiler/buffer_assignment.h), which the executor runs by.
#include "weft/analysis/memory_plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "weft/analysis/loops.h"
#include "weft/autodiff/scan_config.h"
#include "weft/base/algorithm.h"
#include "weft/base/error.h"
#include "weft/compiler/buffer_assignment.h"
#include "weft/compiler/schedule.h"
#include "weft/hlo/custom_call_targets.h"

namespace weft::analysis {

std::string_view BufferCategoryName(BufferCategory category) {
  switch (category) {
    case BufferCategory::kParameters:
      return "parameters";
    case BufferCategory::kInputs:
      return "inputs";
    case BufferCategory::kGradients:
      return "gradients";
    case BufferCategory::kSaved:
      return "saved for backward";
    case BufferCategory::kCollectives:
      return "collective buffers";
    case BufferCategory::kTemporaries:
      return "temporaries";
  }
  return "?";
}

std::string_view BufferCategoryKey(BufferCategory category) {
  switch (category) {
    case BufferCategory::kSaved:
      return "saved";
    case BufferCategory::kCollectives:
      return "collectives";
    default:
      return BufferCategoryName(category);
  }
}

namespace {

using compiler::AssignedBuffer;
using compiler::BufferAssignment;
using compiler::ComputationAssignment;
using compiler::InstructionAssignment;
using compiler::LeafAssignment;

// A static label for what a value is.
struct Tag {
  BufferCategory category = BufferCategory::kTemporaries;
  int32_t role = -1;  // index into Simulator::roles_
  bool host = false;  // a saved stack the program keeps in host memory (OffloadedStateOf)
};

// A buffer while the walk holds it: a region buffer of the assignment (each
// time its computation runs), an entry parameter's leaf, or a layer
// prefetched from host memory.
struct Buffer {
  int64_t bytes = 0;
  BufferCategory category = BufferCategory::kTemporaries;
  int32_t role = -1;
  bool host = false;      // counted in host memory (offloaded)
  bool input = false;     // an entry parameter's leaf
  bool resident = false;  // held by the caller for the whole step
  bool live = true;
  const HloInstruction* origin = nullptr;
  Shape shape;  // as compiled (the policy only changes bytes)
};

// What the walk reads of one computation's assignment, indexed by position.
struct ComputationWalk {
  const ComputationAssignment* assignment = nullptr;
  std::vector<std::vector<int32_t>> starts;         // region buffers live from position t
  std::vector<std::vector<int32_t>> ends;           // region buffers last live at t (0..n)
  std::vector<std::vector<int32_t>> external_ends;  // buffers outside the region, the same
  std::vector<int32_t> external_arg;  // per external buffer: its leaf among the arguments, or -1
  std::vector<Tag> labels;            // per region buffer
  std::vector<Shape> shapes;          // per region buffer
  // Per position: the last position that reads the instruction's result,
  // directly or through values that forward it.
  std::vector<int64_t> view_end;
};

// Bytes as the assignment sizes a buffer (compiler::kBufferAlignment).
int64_t Aligned(int64_t bytes) {
  constexpr int64_t a = compiler::kBufferAlignment;
  return std::max<int64_t>(a, (bytes + a - 1) / a * a);
}

bool SameBytes(const LeafAssignment& a, const LeafAssignment& b) {
  return (a.buffer >= 0 && a.buffer == b.buffer) || (a.external >= 0 && a.external == b.external);
}

class Simulator {
 public:
  Simulator(const HloModule& module, const MemoryPlanOptions& options,
            const BufferAssignment& assignment)
      : module_(module),
        options_(options),
        assignment_(assignment),
        offloading_(options.offload_saved) {
    for (const HloComputation* c : module.MakeComputationPostOrder()) {
      if (!assignment.Has(*c)) continue;
      for (const HloInstruction* instr : c->instructions()) {
        if (instr->opcode() == HloOpcode::kWhile) trips_[instr] = WhileTripCount(*instr);
      }
    }
    TagGradients();
    TagSaved();
    executor_view_ = options.executor_accounting && !offloading_;
    for (const auto& [c, ca] : assignment.computations()) walks_.emplace(c, MakeWalk(ca));
  }

  // One walk of the program. With `snapshot_step` > 0, records the buffers
  // live when the score `snapshot_score` is first reached in that step, and
  // the timeline over `total_steps`. The score is the live bytes, or under
  // the executor's accounting the live bytes in its arena (inputs aside: it
  // holds them all for the whole run).
  void Run(int64_t snapshot_step, int64_t snapshot_score, int64_t total_steps, MemoryPlan& out) {
    buffers_.clear();
    live_ = inputs_live_ = host_live_ = peak_ = host_peak_ = saved_live_ = saved_peak_ = 0;
    score_peak_ = -1;
    score_step_ = 0;
    live_by_category_.fill(0);
    step_ = 0;
    snapshot_step_ = snapshot_step;
    snapshot_score_ = snapshot_score;
    total_steps_ = total_steps;
    snapped_ = false;
    out_ = &out;
    bucket_ = -1;

    const HloComputation* entry = module_.entry_computation();
    const ComputationAssignment& ea = *walks_.at(entry).assignment;
    std::unordered_map<const HloInstruction*, std::vector<int32_t>> leaves_of;
    for (size_t i = 0; i < ea.external.size(); ++i) {
      const AssignedBuffer& b = ea.external[i];
      if (b.instr->opcode() != HloOpcode::kParameter) continue;
      std::vector<int32_t>& v = leaves_of[b.instr];
      if (static_cast<int64_t>(v.size()) <= b.leaf) v.resize(b.leaf + 1, -1);
      v[b.leaf] = static_cast<int32_t>(i);
    }
    std::vector<int32_t> external(ea.external.size(), -1);
    int64_t leaf = 0;
    for (int64_t p = 0; p < entry->num_parameters(); ++p) {
      const HloInstruction* param = entry->parameter_instruction(p);
      const std::vector<int32_t>& ids = leaves_of[param];
      int64_t k = 0;
      for (const Shape& s : param->shape().Leaves()) {
        const bool is_weight = leaf >= options_.num_data_inputs;
        const int64_t w = leaf - options_.num_data_inputs;
        const std::string name = is_weight && w < static_cast<int64_t>(options_.weight_names.size())
                                     ? options_.weight_names[w]
                                     : param->name();
        // A parameter the schedule never runs (nothing reads it) has no
        // buffer in the assignment: the executor still holds it, the live
        // view frees it at once (unless the caller keeps it resident).
        const int32_t e = k < static_cast<int64_t>(ids.size()) ? ids[k] : -1;
        Buffer b;
        b.bytes = e >= 0 ? ea.external[e].size : Aligned(s.ByteSize());
        b.category = is_weight ? BufferCategory::kParameters : BufferCategory::kInputs;
        b.role = Role(fmt::format("{} {}", is_weight ? "weight" : "input", name));
        b.input = true;
        b.resident = is_weight && options_.weights_resident;
        b.origin = param;
        b.shape = s;
        const int32_t id = NewBuffer(std::move(b));
        if (e >= 0) {
          external[e] = id;
        } else {
          Free(id);
        }
        ++k;
        ++leaf;
      }
    }
    Walk(*entry, external, /*is_entry=*/true);
    out.total_steps = step_;
    out.live_peak_bytes = peak_;
    out.host_peak_bytes = host_peak_;
    out.saved_bytes = saved_peak_;
    if (snapshot_step_ == 0) out.peak_step = score_step_;
  }

  int64_t score_peak() const { return score_peak_; }
  bool snapped() const { return snapped_; }
  bool offloading() const { return offloading_; }

 private:
  int32_t Role(std::string text) {
    auto [it, fresh] = role_index_.emplace(text, static_cast<int32_t>(roles_.size()));
    if (fresh) roles_.push_back(std::move(text));
    return it->second;
  }

  // ---- static labels -------------------------------------------------------

  // x's assignment; nullptr for what the schedule does not run (dead code).
  const InstructionAssignment* Find(const HloInstruction* x) const {
    if (x->parent() == nullptr || !assignment_.Has(*x->parent())) return nullptr;
    const auto& instructions = assignment_.Of(*x->parent()).instructions;
    auto it = instructions.find(x);
    return it == instructions.end() ? nullptr : &it->second;
  }

  // Through values that the assignment says forward their one operand whole
  // (every leaf the operand's bytes), to the value they forward.
  const HloInstruction* Unforwarded(const HloInstruction* x) const {
    while (x->operand_count() == 1 && x->opcode() != HloOpcode::kGetTupleElement) {
      const InstructionAssignment* ip = Find(x);
      const InstructionAssignment* op = Find(x->operand(0));
      if (ip == nullptr || op == nullptr) break;
      const InstructionAssignment& ia = *ip;
      const InstructionAssignment& oa = *op;
      if (ia.leaves.empty() || ia.leaves.size() != oa.leaves.size()) break;
      bool whole = true;
      for (size_t k = 0; k < ia.leaves.size(); ++k) {
        whole = whole && ia.leaves[k].kind == LeafAssignment::Kind::kForward &&
                SameBytes(ia.leaves[k], oa.leaves[k]);
      }
      if (!whole) break;
      x = x->operand(0);
    }
    return x;
  }

  // The entry root's outputs 1.. are the gradients: follow each back to the
  // values that hold it.
  void TagGradients() {
    const HloInstruction* root = module_.entry_computation()->root_instruction();
    if (root->opcode() != HloOpcode::kTuple) return;
    for (int64_t k = 1; k < root->operand_count(); ++k) {
      const int64_t w = k - 1;
      const std::string name = w < static_cast<int64_t>(options_.weight_names.size())
                                   ? options_.weight_names[w]
                                   : fmt::format("output {}", k);
      std::unordered_set<const HloInstruction*> seen;
      Label(root->operand(k), {BufferCategory::kGradients, Role("grad " + name)}, seen);
    }
  }

  // What a value means, not where its bytes are: a gradient stays that
  // gradient when the partitioner reshards it (collectives, slices to the
  // output's sharding) or a step writes a slice of it (dynamic-update-slice),
  // through tuples and loop state, and through whatever shares its bytes in
  // the assignment (a view, a forward, an in-place update).
  void Label(const HloInstruction* x, Tag tag, std::unordered_set<const HloInstruction*>& seen) {
    if (!seen.insert(x).second) return;
    if (x->opcode() == HloOpcode::kParameter) return;
    tags_.emplace(x, tag);
    switch (x->opcode()) {
      case HloOpcode::kDynamicUpdateSlice:
      case HloOpcode::kDynamicSlice:
      case HloOpcode::kSlice:
      case HloOpcode::kAllGather:
      case HloOpcode::kAllToAll:
      case HloOpcode::kCollectivePermute:
      case HloOpcode::kReduceScatter:
      case HloOpcode::kAllReduce:
        Label(x->operand(0), tag, seen);
        return;
      case HloOpcode::kGetTupleElement: {
        const HloInstruction* t = x->operand(0);
        const int64_t i = x->tuple_index();
        if (t->opcode() == HloOpcode::kTuple || IsCollective(t->opcode())) {
          // A variadic collective's result i moves its operand i.
          Label(t->operand(i), tag, seen);
        } else if (t->opcode() == HloOpcode::kWhile) {
          LabelLoopSlot(t, i, tag, seen);
        }
        return;
      }
      default:
        break;
    }
    const InstructionAssignment* ia = Find(x);
    if (!x->shape().IsArray() || ia == nullptr) return;
    for (int64_t j = 0; j < x->operand_count(); ++j) {
      const InstructionAssignment* op = Find(x->operand(j));
      if (op == nullptr) continue;
      const InstructionAssignment& oa = *op;
      bool shares = false;
      for (const LeafAssignment& l : ia->leaves) {
        if (l.kind == LeafAssignment::Kind::kInPlace && l.operand == j) shares = true;
        if (l.kind != LeafAssignment::Kind::kForward) continue;
        for (const LeafAssignment& o : oa.leaves) shares = shares || SameBytes(l, o);
      }
      if (shares) Label(x->operand(j), tag, seen);
    }
  }

  // Element i of a while's state: its init and what the body writes back.
  void LabelLoopSlot(const HloInstruction* w, int64_t i, Tag tag,
                     std::unordered_set<const HloInstruction*>& seen) {
    const HloInstruction* init = Unforwarded(w->operand(0));
    if (init->opcode() == HloOpcode::kTuple) Label(init->operand(i), tag, seen);
    const HloInstruction* next = w->while_body()->root_instruction();
    if (next->opcode() == HloOpcode::kTuple) Label(next->operand(i), tag, seen);
  }

  // A forward scan's stacked outputs read by a later loop: element i of a
  // while whose body writes it with dynamic-update-slice into itself, and
  // whose final value feeds another while.
  void TagSaved() {
    for (const HloComputation* c : module_.computations()) {
      if (!assignment_.Has(*c)) continue;
      for (const HloInstruction* w : c->instructions()) {
        if (w->opcode() != HloOpcode::kWhile) continue;
        const HloInstruction* body_root = w->while_body()->root_instruction();
        if (body_root->opcode() != HloOpcode::kTuple) continue;
        for (const HloInstruction* user : w->users()) {
          if (user->opcode() != HloOpcode::kGetTupleElement) continue;
          const int64_t i = user->tuple_index();
          const HloInstruction* next = Unforwarded(body_root->operand(i));
          if (next->opcode() != HloOpcode::kDynamicUpdateSlice) continue;
          const HloInstruction* target = Unforwarded(next->operand(0));
          if (target->opcode() != HloOpcode::kGetTupleElement || target->tuple_index() != i) {
            continue;
          }
          if (!FeedsWhile(user) || tags_.count(user)) continue;
          std::unordered_set<const HloInstruction*> seen;
          const std::vector<int64_t> offloaded = OffloadedStateOf(*w);
          const bool host = Contains(offloaded, i);
          offloading_ = offloading_ || host;
          const Tag tag{
              BufferCategory::kSaved,
              Role(fmt::format("{} by {} (state {})", host ? "offloaded" : "saved", w->name(), i)),
              host};
          tags_.emplace(user, tag);
          seen.insert(user);
          LabelLoopSlot(w, i, tag, seen);
        }
      }
    }
  }

  // Whether x reaches a while's operand through tuples and forwards.
  bool FeedsWhile(const HloInstruction* x) const {
    std::vector<const HloInstruction*> stack = {x};
    std::unordered_set<const HloInstruction*> seen;
    while (!stack.empty()) {
      const HloInstruction* y = stack.back();
      stack.pop_back();
      for (const HloInstruction* u : y->users()) {
        if (u->opcode() == HloOpcode::kWhile) return true;
        if ((u->opcode() == HloOpcode::kTuple || Unforwarded(u) != u) && seen.insert(u).second) {
          stack.push_back(u);
        }
      }
    }
    return false;
  }

  // What a result of `instr` is, when nothing labelled it statically.
  Tag TagOf(const HloInstruction* instr) const {
    auto it = tags_.find(instr);
    if (it != tags_.end()) return it->second;
    return {
        IsCollective(instr->opcode()) ? BufferCategory::kCollectives : BufferCategory::kTemporaries,
        -1};
  }

  // Positions, labels and shapes of one computation's buffers. A region
  // buffer takes the label of the first labelled value that uses it; else it
  // is a collective buffer when a collective writes it.
  ComputationWalk MakeWalk(const ComputationAssignment& ca) {
    ComputationWalk w;
    w.assignment = &ca;
    const HloComputation& c = *ca.computation;
    const int64_t n = static_cast<int64_t>(ca.sequence.size());
    w.starts.resize(n);
    w.ends.resize(n + 1);
    w.external_ends.resize(n + 1);
    for (size_t i = 0; i < ca.buffers.size(); ++i) {
      const AssignedBuffer& b = ca.buffers[i];
      if (b.kind == AssignedBuffer::Kind::kNested) continue;  // walked instead
      WEFT_INTERNAL_CHECK(b.start >= 0 && b.start <= b.end && b.end <= n,
                          "buffer {} of '{}' is live over [{}, {}] of {} positions", i, c.name(),
                          b.start, b.end, n);
      w.starts[b.start].push_back(static_cast<int32_t>(i));
      w.ends[b.end].push_back(static_cast<int32_t>(i));
    }
    std::vector<int64_t> arg_offset;
    int64_t offset = 0;
    for (int64_t p = 0; p < c.num_parameters(); ++p) {
      arg_offset.push_back(offset);
      offset += c.parameter_instruction(p)->shape().LeafCount();
    }
    for (size_t i = 0; i < ca.external.size(); ++i) {
      const AssignedBuffer& b = ca.external[i];
      WEFT_INTERNAL_CHECK(b.end >= 0 && b.end <= n, "outside buffer {} of '{}' ends at {} of {}", i,
                          c.name(), b.end, n);
      w.external_ends[b.end].push_back(static_cast<int32_t>(i));
      w.external_arg.push_back(
          b.instr->opcode() == HloOpcode::kParameter
              ? static_cast<int32_t>(arg_offset.at(b.instr->parameter_number()) + b.leaf)
              : -1);
    }
    w.labels.resize(ca.buffers.size());
    std::vector<bool> labelled(ca.buffers.size(), false), collective(ca.buffers.size(), false);
    for (const HloInstruction* instr : ca.sequence) {
      const InstructionAssignment& ia = ca.instructions.at(instr);
      auto it = tags_.find(instr);
      for (const LeafAssignment& l : ia.leaves) {
        if (l.buffer < 0) continue;
        if (it != tags_.end() && !labelled[l.buffer]) {
          labelled[l.buffer] = true;
          w.labels[l.buffer] = it->second;
        }
        if (l.kind != LeafAssignment::Kind::kForward && IsCollective(instr->opcode())) {
          collective[l.buffer] = true;
        }
      }
    }
    w.shapes.resize(ca.buffers.size());
    for (size_t i = 0; i < ca.buffers.size(); ++i) {
      const AssignedBuffer& b = ca.buffers[i];
      if (b.kind == AssignedBuffer::Kind::kScratch) {
        w.labels[i] = TagOf(b.instr);
        const std::vector<Shape> scratch = compiler::InstructionScratch(*b.instr);
        w.shapes[i] = scratch.empty() ? b.instr->shape() : scratch[0];
        continue;
      }
      if (b.kind == AssignedBuffer::Kind::kValue) {
        const std::vector<Shape> leaves = b.instr->shape().Leaves();
        w.shapes[i] =
            b.leaf < static_cast<int64_t>(leaves.size()) ? leaves[b.leaf] : b.instr->shape();
      }
      if (!labelled[i] && collective[i]) w.labels[i] = {BufferCategory::kCollectives, -1};
    }
    w.view_end.assign(n, 0);
    for (int64_t t = n - 1; t >= 0; --t) {
      const HloInstruction* x = ca.sequence[t];
      int64_t end = x == c.root_instruction() ? n : t;
      for (const HloInstruction* u : x->users()) {
        auto it = ca.instructions.find(u);
        if (it == ca.instructions.end()) continue;
        const int64_t p = it->second.position;
        end = std::max(end, p);
        const std::vector<LeafAssignment>& leaves = it->second.leaves;
        const bool forwards =
            !leaves.empty() &&
            std::all_of(leaves.begin(), leaves.end(), [](const LeafAssignment& l) {
              return l.kind == LeafAssignment::Kind::kForward;
            });
        if (forwards && p > t) end = std::max(end, w.view_end[p]);
      }
      w.view_end[t] = end;
    }
    return w;
  }

  // ---- buffers ----------------------------------------------------------------

  int32_t NewBuffer(Buffer b) {
    b.host = b.host || (options_.offload_saved && b.category == BufferCategory::kSaved);
    b.live = true;
    buffers_.push_back(std::move(b));
    Count(buffers_.back(), +1);
    return static_cast<int32_t>(buffers_.size() - 1);
  }

  void Free(int32_t id) {
    if (id < 0) return;
    Buffer& b = buffers_[id];
    if (!b.live || b.resident) return;
    b.live = false;
    Count(b, -1);
  }

  void Count(const Buffer& b, int sign) {
    const int64_t bytes = sign * b.bytes;
    if (b.category == BufferCategory::kSaved) {
      saved_live_ += bytes;
      saved_peak_ = std::max(saved_peak_, saved_live_);
    }
    if (b.host) {
      host_live_ += bytes;
      host_peak_ = std::max(host_peak_, host_live_);
      return;
    }
    live_ += bytes;
    if (b.input) inputs_live_ += bytes;
    live_by_category_[static_cast<int>(b.category)] += bytes;
  }

  int64_t Score() const { return executor_view_ ? live_ - inputs_live_ : live_; }

  // After a step's buffers are allocated (before any is freed).
  void Observe() {
    peak_ = std::max(peak_, live_);
    const int64_t score = Score();
    if (score > score_peak_) {
      score_peak_ = score;
      score_step_ = step_ + 1;
    }
    if (!snapped_ && snapshot_step_ > 0 && step_ + 1 == snapshot_step_ &&
        score == snapshot_score_) {
      Snapshot();
    }
  }

  LiveBuffer Describe(const Buffer& b) const {
    LiveBuffer lb;
    lb.instruction = b.origin->name();
    lb.computation = b.origin->parent() ? b.origin->parent()->name() : "";
    lb.role = b.role >= 0 ? roles_[b.role] : "";
    lb.shape = b.shape;
    lb.bytes = b.bytes;
    lb.category = b.category;
    return lb;
  }

  void Snapshot() {
    snapped_ = true;
    out_->peak_step = snapshot_step_;
    out_->peak_instruction = current_->name();
    out_->peak_computation = current_->parent() ? current_->parent()->name() : "";
    if (!executor_view_) {
      out_->peak_by_category = live_by_category_;
      for (const Buffer& b : buffers_) {
        if (b.live && !b.host) out_->live_at_peak.push_back(Describe(b));
      }
    } else {
      // The executor's peak: every input, the arena (its buffers live here,
      // the rest of it packing), the outputs copied out of it.
      std::array<int64_t, kNumBufferCategories>& by = out_->peak_by_category;
      by.fill(0);
      int64_t arena_live = 0;
      for (const Buffer& b : buffers_) {
        if (!b.input && !(b.live && !b.host)) continue;
        by[static_cast<int>(b.category)] += b.bytes;
        if (!b.input) arena_live += b.bytes;
        out_->live_at_peak.push_back(Describe(b));
      }
      const HloComputation* entry = module_.entry_computation();
      const ComputationWalk& ew = walks_.at(entry);
      const HloInstruction* root = entry->root_instruction();
      const std::vector<Shape> leaves = root->shape().Leaves();
      const InstructionAssignment& ra = ew.assignment->instructions.at(root);
      for (size_t k = 0; k < leaves.size(); ++k) {
        const int32_t buffer = ra.leaves[k].buffer;
        if (buffer < 0) continue;
        by[static_cast<int>(ew.labels[buffer].category)] += Aligned(leaves[k].ByteSize());
      }
      const int64_t packing = assignment_.arena_bytes() - arena_live;
      WEFT_INTERNAL_CHECK(packing >= 0, "{} bytes live in an arena of {} at '{}'", arena_live,
                          assignment_.arena_bytes(), current_->name());
      by[static_cast<int>(BufferCategory::kTemporaries)] += packing;
    }
    std::stable_sort(out_->live_at_peak.begin(), out_->live_at_peak.end(),
                     [](const LiveBuffer& a, const LiveBuffer& b) { return a.bytes > b.bytes; });
  }

  // ---- the walk ------------------------------------------------------------------

  // Offloaded: a part of a host buffer that a value reads (a view of a layer
  // of the saved stack) is a device buffer of its own, prefetched, live
  // while the value and its forwards are read.
  template <typename Resolve>
  void Prefetch(const HloInstruction& instr, const InstructionAssignment& ia,
                const ComputationAssignment& ca, const ComputationWalk& w, int64_t t,
                const Resolve& resolve, std::vector<std::pair<int64_t, int32_t>>& prefetched) {
    auto partial = [&](const HloInstruction& x, const LeafAssignment& l, size_t k, int32_t* id) {
      if (l.kind != LeafAssignment::Kind::kForward) return false;
      *id = resolve(l);
      if (*id < 0 || !buffers_[*id].host) return false;
      const std::vector<Shape> leaves = x.shape().Leaves();
      return Aligned(leaves[k].ByteSize()) < buffers_[*id].bytes;
    };
    for (size_t k = 0; k < ia.leaves.size(); ++k) {
      int32_t id = -1;
      if (!partial(instr, ia.leaves[k], k, &id)) continue;
      bool continued = false;  // a part already prefetched, forwarded
      for (const HloInstruction* op : instr.operands()) {
        const InstructionAssignment& oa = ca.instructions.at(op);
        for (size_t j = 0; j < oa.leaves.size() && !continued; ++j) {
          int32_t oid = -1;
          continued = partial(*op, oa.leaves[j], j, &oid) && oid == id;
        }
      }
      if (continued) continue;
      Buffer b;
      const Shape shape = instr.shape().Leaves()[k];
      b.bytes = Aligned(shape.ByteSize());
      const Tag tag = TagOf(&instr);
      b.category =
          tag.category == BufferCategory::kSaved ? BufferCategory::kTemporaries : tag.category;
      b.role = tag.role >= 0 && tag.category != BufferCategory::kSaved
                   ? tag.role
                   : Role("layer prefetched from host");
      b.origin = &instr;
      b.shape = shape;
      prefetched.emplace_back(w.view_end[t], NewBuffer(std::move(b)));
    }
  }

  // One run of `c`; `external`: the walk's buffer for each of the
  // assignment's buffers outside c's region (-1: not counted, a constant).
  void Walk(const HloComputation& c, const std::vector<int32_t>& external, bool is_entry) {
    const ComputationWalk& w = walks_.at(&c);
    const ComputationAssignment& ca = *w.assignment;
    const int64_t n = static_cast<int64_t>(ca.sequence.size());
    std::vector<int32_t> region(ca.buffers.size(), -1);
    std::vector<std::pair<int64_t, int32_t>> prefetched;  // (last position, buffer)
    auto resolve = [&](const LeafAssignment& l) -> int32_t {
      if (l.buffer >= 0) return region[l.buffer];
      return l.external >= 0 ? external[l.external] : -1;
    };
    auto free_at = [&](int64_t t) {
      for (int32_t b : w.ends[t]) Free(region[b]);
      if (is_entry) {
        for (int32_t e : w.external_ends[t]) Free(external[e]);
      }
      for (auto& [end, id] : prefetched) {
        if (id >= 0 && end <= t) {
          Free(id);
          id = -1;
        }
      }
    };
    for (int64_t t = 0; t < n; ++t) {
      const HloInstruction& instr = *ca.sequence[t];
      const InstructionAssignment& ia = ca.instructions.at(&instr);
      current_ = &instr;
      for (int32_t b : w.starts[t]) {
        const AssignedBuffer& ab = ca.buffers[b];
        Buffer x;
        x.bytes = ab.size;
        x.category = w.labels[b].category;
        x.role = w.labels[b].role;
        x.host = w.labels[b].host;
        x.origin = ab.instr;
        x.shape = w.shapes[b];
        region[b] = NewBuffer(std::move(x));
      }
      if (offloading_) Prefetch(instr, ia, ca, w, t, resolve, prefetched);
      // An instruction the executor runs no step for (a constant, a
      // get-tuple-element its readers read through) is no point of the
      // timeline and no step counted.
      const bool runs = compiler::TakesStep(instr);
      if (runs) Observe();
      if (instr.opcode() == HloOpcode::kWhile) {
        // The body and condition read the loop's state where the assignment
        // put the while's result.
        std::vector<int32_t> state;
        for (const LeafAssignment& l : ia.leaves) state.push_back(resolve(l));
        const int64_t trips = trips_.at(&instr);
        for (int64_t trip = 0;; ++trip) {
          WalkCallee(*instr.while_condition(), state);
          if (trip == trips) break;
          WalkCallee(*instr.while_body(), state);
        }
        current_ = &instr;
      } else if (instr.opcode() == HloOpcode::kCall) {
        std::vector<int32_t> args;
        for (const HloInstruction* op : instr.operands()) {
          for (const LeafAssignment& l : ca.instructions.at(op).leaves) args.push_back(resolve(l));
        }
        WalkCallee(*instr.to_apply(), args);
        current_ = &instr;
      } else if (instr.opcode() == HloOpcode::kConditional) {
        // Which branch runs is known only when it runs: each is walked in
        // turn, so the peak is the largest branch's.
        for (size_t b = 0; b < instr.called_computations().size(); ++b) {
          std::vector<int32_t> args;
          for (const LeafAssignment& l : ca.instructions.at(instr.operand(b + 1)).leaves) {
            args.push_back(resolve(l));
          }
          WalkCallee(*instr.called_computations()[b], args);
        }
        current_ = &instr;
      }
      if (runs) {
        ++step_;
        Sample();
      }
      free_at(t);
    }
    free_at(n);
  }

  void WalkCallee(const HloComputation& callee, const std::vector<int32_t>& args) {
    const ComputationWalk& w = walks_.at(&callee);
    std::vector<int32_t> external(w.external_arg.size(), -1);
    for (size_t i = 0; i < external.size(); ++i) {
      const int32_t a = w.external_arg[i];
      if (a >= 0) {
        WEFT_INTERNAL_CHECK(a < static_cast<int32_t>(args.size()),
                            "'{}' reads argument leaf {} of {}", callee.name(), a, args.size());
        external[i] = args[a];
      }
    }
    Walk(callee, external, /*is_entry=*/false);
  }

  // ---- the timeline ----------------------------------------------------------

  void Sample() {
    if (snapshot_step_ == 0 || total_steps_ <= 0) return;
    const int64_t points = std::max<int64_t>(1, options_.timeline_points);
    const int64_t bucket = (step_ - 1) * points / total_steps_;
    std::vector<TimelinePoint>& tl = out_->timeline;
    if (bucket != bucket_) {
      bucket_ = bucket;
      tl.push_back({});
    }
    TimelinePoint& p = tl.back();
    p.step = step_;
    if (live_ >= p.total) {
      p.total = live_;
      p.by_category = live_by_category_;
    }
  }

  const HloModule& module_;
  const MemoryPlanOptions& options_;
  const BufferAssignment& assignment_;
  // Saved values live in host memory: every saved stack (offload_saved) or
  // those the program marks (OffloadedStateOf).
  bool offloading_ = false;
  bool executor_view_ = false;
  std::unordered_map<const HloComputation*, ComputationWalk> walks_;
  std::unordered_map<const HloInstruction*, int64_t> trips_;
  std::unordered_map<const HloInstruction*, Tag> tags_;
  std::vector<std::string> roles_;
  std::unordered_map<std::string, int32_t> role_index_;

  std::vector<Buffer> buffers_;
  int64_t live_ = 0, inputs_live_ = 0, host_live_ = 0, peak_ = 0, host_peak_ = 0;
  int64_t score_peak_ = -1, score_step_ = 0;
  int64_t saved_live_ = 0, saved_peak_ = 0;
  std::array<int64_t, kNumBufferCategories> live_by_category_{};
  int64_t step_ = 0;
  const HloInstruction* current_ = nullptr;
  int64_t snapshot_step_ = 0, snapshot_score_ = 0, total_steps_ = 0, bucket_ = -1;
  bool snapped_ = false;
  MemoryPlan* out_ = nullptr;
};

}  // namespace

MemoryPlan PlanMemory(const HloModule& program, const MemoryPlanOptions& options) {
  WEFT_INTERNAL_CHECK(program.entry_computation() != nullptr,
                      "module '{}' has no entry computation", program.name());
  // What the executor cannot run, the plan cannot size either.
  for (const HloComputation* c : program.computations()) {
    for (const HloInstruction* instr : c->instructions()) {
      if (instr->opcode() != HloOpcode::kCustomCall) continue;
      const std::string& target = instr->attrs().custom_call_target;
      WEFT_CHECK(target == kFlexAttentionTarget || target == kFlexAttentionBackwardTarget ||
                     target == kAllocateBufferTarget,
                 "{}: custom_call_target \"{}\" is not supported", instr->Describe(), target);
    }
  }
  // One assignment, the executor's: its peak (inputs + arena + outputs)
  // and every buffer the walk counts.
  const compiler::BufferAssignment assignment =
      compiler::AssignBuffers(program, compiler::ScheduleComputation);
  Simulator sim(program, options, assignment);
  MemoryPlan first;
  sim.Run(0, 0, 0, first);  // the peak and where it is first reached
  MemoryPlan plan;
  sim.Run(first.peak_step, sim.score_peak(), first.total_steps, plan);
  WEFT_INTERNAL_CHECK(sim.snapped() && plan.live_peak_bytes == first.live_peak_bytes &&
                          plan.total_steps == first.total_steps,
                      "the two walks over '{}' disagree", program.name());
  plan.arena_bytes = assignment.arena_bytes();
  // The executor's accounting applies where it is asked for and nothing is
  // offloaded (the executor never frees its inputs).
  plan.peak_bytes = options.executor_accounting && !sim.offloading() ? assignment.peak_bytes()
                                                                     : plan.live_peak_bytes;
  int64_t sum = 0;
  for (int64_t b : plan.peak_by_category) sum += b;
  WEFT_INTERNAL_CHECK(sum == plan.peak_bytes, "the categories of '{}' add to {}, not its peak {}",
                      program.name(), sum, plan.peak_bytes);
  return plan;
}

}  // namespace weft::analysis
