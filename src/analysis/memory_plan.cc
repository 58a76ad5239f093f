// Buffer liveness over the executor's schedule: a symbolic run of the
// per-device program that moves sizes instead of bytes. Every rule below
// names the executor code it mirrors (src/runtime/executor.cc and eval_*.cc);
// a change there must be made here too (memory_plan_test compares the two).
#include "weft/analysis/memory_plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "weft/analysis/loops.h"
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

struct Leaf {
  int32_t buffer = -1;
  int64_t bytes = 0;  // this tensor's bytes (a view may be smaller than its buffer)
};
using Value = std::vector<Leaf>;

struct Buffer {
  int64_t bytes = 0;
  int32_t refs = 0;
  bool writable = true;  // false: borrowed (inputs, constants)
  bool host = false;     // counted in host memory (offloaded)
  BufferCategory category = BufferCategory::kTemporaries;
  int32_t role = -1;  // index into Simulator::roles_
  const HloInstruction* origin = nullptr;
  Shape shape;  // as compiled (the policy only changes bytes)
};

// A static label for what an instruction's result is.
struct Tag {
  BufferCategory category;
  int32_t role;
};

// executor.cc: Step / ComputationPlan.
struct SimStep {
  const HloInstruction* instr = nullptr;
  int32_t out = 0;
  std::vector<int32_t> operands;
  std::vector<int32_t> dying_index;
  std::vector<int32_t> dying_slots;
  bool result_unused = false;
  int64_t leaf_begin = 0, leaf_count = 0;
};

struct SimPlan {
  std::vector<SimStep> steps;
  int32_t num_slots = 0, root_slot = 0;
  size_t max_dying = 0;
};

// executor.cc: MakePlan().
SimPlan MakeSimPlan(const HloComputation& computation) {
  SimPlan plan;
  const std::vector<HloInstruction*> order = compiler::ScheduleComputation(computation);
  std::unordered_map<const HloInstruction*, int32_t> slot;
  for (size_t i = 0; i < order.size(); ++i) slot[order[i]] = static_cast<int32_t>(i);
  plan.num_slots = static_cast<int32_t>(order.size());
  plan.root_slot = slot.at(computation.root_instruction());
  std::vector<int32_t> last_use(order.size(), -1);
  for (size_t i = 0; i < order.size(); ++i) {
    for (const HloInstruction* operand : order[i]->operands()) {
      last_use[slot.at(operand)] = static_cast<int32_t>(i);
    }
  }
  for (size_t i = 0; i < order.size(); ++i) {
    const HloInstruction* instr = order[i];
    SimStep step;
    step.instr = instr;
    step.out = static_cast<int32_t>(i);
    for (const HloInstruction* operand : instr->operands()) {
      const int32_t s = slot.at(operand);
      step.operands.push_back(s);
      int32_t index = -1;
      if (last_use[s] == static_cast<int32_t>(i) && s != plan.root_slot) {
        auto it = std::find(step.dying_slots.begin(), step.dying_slots.end(), s);
        index = static_cast<int32_t>(it - step.dying_slots.begin());
        if (it == step.dying_slots.end()) step.dying_slots.push_back(s);
      }
      step.dying_index.push_back(index);
    }
    step.result_unused = last_use[i] < 0 && step.out != plan.root_slot;
    if (instr->opcode() == HloOpcode::kGetTupleElement) {
      const Shape& tuple = instr->operand(0)->shape();
      for (int64_t k = 0; k < instr->tuple_index(); ++k) {
        step.leaf_begin += tuple.tuple_shapes(k).LeafCount();
      }
      step.leaf_count = tuple.tuple_shapes(instr->tuple_index()).LeafCount();
    }
    plan.max_dying = std::max(plan.max_dying, step.dying_slots.size());
    plan.steps.push_back(std::move(step));
  }
  return plan;
}

// eval_shape_ops.cc: IsContiguousBox().
bool IsContiguousBox(const std::vector<int64_t>& dims, const std::vector<int64_t>& sizes) {
  size_t k = 0;
  while (k < dims.size() && sizes[k] == 1) ++k;
  if (k == dims.size()) return true;
  for (size_t j = k + 1; j < dims.size(); ++j) {
    if (sizes[j] != dims[j]) return false;
  }
  return true;
}

// eval_dot.cc: IsInOrder().
bool IsInOrder(const std::vector<int64_t>& order, const std::vector<int64_t>& dims) {
  int64_t last = -1;
  for (int64_t d : order) {
    if (dims[d] == 1) continue;
    if (d < last) return false;
    last = d;
  }
  return true;
}

std::vector<int64_t> Concat3(const std::vector<int64_t>& a, const std::vector<int64_t>& b,
                             const std::vector<int64_t>& c) {
  std::vector<int64_t> out = a;
  out.insert(out.end(), b.begin(), b.end());
  out.insert(out.end(), c.begin(), c.end());
  return out;
}

// eval_dot.cc: AsMatrices() packs an operand whose dims are in neither
// [batch, rows, cols] nor [batch, cols, rows] order.
bool DotOperandNeedsPacking(const Shape& x, const std::vector<int64_t>& batch,
                            const std::vector<int64_t>& rows, const std::vector<int64_t>& cols) {
  return !IsInOrder(Concat3(batch, rows, cols), x.dimensions()) &&
         !IsInOrder(Concat3(batch, cols, rows), x.dimensions());
}

bool Contains(const std::vector<int64_t>& v, int64_t x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

int64_t Outer(const Shape& s, int64_t d) {
  int64_t outer = 1;
  for (int64_t i = 0; i < d; ++i) outer *= s.dimensions(i);
  return outer;
}

const HloInstruction* SkipAliases(const HloInstruction* x) {
  while (x->opcode() == HloOpcode::kCopy || x->opcode() == HloOpcode::kReshape) {
    x = x->operand(0);
  }
  return x;
}

class Simulator {
 public:
  Simulator(const HloModule& module, const MemoryPlanOptions& options)
      : module_(module), options_(options) {
    for (const HloComputation* c : module.MakeComputationPostOrder()) {
      plans_.emplace(c, MakeSimPlan(*c));
      for (const HloInstruction* instr : c->instructions()) {
        if (instr->opcode() == HloOpcode::kWhile) trips_[instr] = WhileTripCount(*instr);
      }
    }
    TagGradients();
    TagSaved();
  }

  // One symbolic run. With `snapshot_step` > 0, records the buffers live
  // when the peak `snapshot_peak` is first reached in that step, and the
  // timeline over `total_steps`.
  void Run(int64_t snapshot_step, int64_t snapshot_peak, int64_t total_steps, MemoryPlan& out) {
    buffers_.clear();
    live_ = host_live_ = peak_ = host_peak_ = saved_live_ = saved_peak_ = 0;
    live_by_category_.fill(0);
    step_ = 0;
    snapshot_step_ = snapshot_step;
    snapshot_peak_ = snapshot_peak;
    total_steps_ = total_steps;
    snapped_ = false;
    out_ = &out;
    bucket_ = -1;

    const HloComputation* entry = module_.entry_computation();
    std::vector<Value> args;
    int64_t leaf = 0;
    for (int64_t p = 0; p < entry->num_parameters(); ++p) {
      const HloInstruction* param = entry->parameter_instruction(p);
      Value v;
      for (const Shape& s : param->shape().Leaves()) {
        const bool is_weight = leaf >= options_.num_data_inputs;
        const int64_t w = leaf - options_.num_data_inputs;
        const std::string name = is_weight && w < static_cast<int64_t>(options_.weight_names.size())
                                     ? options_.weight_names[w]
                                     : param->name();
        // executor.cc Run(): inputs the caller keeps are borrowed (read-only).
        const Leaf l =
            NewBuffer(s, param, is_weight ? BufferCategory::kParameters : BufferCategory::kInputs,
                      Role(fmt::format("{} {}", is_weight ? "weight" : "input", name)),
                      /*writable=*/false);
        if (is_weight && options_.weights_resident) ++buffers_[l.buffer].refs;  // held outside
        v.push_back(l);
        ++leaf;
      }
      args.push_back(std::move(v));
    }
    Value root = RunComputation(*entry, std::move(args));
    Release(root);
    out.total_steps = step_;
    out.host_peak_bytes = host_peak_;
    out.saved_bytes = saved_peak_;
    if (snapshot_step_ == 0) {
      out.peak_bytes = peak_;
      out.peak_step = peak_step_;
    }
  }

 private:
  int32_t Role(std::string text) {
    auto [it, fresh] = role_index_.emplace(text, static_cast<int32_t>(roles_.size()));
    if (fresh) roles_.push_back(std::move(text));
    return it->second;
  }

  // ---- static labels -------------------------------------------------------

  // The entry root's outputs 1.. are the gradients: follow each back through
  // aliases, tuples and loop state to the instructions whose buffers hold it.
  void TagGradients() {
    const HloInstruction* root = module_.entry_computation()->root_instruction();
    if (root->opcode() != HloOpcode::kTuple) return;
    for (int64_t k = 1; k < root->operand_count(); ++k) {
      const int64_t w = k - 1;
      const std::string name = w < static_cast<int64_t>(options_.weight_names.size())
                                   ? options_.weight_names[w]
                                   : fmt::format("output {}", k);
      std::unordered_set<const HloInstruction*> seen;
      TagChain(root->operand(k), {BufferCategory::kGradients, Role("grad " + name)}, seen);
    }
  }

  void TagChain(const HloInstruction* x, Tag tag, std::unordered_set<const HloInstruction*>& seen) {
    if (!seen.insert(x).second) return;
    if (x->opcode() == HloOpcode::kParameter) return;
    tags_.emplace(x, tag);
    switch (x->opcode()) {
      case HloOpcode::kCopy:
      case HloOpcode::kReshape:
      case HloOpcode::kDynamicUpdateSlice:  // updated in place
      // The partitioner's reshards to the output's sharding: what they read
      // is the same gradient in another layout.
      case HloOpcode::kDynamicSlice:
      case HloOpcode::kSlice:
      case HloOpcode::kAllGather:
      case HloOpcode::kAllToAll:
      case HloOpcode::kCollectivePermute:
      case HloOpcode::kReduceScatter:
      case HloOpcode::kAllReduce:
        TagChain(x->operand(0), tag, seen);
        break;
      case HloOpcode::kGetTupleElement: {
        const HloInstruction* t = x->operand(0);
        const int64_t i = x->tuple_index();
        if (t->opcode() == HloOpcode::kTuple) {
          TagChain(t->operand(i), tag, seen);
        } else if (t->opcode() == HloOpcode::kWhile) {
          TagLoopSlot(t, i, tag, seen);
        }
        break;
      }
      default:
        break;
    }
  }

  // Element i of a while's state: its init and what the body writes back.
  void TagLoopSlot(const HloInstruction* w, int64_t i, Tag tag,
                   std::unordered_set<const HloInstruction*>& seen) {
    const HloInstruction* init = SkipAliases(w->operand(0));
    if (init->opcode() == HloOpcode::kTuple) TagChain(init->operand(i), tag, seen);
    const HloInstruction* next = w->while_body()->root_instruction();
    if (next->opcode() == HloOpcode::kTuple) TagChain(next->operand(i), tag, seen);
  }

  // A forward scan's stacked outputs read by a later loop: element i of a
  // while whose body writes it with dynamic-update-slice into itself, and
  // whose final value feeds another while.
  void TagSaved() {
    for (const HloComputation* c : module_.computations()) {
      for (const HloInstruction* w : c->instructions()) {
        if (w->opcode() != HloOpcode::kWhile) continue;
        const HloInstruction* body_root = w->while_body()->root_instruction();
        if (body_root->opcode() != HloOpcode::kTuple) continue;
        for (const HloInstruction* user : w->users()) {
          if (user->opcode() != HloOpcode::kGetTupleElement) continue;
          const int64_t i = user->tuple_index();
          const HloInstruction* next = SkipAliases(body_root->operand(i));
          if (next->opcode() != HloOpcode::kDynamicUpdateSlice) continue;
          const HloInstruction* target = SkipAliases(next->operand(0));
          if (target->opcode() != HloOpcode::kGetTupleElement || target->tuple_index() != i) {
            continue;
          }
          if (!FeedsWhile(user) || tags_.count(user)) continue;
          std::unordered_set<const HloInstruction*> seen;
          const Tag tag{BufferCategory::kSaved,
                        Role(fmt::format("saved by {} (state {})", w->name(), i))};
          tags_.emplace(user, tag);
          seen.insert(user);
          TagLoopSlot(w, i, tag, seen);
        }
      }
    }
  }

  static bool FeedsWhile(const HloInstruction* x) {
    std::vector<const HloInstruction*> stack = {x};
    std::unordered_set<const HloInstruction*> seen;
    while (!stack.empty()) {
      const HloInstruction* y = stack.back();
      stack.pop_back();
      for (const HloInstruction* u : y->users()) {
        if (u->opcode() == HloOpcode::kWhile) return true;
        const HloOpcode op = u->opcode();
        if ((op == HloOpcode::kTuple || op == HloOpcode::kCopy || op == HloOpcode::kReshape) &&
            seen.insert(u).second) {
          stack.push_back(u);
        }
      }
    }
    return false;
  }

  // ---- buffers --------------------------------------------------------------

  Leaf NewBuffer(const Shape& shape, const HloInstruction* origin, BufferCategory category,
                 int32_t role, bool writable) {
    Buffer b;
    b.bytes = PlannedBytes(shape, options_.precision);
    b.shape = shape;
    const int64_t bytes = b.bytes;
    b.refs = 1;
    b.writable = writable;
    b.origin = origin;
    b.category = category;
    b.role = role;
    b.host = options_.offload_saved && category == BufferCategory::kSaved;
    buffers_.push_back(b);
    const int32_t id = static_cast<int32_t>(buffers_.size() - 1);
    Count(buffers_.back(), +1);
    return Leaf{id, bytes};
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
    live_by_category_[static_cast<int>(b.category)] += bytes;
    if (sign > 0) Allocated();
  }

  // MemoryTracker::Allocated: the peak is reached right after an allocation.
  void Allocated() {
    if (live_ > peak_) {
      peak_ = live_;
      peak_step_ = step_ + 1;
    }
    if (!snapped_ && snapshot_step_ > 0 && step_ + 1 == snapshot_step_ && live_ == snapshot_peak_) {
      Snapshot();
    }
  }

  void Snapshot() {
    snapped_ = true;
    out_->peak_bytes = live_;
    out_->peak_step = snapshot_step_;
    out_->peak_by_category = live_by_category_;
    out_->peak_instruction = current_->name();
    out_->peak_computation = current_->parent() ? current_->parent()->name() : "";
    for (const Buffer& b : buffers_) {
      if (b.refs <= 0 || b.host) continue;
      LiveBuffer lb;
      lb.instruction = b.origin->name();
      lb.computation = b.origin->parent() ? b.origin->parent()->name() : "";
      lb.role = b.role >= 0 ? roles_[b.role] : "";
      lb.shape = b.shape;
      lb.bytes = b.bytes;
      lb.category = b.category;
      out_->live_at_peak.push_back(std::move(lb));
    }
    std::stable_sort(out_->live_at_peak.begin(), out_->live_at_peak.end(),
                     [](const LiveBuffer& a, const LiveBuffer& b) { return a.bytes > b.bytes; });
  }

  void Retag(Buffer& b, Tag tag) {
    if (b.category == BufferCategory::kParameters || b.category == BufferCategory::kInputs) return;
    if (b.category == tag.category && b.role == tag.role) return;
    Count(b, -1);
    b.category = tag.category;
    b.role = tag.role;
    b.host = options_.offload_saved && tag.category == BufferCategory::kSaved;
    Count(b, +1);
  }

  // What a result of `instr` is, when nothing labelled it statically.
  Tag TagOf(const HloInstruction* instr) const {
    auto it = tags_.find(instr);
    if (it != tags_.end()) return it->second;
    return {
        IsCollective(instr->opcode()) ? BufferCategory::kCollectives : BufferCategory::kTemporaries,
        -1};
  }

  Leaf Allocate(const Shape& shape) {
    const Tag tag = TagOf(current_);
    return NewBuffer(shape, current_, tag.category, tag.role, true);
  }

  void Unref(int32_t id) {
    Buffer& b = buffers_[id];
    if (--b.refs == 0) Count(b, -1);
  }

  void Release(Value& v) {
    for (const Leaf& l : v) Unref(l.buffer);
    v.clear();
  }

  Value Share(const Value& v) {
    for (const Leaf& l : v) ++buffers_[l.buffer].refs;
    return v;
  }

  // ---- the schedule (executor.cc RunComputation / RunStep) ---------------

  struct Op {
    Value* value = nullptr;
    bool dying = false;
  };

  Value RunComputation(const HloComputation& computation, std::vector<Value> args) {
    const SimPlan& plan = plans_.at(&computation);
    std::vector<Value> slots(plan.num_slots);
    std::vector<Value> dying(plan.max_dying);
    std::vector<Op> ops;
    for (const SimStep& step : plan.steps) {
      for (size_t k = 0; k < step.dying_slots.size(); ++k) {
        dying[k] = std::move(slots[step.dying_slots[k]]);
        slots[step.dying_slots[k]].clear();
      }
      ops.resize(step.operands.size());
      for (size_t k = 0; k < step.operands.size(); ++k) {
        const int32_t d = step.dying_index[k];
        ops[k] = d >= 0 ? Op{&dying[d], true} : Op{&slots[step.operands[k]], false};
      }
      current_ = step.instr;
      std::vector<int32_t> scratch;
      slots[step.out] = RunStep(step, args, ops, scratch);
      current_ = step.instr;
      ++step_;
      Sample();
      for (int32_t id : scratch) Unref(id);
      for (size_t k = 0; k < step.dying_slots.size(); ++k) Release(dying[k]);
      if (step.result_unused) Release(slots[step.out]);
    }
    Value root = std::move(slots[plan.root_slot]);
    slots[plan.root_slot].clear();
    for (Value& v : slots) Release(v);
    for (Value& v : args) Release(v);
    return root;
  }

  // executor.cc RunStep's take(): moves a dying operand's value, shares a
  // live one; an operand repeated in the list (tuple(a, a)) is moved only by
  // its last occurrence.
  Value Take(std::vector<Op>& ops, size_t k) {
    Op& op = ops[k];
    if (!op.dying) return Share(*op.value);
    for (size_t j = k + 1; j < ops.size(); ++j) {
      if (ops[j].value == op.value) return Share(*op.value);
    }
    Value v = std::move(*op.value);
    op.value->clear();
    return v;
  }

  Value RunStep(const SimStep& step, std::vector<Value>& args, std::vector<Op>& ops,
                std::vector<int32_t>& scratch) {
    const HloInstruction& instr = *step.instr;
    switch (instr.opcode()) {
      case HloOpcode::kParameter: {
        Value v = std::move(args.at(instr.parameter_number()));
        args.at(instr.parameter_number()).clear();
        return v;
      }
      case HloOpcode::kConstant:  // a borrowed view of the executor's literal
        return Value{
            NewBuffer(instr.shape(), &instr, BufferCategory::kTemporaries, -1, /*writable=*/false)};
      case HloOpcode::kCopy:
        return Shared(Take(ops, 0));
      case HloOpcode::kTuple: {
        Value out;
        for (size_t k = 0; k < ops.size(); ++k) {
          Value v = Take(ops, k);
          out.insert(out.end(), v.begin(), v.end());
        }
        return Shared(std::move(out));
      }
      case HloOpcode::kGetTupleElement: {
        const Value& tuple = *ops[0].value;
        Value v(tuple.begin() + step.leaf_begin, tuple.begin() + step.leaf_begin + step.leaf_count);
        return Shared(Share(v));
      }
      case HloOpcode::kCall: {
        std::vector<Value> call_args;
        for (size_t k = 0; k < ops.size(); ++k) call_args.push_back(Take(ops, k));
        return RunComputation(*instr.to_apply(), std::move(call_args));
      }
      case HloOpcode::kWhile: {
        Value state = Take(ops, 0);
        const int64_t trips = trips_.at(&instr);
        for (int64_t trip = 0;; ++trip) {
          std::vector<Value> cond_args;
          cond_args.push_back(Share(state));
          Value pred = RunComputation(*instr.while_condition(), std::move(cond_args));
          if (trip == trips) {
            Release(pred);
            break;
          }
          std::vector<Value> body_args;
          body_args.push_back(std::move(state));
          state = RunComputation(*instr.while_body(), std::move(body_args));
          Release(pred);
        }
        current_ = &instr;
        return state;
      }
      default:
        return Evaluate(instr, ops, scratch);
    }
  }

  // Results that alias their operands take the instruction's static label.
  Value Shared(Value v) {
    auto it = tags_.find(current_);
    if (it != tags_.end()) {
      for (const Leaf& l : v) Retag(buffers_[l.buffer], it->second);
    }
    return v;
  }

  // EvalArgs::TryReuse: a dying operand nobody else holds, of the same size.
  std::optional<Leaf> TryReuse(const std::vector<Op>& ops, size_t i, int64_t bytes) {
    const Op& op = ops[i];
    if (!op.dying || op.value->size() != 1) return std::nullopt;
    const Leaf t = (*op.value)[0];
    Buffer& b = buffers_[t.buffer];
    if (b.refs != 1 || !b.writable || t.bytes != bytes || b.bytes != t.bytes) return std::nullopt;
    return t;
  }

  Leaf ReuseOrAllocate(const std::vector<Op>& ops, const Shape& shape,
                       std::initializer_list<size_t> candidates) {
    const int64_t bytes = PlannedBytes(shape, options_.precision);
    for (size_t i : candidates) {
      if (i >= ops.size()) continue;
      if (std::optional<Leaf> t = TryReuse(ops, i, bytes)) return Reuse(*t, shape);
    }
    return Allocate(shape);
  }

  // The result takes over the operand's buffer (which the step then releases).
  Leaf Reuse(Leaf t, const Shape& shape) {
    Buffer& b = buffers_[t.buffer];
    ++b.refs;
    Retag(b, TagOf(current_));
    b.origin = current_;
    b.shape = shape;
    return t;
  }

  int64_t Bytes(const Shape& s) const { return PlannedBytes(s, options_.precision); }

  Value Evaluate(const HloInstruction& instr, std::vector<Op>& ops, std::vector<int32_t>& scratch) {
    const HloOpcode op = instr.opcode();
    const Shape& shape = instr.shape();
    auto temp = [&](const Shape& s) { scratch.push_back(Allocate(s).buffer); };
    auto view = [&](Op& o, int64_t bytes) {
      Leaf l = (*o.value)[0];
      ++buffers_[l.buffer].refs;
      l.bytes = bytes;
      return Shared(Value{l});
    };
    if (IsElementwise(op)) {  // eval_elementwise.cc
      if (op == HloOpcode::kSelect) return {ReuseOrAllocate(ops, shape, {1, 2})};
      if (op == HloOpcode::kClamp) return {ReuseOrAllocate(ops, shape, {1})};
      if (op == HloOpcode::kConvert) {
        if (instr.operand(0)->shape().element_type() == shape.element_type()) {
          return view(ops[0], Bytes(shape));
        }
        return {ReuseOrAllocate(ops, shape, {0})};
      }
      if (IsElementwiseUnary(op)) return {ReuseOrAllocate(ops, shape, {0})};
      if (op == HloOpcode::kCompare) return {Allocate(shape)};
      return {ReuseOrAllocate(ops, shape, {0, 1})};
    }
    switch (op) {
      case HloOpcode::kReshape:  // eval_shape_ops.cc
        return view(ops[0], Bytes(shape));
      case HloOpcode::kBroadcast: {
        const Shape& x = instr.operand(0)->shape();
        const std::vector<int64_t>& dims = instr.dimensions();
        if (x.ElementsCount() == shape.ElementsCount() &&
            std::is_sorted(dims.begin(), dims.end())) {
          return view(ops[0], Bytes(shape));
        }
        return {Allocate(shape)};
      }
      case HloOpcode::kSlice:
      case HloOpcode::kDynamicSlice: {  // SliceOf()
        const Shape& x = instr.operand(0)->shape();
        bool unit_strides = true;
        if (op == HloOpcode::kSlice) {
          for (const SliceDim& s : instr.attrs().slice) unit_strides &= s.stride == 1;
        }
        const bool lives_on = !TryReuse(ops, 0, Bytes(x)).has_value();
        const Leaf src = (*ops[0].value)[0];
        const bool from_host = buffers_[src.buffer].host;  // offloaded: prefetch a copy
        if (!from_host && unit_strides && IsContiguousBox(x.dimensions(), shape.dimensions()) &&
            (lives_on || 2 * Bytes(shape) >= Bytes(x))) {
          return view(ops[0], Bytes(shape));
        }
        if (from_host) {
          const Leaf l = Allocate(shape);
          Buffer& b = buffers_[l.buffer];
          if (b.role < 0) {
            Count(b, -1);
            b.role = Role("layer prefetched from host");
            Count(b, +1);
          }
          return {l};
        }
        return {Allocate(shape)};
      }
      case HloOpcode::kDynamicUpdateSlice:
      case HloOpcode::kScatter:  // eval_gather_scatter.cc EvalScatter
        if (std::optional<Leaf> t = TryReuse(ops, 0, Bytes(shape))) return {Reuse(*t, shape)};
        return {Allocate(shape)};
      case HloOpcode::kTranspose:
      case HloOpcode::kConcatenate:
      case HloOpcode::kPad:
      case HloOpcode::kIota:
      case HloOpcode::kReverse:
      case HloOpcode::kGather:
      case HloOpcode::kPartitionId:
      case HloOpcode::kReplicaId:
        return {Allocate(shape)};
      case HloOpcode::kDot: {  // eval_dot.cc
        const Shape& lhs = instr.operand(0)->shape();
        const Shape& rhs = instr.operand(1)->shape();
        const DotDimensionNumbers& dn = instr.attrs().dot;
        std::vector<int64_t> lhs_free, rhs_free;
        for (int64_t d = 0; d < lhs.rank(); ++d) {
          if (!Contains(dn.lhs_batch_dims, d) && !Contains(dn.lhs_contracting_dims, d)) {
            lhs_free.push_back(d);
          }
        }
        for (int64_t d = 0; d < rhs.rank(); ++d) {
          if (!Contains(dn.rhs_batch_dims, d) && !Contains(dn.rhs_contracting_dims, d)) {
            rhs_free.push_back(d);
          }
        }
        const Leaf out = Allocate(shape);
        if (DotOperandNeedsPacking(lhs, dn.lhs_batch_dims, lhs_free, dn.lhs_contracting_dims)) {
          temp(lhs);
        }
        if (DotOperandNeedsPacking(rhs, dn.rhs_batch_dims, dn.rhs_contracting_dims, rhs_free)) {
          temp(rhs);
        }
        return {out};
      }
      case HloOpcode::kReduce: {  // eval_reduce.cc: one buffer per output
        Value out;
        for (const Shape& s : shape.Leaves()) out.push_back(Allocate(s));
        return out;
      }
      case HloOpcode::kAllReduce: {  // eval_collectives.cc: in place per operand
        Value out;
        for (size_t i = 0; i < ops.size(); ++i) {
          out.push_back(ReuseOrAllocate(ops, instr.operand(i)->shape(), {i}));
        }
        return out;
      }
      case HloOpcode::kCollectivePermute:
        return {ReuseOrAllocate(ops, shape, {0})};
      case HloOpcode::kAllGather: {
        const Leaf out = Allocate(shape);
        if (Outer(instr.operand(0)->shape(), instr.dimensions()[0]) > 1) temp(shape);
        return {out};
      }
      case HloOpcode::kReduceScatter:
      case HloOpcode::kAllToAll: {
        const Shape& x = instr.operand(0)->shape();
        const Leaf out = Allocate(shape);
        if (Outer(x, instr.dimensions()[0]) > 1) temp(x);
        return {out};
      }
      case HloOpcode::kCustomCall: {  // eval_custom_call.cc (f32: no conversion copies)
        const std::string& target = instr.attrs().custom_call_target;
        WEFT_CHECK(target == kFlexAttentionTarget ||
                       target == kFlexAttentionBackwardTarget,
                   "{}: custom_call_target \"{}\" is not supported", instr.Describe(), target);
        Value out;
        if (target == kFlexAttentionTarget && !shape.IsTuple()) {
          out.push_back(Allocate(shape));
          const Shape& q = instr.operand(0)->shape();
          temp(Shape(PrimitiveType::kF32, {q.dimensions(0), q.dimensions(1), q.dimensions(2)}));
          return out;
        }
        for (const Shape& s : shape.Leaves()) out.push_back(Allocate(s));
        return out;
      }
      default:
        Fail("{}: the planner does not model opcode {} (the executor does not run it either)",
             instr.Describe(), HloOpcodeString(op));
    }
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
  std::unordered_map<const HloComputation*, SimPlan> plans_;
  std::unordered_map<const HloInstruction*, int64_t> trips_;
  std::unordered_map<const HloInstruction*, Tag> tags_;
  std::vector<std::string> roles_;
  std::unordered_map<std::string, int32_t> role_index_;

  std::vector<Buffer> buffers_;
  int64_t live_ = 0, host_live_ = 0, peak_ = 0, host_peak_ = 0, peak_step_ = 0;
  int64_t saved_live_ = 0, saved_peak_ = 0;
  std::array<int64_t, kNumBufferCategories> live_by_category_{};
  int64_t step_ = 0;
  const HloInstruction* current_ = nullptr;
  int64_t snapshot_step_ = 0, snapshot_peak_ = 0, total_steps_ = 0, bucket_ = -1;
  bool snapped_ = false;
  MemoryPlan* out_ = nullptr;
};

}  // namespace

MemoryPlan PlanMemory(const HloModule& program, const MemoryPlanOptions& options) {
  WEFT_INTERNAL_CHECK(program.entry_computation() != nullptr,
                      "module '{}' has no entry computation", program.name());
  Simulator sim(program, options);
  MemoryPlan first;
  sim.Run(0, 0, 0, first);  // the peak and where it is first reached
  MemoryPlan plan;
  sim.Run(first.peak_step, first.peak_bytes, first.total_steps, plan);
  WEFT_INTERNAL_CHECK(plan.peak_bytes == first.peak_bytes && plan.peak_step == first.peak_step,
                      "the two liveness passes over '{}' disagree", program.name());
  // The executor's peak is the buffer assignment's (the same function over
  // the same schedule, sized under the precision policy). It applies where
  // the executor's accounting is asked for: inputs held for the whole run
  // (weights resident or not: the executor never frees its inputs), nothing
  // offloaded.
  const Precision precision = options.precision;
  const compiler::BufferAssignment assignment = compiler::AssignBuffers(
      program, compiler::ScheduleComputation,
      [precision](const Shape& s) { return PlannedBytes(s, precision); });
  plan.arena_bytes = assignment.arena_bytes();
  plan.live_peak_bytes = plan.peak_bytes;
  if (options.executor_accounting && !options.offload_saved) {
    int64_t others = 0;
    for (int c = 0; c < kNumBufferCategories; ++c) {
      if (c != static_cast<int>(BufferCategory::kTemporaries)) others += plan.peak_by_category[c];
    }
    plan.peak_bytes = assignment.peak_bytes();
    plan.peak_by_category[static_cast<int>(BufferCategory::kTemporaries)] =
        std::max<int64_t>(0, plan.peak_bytes - others);
  }
  return plan;
}

}  // namespace weft::analysis
