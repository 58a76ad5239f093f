// The executor's scheduler: a fixed topological order per computation, slot
// liveness (each value freed after its last use), control flow (tuple,
// get-tuple-element, while, call) and dispatch to the evaluators.
#include "weft/runtime/executor.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "executor_eval.h"
#include "executor_plan.h"
#include "weft/base/error.h"
#include "weft/base/thread_pool.h"
#include "weft/compiler/schedule.h"
#include "weft/runtime/topology.h"

namespace weft::runtime {

using exec::ComputationPlan;
using exec::EvalArgs;
using exec::EvalContext;
using exec::EvalFn;
using exec::MakePlan;
using exec::Step;
using exec::Value;

namespace {
// The compute threads of this process (the pool: WEFT_NUM_THREADS, else the
// CPUs it may run on) shared among its devices: in-process devices are
// threads of this process; MPI ranks on this host are counted by the
// topology (discovered once, from every rank's host name), unless mpirun
// bound this rank to fewer than all the machine's CPUs, which is then its
// share already. The share is also the size of the device thread's
// ThreadPool teams, so GEMMs and weft's kernels use the same threads.
int DefaultGemmThreads(const Communicator& comm) {
  const int64_t cores = ThreadPool::Global().num_threads();
  int64_t local_devices = 1;
  if (comm.backend() == "threads") {
    local_devices = comm.num_devices();
  } else if (comm.backend() == "mpi" &&
             cores >= static_cast<int64_t>(std::thread::hardware_concurrency())) {
    local_devices = Topology::Global().DevicesOnHostOf(comm.device_id());
  }
  return static_cast<int>(std::max<int64_t>(1, cores / local_devices));
}

exec::DeviceIds MakeDeviceIds(const HloModule& module, const Communicator& comm) {
  exec::DeviceIds ids;
  ids.device = comm.device_id();
  ids.num_devices = comm.num_devices();
  const int64_t p = module.num_partitions(), r = module.replica_count();
  if (p == 1 && r == 1) {
    ids.partition = ids.replica = ids.device;
    ids.num_partitions = ids.num_devices;
    return ids;
  }
  WEFT_CHECK(p * r == ids.num_devices,
             "module '{}' has num_partitions={} and replica_count={} ({} devices) but runs on {} "
             "devices",
             module.name(), p, r, p * r, ids.num_devices);
  ids.num_partitions = p;
  ids.num_replicas = r;
  ids.partition = ids.device % p;
  ids.replica = ids.device / p;
  return ids;
}

}  // namespace

void Value::CheckIndex(size_t i) const {
  WEFT_INTERNAL_CHECK(i < size_, "leaf {} of a value with {} leaves", i, size_);
}

HostTensor EvalArgs::TryReuse(int64_t i, const Shape& shape) const {
  const EvalContext::OutputSlot* slot = ctx_.NextSlot();
  if (slot == nullptr || slot->kind != EvalContext::OutputSlot::Kind::kInPlace ||
      slot->operand != i || slot->bytes != shape.ByteSize()) {
    return HostTensor();
  }
  const HostTensor& t = (*operands_[i].value)[operands_[i].leaf + slot->operand_leaf];
  if (t.byte_size() != shape.ByteSize()) return HostTensor();
  ctx_.ClaimSlot();
  return t.Reshaped(shape);
}

HostTensor EvalArgs::ReuseOrAllocate(const Shape& shape,
                                     std::initializer_list<int64_t> candidates) const {
  for (int64_t i : candidates) {
    HostTensor t = TryReuse(i, shape);
    if (t.valid()) return t;
  }
  return ctx_.Allocate(shape);
}

HostTensor EvalContext::Allocate(const Shape& shape) const {
  const int64_t bytes = shape.ByteSize();
  if (const OutputSlot* slot = NextSlot();
      slot != nullptr && slot->kind == OutputSlot::Kind::kNew && slot->bytes == bytes) {
    ClaimSlot();
    return arena_->View(shape, base_ + slot->offset);
  }
  const int64_t rounded = (bytes + compiler::kBufferAlignment - 1) / compiler::kBufferAlignment *
                          compiler::kBufferAlignment;
  if (arena_ != nullptr && scratch_next_ + rounded <= scratch_end_) {
    HostTensor t = arena_->View(shape, scratch_next_);
    scratch_next_ += rounded;
    return t;
  }
  // Scratch the compiler did not model: from the pool, counted.
  HostTensor t = HostTensor::Uninitialized(shape, tracker_, pool_);
  if (!t.storage()->reused()) {
    allocations_.fetch_add(1, std::memory_order_relaxed);
    allocated_bytes_.fetch_add(bytes, std::memory_order_relaxed);
  }
  return t;
}

bool EvalContext::InScratch(const void* p) const {
  if (arena_ == nullptr || scratch_end_ <= scratch_begin_) return false;
  const std::byte* base = static_cast<const std::byte*>(arena_->raw_data());
  const std::byte* q = static_cast<const std::byte*>(p);
  return q >= base + scratch_begin_ && q < base + scratch_end_;
}

void exec::ParallelRanges(int64_t n, int64_t min_chunk, bool use_pool,
                          FunctionRef<void(int64_t, int64_t)> fn) {
  ThreadPool& pool = ThreadPool::Global();
  const int64_t max_tasks = (n + min_chunk - 1) / std::max<int64_t>(1, min_chunk);
  const int64_t tasks = std::min<int64_t>(max_tasks, 4 * pool.num_threads());
  if (!use_pool || tasks <= 1 || pool.num_threads() <= 1) {
    if (n > 0) fn(0, n);
    return;
  }
  const int64_t chunk = (n + tasks - 1) / tasks;
  pool.ParallelFor(tasks, [&](int64_t task, int) {
    const int64_t begin = task * chunk, end = std::min(n, begin + chunk);
    if (begin < end) fn(begin, end);
  });
}

// The outputs of one run and the scratch the compiler does not model come
// from a BufferPool: idle buffers up to this many times the outputs' bytes,
// and at least kMinPoolBytes.
constexpr int64_t kPoolOutputs = 2;
constexpr int64_t kMinPoolBytes = int64_t{64} << 20;

struct Executor::Impl {
  const HloModule& module;
  ExecutorOptions options;
  std::shared_ptr<const compiler::BufferAssignment> assignment;
  // The arena (allocated by the first run, kept across runs) as bytes.
  HostTensor arena;
  std::shared_ptr<BufferPool> pool = [] {
    auto p = std::make_shared<BufferPool>();
    p->set_capacity(kMinPoolBytes);
    return p;
  }();
  std::unordered_map<const HloComputation*, ComputationPlan> plans;
  // A computation's values while it runs (its slots, the values dying at a
  // step, a step's operands), kept between runs so that a loop's body does
  // not allocate them each iteration. A computation never runs twice at
  // once: calls do not recurse (CheckCallGraph).
  struct Frame {
    std::vector<Value> slots, dying;
    std::vector<EvalArgs::Operand> ops;
  };
  std::unordered_map<const HloComputation*, Frame> frames;
  // Every constant's value, made once (MakePlan points its readers here).
  std::unordered_map<const HloInstruction*, Value> constants;
  exec::InstructionCache cache;
  std::vector<Shape> input_shapes;
  std::vector<std::string> input_names;
  std::vector<int64_t> param_leaf_counts;
  std::vector<uint8_t> root_in_arena;  // per output: copied out of the arena
  std::vector<std::byte> staging;      // carries moved between leaves of a loop
  int64_t instructions = 0;
  int64_t misplaced = 0;
  // ExecutorOptions::profile
  std::array<double, kNumOpClasses> class_seconds{};
  std::array<int64_t, kNumOpClasses> class_instructions{};
  std::unordered_map<const HloInstruction*, double> instruction_seconds;

  Impl(const HloModule& m, ExecutorOptions o) : module(m), options(o) {}

  const ComputationPlan& Plan(const HloComputation& computation) const {
    auto it = plans.find(&computation);
    WEFT_CHECK(it != plans.end(), "computation '{}' is not part of module '{}'", computation.name(),
               module.name());
    return it->second;
  }

  std::byte* At(int64_t offset) const {
    return static_cast<std::byte*>(arena.mutable_raw_data()) + offset;
  }

  Value RunComputation(const HloComputation& computation, std::vector<Value> args, int64_t base,
                       EvalContext& ctx);
  Value RunStep(const Step& step, std::vector<Value>& args, std::span<EvalArgs::Operand> ops,
                int64_t base, EvalContext& ctx);
  void CopyIntoCarry(Value& state, const Value& next);
  // Puts each evaluated result leaf where the assignment placed it.
  void Place(const Step& step, Value& out, std::span<EvalArgs::Operand> ops, int64_t base,
             EvalContext& ctx);
};

void Executor::Impl::Place(const Step& step, Value& out, std::span<EvalArgs::Operand> ops,
                           int64_t base, EvalContext& ctx) {
  using Kind = EvalContext::OutputSlot::Kind;
  for (size_t k = 0; k < step.slots.size() && k < out.size(); ++k) {
    const EvalContext::OutputSlot& slot = step.slots[k];
    HostTensor& t = out[k];
    const void* want = nullptr;
    if (slot.kind == Kind::kNew) {
      want = At(base + slot.offset);
    } else if (slot.kind == Kind::kInPlace) {
      const EvalArgs::Operand& o = ops[slot.operand];
      want = (*o.value)[o.leaf + slot.operand_leaf].raw_data();
    } else if (ctx.InScratch(t.raw_data())) {
      t = t.Clone();  // a view of scratch must outlive the step
      ++misplaced;
      continue;
    } else {
      continue;
    }
    if (t.raw_data() == want) continue;
    // The evaluator put the result elsewhere (scratch, the pool): move it
    // to its assigned place, which nothing live occupies.
    HostTensor dst = arena.View(t.shape(), static_cast<const std::byte*>(want) -
                                               static_cast<const std::byte*>(arena.raw_data()));
    std::memmove(dst.mutable_raw_data(), t.raw_data(), static_cast<size_t>(t.byte_size()));
    t = std::move(dst);
    ++misplaced;
  }
}

Value Executor::Impl::RunComputation(const HloComputation& computation, std::vector<Value> args,
                                     int64_t base, EvalContext& ctx) {
  const ComputationPlan& plan = Plan(computation);
  WEFT_CHECK(static_cast<int64_t>(args.size()) == computation.num_parameters(),
             "computation '{}' takes {} arguments, got {}", computation.name(),
             computation.num_parameters(), args.size());
  Frame& frame = frames[&computation];
  std::vector<Value>& slots = frame.slots;
  std::vector<Value>& dying = frame.dying;
  std::vector<EvalArgs::Operand>& ops = frame.ops;
  slots.resize(plan.num_slots);
  dying.resize(plan.max_dying);
  ops.resize(plan.max_operands);
  // Every value dies at its last use and the root's moves out, so a run
  // leaves the frame empty; one that throws leaves it emptied too.
  struct EmptyOnThrow {
    Frame& frame;
    const int exceptions = std::uncaught_exceptions();
    ~EmptyOnThrow() {
      if (std::uncaught_exceptions() == exceptions) return;
      for (Value& v : frame.slots) v.clear();
      for (Value& v : frame.dying) v.clear();
    }
  } empty_on_throw{frame};
  for (const Step& step : plan.steps) {
    // Values that die here move out of their slots first.
    for (size_t k = 0; k < step.dying_slots.size(); ++k) {
      dying[k] = std::move(slots[step.dying_slots[k]]);
      slots[step.dying_slots[k]].clear();
    }
    for (size_t k = 0; k < step.operands.size(); ++k) {
      const exec::StepOperand& o = step.operands[k];
      ops[k] = o.constant != nullptr ? EvalArgs::Operand{o.constant, 0, false, o.buffer_dies}
               : o.dying_index >= 0
                   ? EvalArgs::Operand{&dying[o.dying_index], o.leaf, true, o.buffer_dies}
                   : EvalArgs::Operand{&slots[o.slot], o.leaf, false, o.buffer_dies};
    }
    const std::span<EvalArgs::Operand> step_ops(ops.data(), step.operands.size());
    try {
      if (options.profile && step.op_class >= 0) {
        const auto t0 = std::chrono::steady_clock::now();
        const double others0 = ctx.comm().stats().seconds_others_ran;
        slots[step.out] = RunStep(step, args, step_ops, base, ctx);
        // Not the time this device's thread ran its other devices while
        // this one waited (in-process devices sharing a thread).
        const double seconds =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() -
            (ctx.comm().stats().seconds_others_ran - others0);
        class_seconds[step.op_class] += seconds;
        ++class_instructions[step.op_class];
        instruction_seconds[step.instr] += seconds;
      } else {
        slots[step.out] = RunStep(step, args, step_ops, base, ctx);
      }
    } catch (const Error& e) {
      Fail("{}: {}", step.instr->Describe(), e.what());
    }
    ++instructions;
    for (size_t k = 0; k < step.dying_slots.size(); ++k) dying[k].clear();
    if (step.result_unused) slots[step.out].clear();
  }
  return std::move(slots[plan.root_slot]);
}

// The body's root back into the carry: leaves that sit in another carry
// leaf go through staging first, so no copy reads a leaf already
// overwritten.
void Executor::Impl::CopyIntoCarry(Value& state, const Value& next) {
  auto in_carry = [&](const HostTensor& t) {
    const std::byte* p = static_cast<const std::byte*>(t.raw_data());
    for (const HostTensor& c : state) {
      const std::byte* q = static_cast<const std::byte*>(c.raw_data());
      if (p >= q && p < q + c.byte_size()) return true;
    }
    return false;
  };
  std::vector<std::pair<size_t, int64_t>> staged;
  int64_t staged_bytes = 0;
  for (size_t k = 0; k < state.size(); ++k) {
    if (next[k].raw_data() == state[k].raw_data() || !in_carry(next[k])) continue;
    staged.emplace_back(k, staged_bytes);
    staged_bytes += next[k].byte_size();
  }
  if (static_cast<int64_t>(staging.size()) < staged_bytes) staging.resize(staged_bytes);
  for (const auto& [k, at] : staged) {
    std::memcpy(staging.data() + at, next[k].raw_data(), static_cast<size_t>(next[k].byte_size()));
  }
  for (size_t k = 0; k < state.size(); ++k) {
    if (next[k].raw_data() == state[k].raw_data() || in_carry(next[k])) continue;
    std::memcpy(state[k].mutable_raw_data(), next[k].raw_data(),
                static_cast<size_t>(next[k].byte_size()));
  }
  for (const auto& [k, at] : staged) {
    std::memcpy(state[k].mutable_raw_data(), staging.data() + at,
                static_cast<size_t>(state[k].byte_size()));
  }
}

Value Executor::Impl::RunStep(const Step& step, std::vector<Value>& args,
                              std::span<EvalArgs::Operand> ops, int64_t base, EvalContext& ctx) {
  // Moves a dying operand's value, copies (shares) a live one. An operand
  // repeated in the list (tuple(a, a)) shares one dying value: only its last
  // occurrence moves it, the earlier ones share its bytes.
  auto take = [&](size_t k) -> Value {
    if (!ops[k].dying) return *ops[k].value;
    for (size_t j = k + 1; j < ops.size(); ++j) {
      if (ops[j].value == ops[k].value) return *ops[k].value;
    }
    return std::move(*ops[k].value);
  };
  if (step.eval != nullptr) {
    ctx.BeginInstruction(&arena, base, step.slots, step.scratch_offset, step.scratch_bytes);
    EvalArgs eval_args(ops, ctx, cache);
    Value out = step.eval(*step.instr, eval_args);
    Place(step, out, ops, base, ctx);
    ctx.EndInstruction();
    return out;
  }
  const HloInstruction& instr = *step.instr;
  // The carry / result leaves the assignment placed: a dying init leaf, or
  // the leaf's own place with `from` copied in.
  auto placed = [&](size_t k, const HostTensor& from) -> HostTensor {
    const EvalContext::OutputSlot& slot = step.slots[k];
    if (slot.kind == EvalContext::OutputSlot::Kind::kInPlace) {
      const EvalArgs::Operand& o = ops[slot.operand];
      return (*o.value)[o.leaf + slot.operand_leaf];
    }
    if (slot.kind == EvalContext::OutputSlot::Kind::kForward) return from;  // never written
    HostTensor dst = arena.View(from.shape(), base + slot.offset);
    if (dst.raw_data() != from.raw_data()) {
      std::memcpy(dst.mutable_raw_data(), from.raw_data(), static_cast<size_t>(from.byte_size()));
    }
    return dst;
  };
  switch (step.opcode) {
    case HloOpcode::kParameter:
      return std::move(args.at(instr.parameter_number()));
    case HloOpcode::kConstant:  // the root: other constants take no step
      return constants.at(&instr);
    case HloOpcode::kCopy:  // values are immutable, so a copy can share bytes
      return take(0);
    case HloOpcode::kTuple: {
      Value out;
      size_t leaves = 0;
      for (size_t k = 0; k < ops.size(); ++k) leaves += ops[k].value->size();
      out.reserve(leaves);
      for (size_t k = 0; k < ops.size(); ++k) {
        Value v = take(k);
        for (HostTensor& t : v) out.push_back(std::move(t));
      }
      return out;
    }
    case HloOpcode::kGetTupleElement: {
      Value& tuple = *ops[0].value;
      HostTensor* first = tuple.begin() + step.leaf_begin;
      if (step.leaf_count == 1 && ops[0].dying) return Value(std::move(*first));
      return Value(first, first + step.leaf_count);
    }
    case HloOpcode::kCall: {
      std::vector<Value> call_args;
      for (size_t k = 0; k < ops.size(); ++k) call_args.push_back(*ops[k].value);
      Value result =
          RunComputation(*instr.to_apply(), std::move(call_args), base + step.nested_offset, ctx);
      Value out;
      for (size_t k = 0; k < result.size(); ++k) out.push_back(placed(k, result[k]));
      return out;
    }
    case HloOpcode::kConditional: {
      // XLA's semantics: pred true runs branch 0 (true_computation); an s32
      // index outside [0, N) runs the last branch.
      const HostTensor& selector = (*ops[0].value)[0];
      const int64_t n = static_cast<int64_t>(instr.called_computations().size());
      int64_t branch = exec::LoadAsInt(selector.element_type(), selector.raw_data(), 0);
      if (selector.element_type() == PrimitiveType::kPred) {
        branch = branch != 0 ? 0 : 1;
      } else if (branch < 0 || branch >= n) {
        branch = n - 1;
      }
      std::vector<Value> branch_args;
      branch_args.push_back(*ops[branch + 1].value);
      Value result = RunComputation(*instr.called_computations()[branch], std::move(branch_args),
                                    base + step.nested_offset, ctx);
      Value out;
      for (size_t k = 0; k < result.size(); ++k) out.push_back(placed(k, result[k]));
      return out;
    }
    case HloOpcode::kWhile: {
      const Value& init = *ops[0].value;
      Value state;
      for (size_t k = 0; k < init.size(); ++k) state.push_back(placed(k, init[k]));
      const int64_t nested = base + step.nested_offset;
      const int64_t limit = options.max_while_iterations;
      for (int64_t trips = 0;; ++trips) {
        std::vector<Value> cond_args;
        cond_args.push_back(state);
        Value pred = RunComputation(*instr.while_condition(), std::move(cond_args), nested, ctx);
        if (pred.at(0).data<uint8_t>()[0] == 0) break;
        if (trips == limit) {
          Fail(
              "while loop '{}' ran {} iterations and its condition '{}' still holds; stopped "
              "at the limit of {} per loop. If the loop does end, raise the limit with {} N",
              instr.name(), trips, instr.while_condition()->name(), limit, kMaxIterationsFlag);
        }
        std::vector<Value> body_args;
        body_args.push_back(state);
        Value next = RunComputation(*instr.while_body(), std::move(body_args), nested, ctx);
        CopyIntoCarry(state, next);
      }
      return state;
    }
    default:
      Fail("no evaluator for opcode {}", HloOpcodeString(step.opcode));
  }
}

Executor::Executor(const HloModule& module, ExecutorOptions options,
                   std::shared_ptr<const compiler::BufferAssignment> assignment)
    : module_(module), impl_(std::make_unique<Impl>(module, options)) {
  const HloComputation* entry = module.entry_computation();
  WEFT_CHECK(entry != nullptr, "module '{}' has no entry computation", module.name());
  WEFT_CHECK(options.max_while_iterations >= 1,
             "{} must be at least 1 (the iterations one while loop may run), got {}",
             kMaxIterationsFlag, options.max_while_iterations);
  // MakeComputationPostOrder below checks the call graph (CheckCallGraph):
  // no recursion, calls nested at most kMaxCallDepth deep, as RunComputation
  // follows calls on the stack.
  const std::vector<HloComputation*> computations = module.MakeComputationPostOrder();
  if (assignment == nullptr) {
    assignment = std::make_shared<const compiler::BufferAssignment>(
        compiler::AssignBuffers(module, compiler::ScheduleComputation));
  }
  impl_->assignment = std::move(assignment);
  for (const HloComputation* computation : computations) {
    for (const HloInstruction* instr : computation->instructions()) {
      if (instr->opcode() == HloOpcode::kConstant) {
        impl_->constants.emplace(instr, Value{exec::ConstantTensor(*instr)});
      }
    }
    if (impl_->assignment->Has(*computation)) {
      impl_->plans.emplace(computation, MakePlan(*computation, impl_->assignment->Of(*computation),
                                                 impl_->constants));
    }
  }
  for (int64_t p = 0; p < entry->num_parameters(); ++p) {
    const HloInstruction* param = entry->parameter_instruction(p);
    WEFT_CHECK(param != nullptr, "entry computation of '{}' has no parameter {}", module.name(), p);
    const std::vector<Shape> leaves = param->shape().Leaves();
    for (size_t k = 0; k < leaves.size(); ++k) {
      impl_->input_shapes.push_back(leaves[k]);
      impl_->input_names.push_back(leaves.size() == 1 && !param->shape().IsTuple()
                                       ? param->name()
                                       : fmt::format("{}{{{}}}", param->name(), k));
    }
    impl_->param_leaf_counts.push_back(static_cast<int64_t>(leaves.size()));
  }
  const compiler::InstructionAssignment& root = impl_->assignment->Of(*entry->root_instruction());
  for (const compiler::LeafAssignment& l : root.leaves)
    impl_->root_in_arena.push_back(l.buffer >= 0);
}

Executor::~Executor() = default;

const compiler::BufferAssignment& Executor::assignment() const { return *impl_->assignment; }

std::vector<Shape> Executor::InputShapes() const { return impl_->input_shapes; }
std::vector<std::string> Executor::InputNames() const { return impl_->input_names; }

std::vector<HostTensor> Executor::Run(std::vector<HostTensor> inputs) {
  std::unique_ptr<Communicator> self = exec::MakeSelfCommunicator();
  return Run(std::move(inputs), *self);
}

std::vector<HostTensor> Executor::Run(std::vector<HostTensor> inputs, Communicator& comm) {
  const auto start = std::chrono::steady_clock::now();
  const std::vector<Shape>& shapes = impl_->input_shapes;
  WEFT_CHECK(inputs.size() == shapes.size(),
             "module '{}' takes {} inputs (its entry parameters' array leaves), got {}",
             module_.name(), shapes.size(), inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const HostTensor& t = inputs[i];
    WEFT_CHECK(t.valid(), "input {} for parameter '{}' is an empty tensor", i,
               impl_->input_names[i]);
    WEFT_CHECK(t.shape() == shapes[i], "input {} for parameter '{}' is {}, expected {}", i,
               impl_->input_names[i], t.shape().ToString(), shapes[i].ToString());
  }
  std::vector<Value> args;
  size_t next = 0;
  for (int64_t count : impl_->param_leaf_counts) {
    Value v;
    for (int64_t k = 0; k < count; ++k) v.push_back(std::move(inputs[next++]));
    args.push_back(std::move(v));
  }
  inputs.clear();

  // This device thread's share of the pool, for oneDNN's GEMMs (OpenMP's
  // team size, per thread) and weft's kernels alike.
  ThreadPool::SetThreadsForThisThread(impl_->options.gemm_threads > 0 ? impl_->options.gemm_threads
                                                                      : DefaultGemmThreads(comm));
  const CollectiveStats before = comm.stats();
  impl_->instructions = 0;
  impl_->misplaced = 0;
  impl_->class_seconds.fill(0);
  impl_->class_instructions.fill(0);
  impl_->instruction_seconds.clear();
  // Scratch the compiler does not model, tracked while held.
  auto tracker = std::make_shared<MemoryTracker>();
  // The context's callback (called computations) runs with the context itself.
  EvalContext real_ctx(comm, MakeDeviceIds(module_, comm), impl_->options, tracker,
                       [this, &real_ctx](const HloComputation& c, std::vector<Value> a) -> Value {
                         return impl_->RunComputation(c, std::move(a), 0, real_ctx);
                       });
  real_ctx.set_pool(impl_->pool);
  int64_t fresh = 0, fresh_bytes = 0;
  const int64_t arena_bytes = impl_->assignment->arena_bytes();
  if (!impl_->arena.valid()) {  // once per executor: kept across runs
    impl_->arena = HostTensor::Uninitialized(Shape(PrimitiveType::kPred, {arena_bytes}));
    ++fresh;
    fresh_bytes += arena_bytes;
  }
  Value root = impl_->RunComputation(*module_.entry_computation(), std::move(args), 0, real_ctx);
  // Outputs leave the arena (the next run reuses it) into buffers of their own.
  int64_t output_bytes = 0;
  for (size_t k = 0; k < root.size(); ++k) {
    if (!impl_->root_in_arena[k]) continue;
    HostTensor out = HostTensor::Uninitialized(root[k].shape(), nullptr, impl_->pool);
    if (!out.storage()->reused()) {
      ++fresh;
      fresh_bytes += out.byte_size();
    }
    std::memcpy(out.mutable_raw_data(), root[k].raw_data(), static_cast<size_t>(out.byte_size()));
    output_bytes += out.byte_size();
    root[k] = std::move(out);
  }
  impl_->pool->set_capacity(std::max(kMinPoolBytes, kPoolOutputs * output_bytes));

  stats_.peak_bytes = impl_->assignment->peak_bytes() + tracker->peak_bytes();
  stats_.arena_bytes = arena_bytes;
  stats_.unplanned_bytes = tracker->peak_bytes();
  stats_.misplaced_results = impl_->misplaced;
  stats_.instructions = impl_->instructions;
  stats_.allocations = real_ctx.allocations() + fresh;
  stats_.allocated_bytes = real_ctx.allocated_bytes() + fresh_bytes;
  stats_.class_seconds = impl_->class_seconds;
  stats_.class_instructions = impl_->class_instructions;
  stats_.instruction_seconds = impl_->instruction_seconds;
  for (int k = 0; k < kNumCollectiveKinds; ++k) {
    stats_.collectives.calls[k] = comm.stats().calls[k] - before.calls[k];
    stats_.collectives.bytes_sent[k] = comm.stats().bytes_sent[k] - before.bytes_sent[k];
  }
  stats_.collectives.seconds_others_ran =
      comm.stats().seconds_others_ran - before.seconds_others_ran;
  stats_.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return std::vector<HostTensor>(std::make_move_iterator(root.begin()),
                                 std::make_move_iterator(root.end()));
}

std::vector<std::vector<HostTensor>> RunOnDevices(
    const HloModule& module, const std::vector<std::vector<HostTensor>>& inputs_per_device,
    LocalCluster& cluster, std::vector<ExecutorStats>* stats, const ExecutorOptions& options) {
  const int64_t n = cluster.num_devices();
  WEFT_CHECK(static_cast<int64_t>(inputs_per_device.size()) == n,
             "RunOnDevices got inputs for {} devices but the cluster has {}",
             inputs_per_device.size(), n);
  std::vector<std::vector<HostTensor>> outputs(n);
  std::vector<ExecutorStats> device_stats(n);
  cluster.Run([&](int64_t device, Communicator& comm) {
    Executor executor(module, options);
    outputs[device] = executor.Run(inputs_per_device[device], comm);
    device_stats[device] = executor.stats();
  });
  if (stats != nullptr) *stats = std::move(device_stats);
  return outputs;
}

std::vector<HostTensor> RunOnMpiRank(const HloModule& module, std::vector<HostTensor> inputs,
                                     Communicator& comm, ExecutorStats* stats,
                                     const ExecutorOptions& options) {
  Executor executor(module, options);
  comm.VerifySameHash(std::hash<std::string>{}(module.ToString()),
                      fmt::format("program hash of module '{}'", module.name()));
  std::vector<HostTensor> outputs = executor.Run(std::move(inputs), comm);
  if (stats != nullptr) *stats = executor.stats();
  return outputs;
}

std::string_view OpClassName(OpClass op_class) {
  switch (op_class) {
    case OpClass::kDot:
      return "dot";
    case OpClass::kAttention:
      return "attention";
    case OpClass::kElementwise:
      return "elementwise";
    case OpClass::kBroadcast:
      return "broadcast";
    case OpClass::kDataMovement:
      return "data_movement";
    case OpClass::kReduction:
      return "reduction";
    case OpClass::kCollective:
      return "collective";
    case OpClass::kFusedLoops:
      return "fused_loops";
    case OpClass::kOther:
      return "other";
  }
  FailInternal("OpClassName: unknown OpClass {}", static_cast<int>(op_class));
}

OpClass ClassifyInstruction(const HloInstruction& instr) {
  const HloOpcode op = instr.opcode();
  if (IsElementwise(op)) return OpClass::kElementwise;
  switch (op) {
    case HloOpcode::kDot:
    case HloOpcode::kConvolution:  // matrix work, as a dot's
      return OpClass::kDot;
    case HloOpcode::kCustomCall:
      return instr.attrs().custom_call_target == kFlexAttentionTarget ||
                     instr.attrs().custom_call_target == kFlexAttentionBackwardTarget
                 ? OpClass::kAttention
                 : OpClass::kOther;
    case HloOpcode::kBroadcast:
      return OpClass::kBroadcast;
    case HloOpcode::kIota:
      return OpClass::kElementwise;
    case HloOpcode::kCopy:
    case HloOpcode::kReshape:
    case HloOpcode::kTranspose:
    case HloOpcode::kSlice:
    case HloOpcode::kConcatenate:
    case HloOpcode::kPad:
    case HloOpcode::kReverse:
    case HloOpcode::kDynamicSlice:
    case HloOpcode::kDynamicUpdateSlice:
    case HloOpcode::kGather:
    case HloOpcode::kScatter:
      return OpClass::kDataMovement;
    case HloOpcode::kReduce:
    case HloOpcode::kReduceWindow:
      return OpClass::kReduction;
    case HloOpcode::kAllReduce:
    case HloOpcode::kAllGather:
    case HloOpcode::kReduceScatter:
    case HloOpcode::kAllToAll:
    case HloOpcode::kCollectivePermute:
      return OpClass::kCollective;
    case HloOpcode::kFusion:
      // An output fusion is a GEMM with its epilogue as post-ops.
      return instr.attrs().fusion_kind == FusionKind::kOutput ? OpClass::kDot
                                                              : OpClass::kFusedLoops;
    default:
      return OpClass::kOther;
  }
}

}  // namespace weft::runtime
