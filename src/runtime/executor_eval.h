// Internal to the executor: the interface between its scheduler
// (executor.cc) and the evaluators of each kind of op (eval_*.cc). Not for
// users of the executor; include executor.h instead.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <span>
#include <typeindex>
#include <unordered_map>
#include <vector>

#include "weft/base/function_ref.h"
#include "weft/base/small_vector.h"
#include "weft/compiler/buffer_assignment.h"
#include "weft/hlo/computation.h"
#include "weft/runtime/communicator.h"
#include "weft/runtime/executor.h"

namespace weft::runtime::exec {

// A value: its array leaves in order (one for an array, the flattened
// leaves for a tuple). Most instructions make one leaf, which is kept inline:
// making, moving and sharing such a value allocates nothing but its tensor's
// shape. Two or more leaves live in a vector.
class Value {
 public:
  Value() = default;
  explicit Value(HostTensor leaf) : one_(std::move(leaf)), size_(1) {}
  Value(HostTensor first, HostTensor second) {
    many_.reserve(2);
    many_.push_back(std::move(first));
    many_.push_back(std::move(second));
    size_ = 2;
  }
  Value(const HostTensor* begin, const HostTensor* end) {
    const size_t n = static_cast<size_t>(end - begin);
    if (n == 1) {
      one_ = *begin;
    } else if (n > 1) {
      many_.assign(begin, end);
    }
    size_ = n;
  }
  Value(const Value&) = default;
  Value& operator=(const Value&) = default;
  Value(Value&& other) noexcept
      : one_(std::move(other.one_)), many_(std::move(other.many_)), size_(other.size_) {
    other.Forget();
  }
  Value& operator=(Value&& other) noexcept {
    if (this != &other) {
      one_ = std::move(other.one_);
      many_ = std::move(other.many_);
      size_ = other.size_;
      other.Forget();
    }
    return *this;
  }

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  HostTensor* begin() { return size_ > 1 ? many_.data() : &one_; }
  HostTensor* end() { return begin() + size_; }
  const HostTensor* begin() const { return size_ > 1 ? many_.data() : &one_; }
  const HostTensor* end() const { return begin() + size_; }
  HostTensor& operator[](size_t i) { return begin()[i]; }
  const HostTensor& operator[](size_t i) const { return begin()[i]; }
  const HostTensor& at(size_t i) const {
    CheckIndex(i);
    return begin()[i];
  }
  HostTensor& at(size_t i) {
    CheckIndex(i);
    return begin()[i];
  }

  void push_back(HostTensor leaf) {
    if (size_ == 0) {
      one_ = std::move(leaf);
    } else {
      if (size_ == 1) {
        many_.reserve(4);
        many_.push_back(std::move(one_));
        one_ = HostTensor();
      }
      many_.push_back(std::move(leaf));
    }
    ++size_;
  }
  // Room for `n` leaves (a tuple's), so that push_back does not regrow.
  void reserve(size_t n) {
    if (n > 1) many_.reserve(n);
  }
  void clear() {
    one_ = HostTensor();
    many_.clear();
    size_ = 0;
  }

 private:
  void Forget() {
    many_.clear();
    size_ = 0;
  }
  void CheckIndex(size_t i) const;

  HostTensor one_;                // the leaf when there is one
  std::vector<HostTensor> many_;  // the leaves when there are two or more
  size_t size_ = 0;
};

// Which device this is, in the terms of the module (see executor.h).
struct DeviceIds {
  int64_t device = 0;
  int64_t num_devices = 1;
  int64_t partition = 0;
  int64_t replica = 0;
  int64_t num_partitions = 1;
  int64_t num_replicas = 1;
};

class EvalContext {
 public:
  EvalContext(Communicator& comm, DeviceIds ids, const ExecutorOptions& options,
              std::shared_ptr<MemoryTracker> tracker,
              std::function<Value(const HloComputation&, std::vector<Value>)> call)
      : comm_(comm),
        ids_(ids),
        options_(options),
        tracker_(std::move(tracker)),
        call_(std::move(call)) {}

  Communicator& comm() const { return comm_; }
  const DeviceIds& ids() const { return ids_; }
  const ExecutorOptions& options() const { return options_; }
  const std::shared_ptr<MemoryTracker>& tracker() const { return tracker_; }

  // A buffer for the instruction being evaluated. Its results' buffers were
  // assigned statically (compiler/buffer_assignment.h): while the current
  // instruction has result leaves to fill, a request of the next leaf's
  // byte size gets that leaf's place in the arena; any other request is
  // scratch, from the instruction's scratch region of the arena, or when
  // that is full (what the compiler does not model: a bf16 dot's f32 copies
  // on the widening fallback, attention's copies with clean padding rows) from
  // the executor's overflow pool, counted in ExecutorStats::allocations when
  // fresh and in peak_bytes while held.
  HostTensor Allocate(const Shape& shape) const;
  // The pool overflow scratch and outputs come from (kept across runs).
  void set_pool(std::shared_ptr<BufferPool> pool) { pool_ = std::move(pool); }
  int64_t allocations() const { return allocations_.load(std::memory_order_relaxed); }
  int64_t allocated_bytes() const { return allocated_bytes_.load(std::memory_order_relaxed); }

  // The executor's side: the current instruction's assigned result leaves
  // and scratch region (byte offsets into `arena`).
  struct OutputSlot {
    enum class Kind : uint8_t { kNew, kInPlace, kForward } kind = Kind::kForward;
    int64_t offset = 0;                      // kNew: in the arena
    int32_t operand = -1, operand_leaf = 0;  // kInPlace
    int64_t bytes = 0;
  };
  // `base`: the byte offset of the computation's region in the arena.
  void BeginInstruction(const HostTensor* arena, int64_t base, std::span<const OutputSlot> slots,
                        int64_t scratch_offset, int64_t scratch_bytes) const {
    arena_ = arena;
    base_ = base;
    slots_ = slots;
    next_slot_ = 0;
    scratch_begin_ = scratch_next_ = base + std::max<int64_t>(0, scratch_offset);
    scratch_end_ = scratch_begin_ + scratch_bytes;
  }
  // Leaves the arena: allocations are plain pool buffers (while a called
  // computation's results are copied, and between instructions).
  void EndInstruction() const {
    slots_ = {};
    scratch_begin_ = scratch_next_ = scratch_end_ = 0;
  }
  const HostTensor* arena() const { return arena_; }
  // The next unclaimed result leaf (null when all are claimed), and claiming it.
  const OutputSlot* NextSlot() const {
    return next_slot_ < slots_.size() ? &slots_[next_slot_] : nullptr;
  }
  void ClaimSlot() const { ++next_slot_; }
  // Whether `p` lies in the current instruction's scratch region.
  bool InScratch(const void* p) const;

  // Runs a called computation (while, call, interpreted reducers).
  Value Call(const HloComputation& computation, std::vector<Value> args) const {
    return call_(computation, std::move(args));
  }

 private:
  Communicator& comm_;
  DeviceIds ids_;
  const ExecutorOptions& options_;
  std::shared_ptr<MemoryTracker> tracker_;
  std::shared_ptr<BufferPool> pool_;
  std::function<Value(const HloComputation&, std::vector<Value>)> call_;
  mutable std::atomic<int64_t> allocations_{0}, allocated_bytes_{0};
  mutable const HostTensor* arena_ = nullptr;
  mutable std::span<const OutputSlot> slots_;
  mutable size_t next_slot_ = 0;
  mutable int64_t base_ = 0;
  mutable int64_t scratch_next_ = 0, scratch_end_ = 0, scratch_begin_ = 0;
};

// Per-instruction state kept across runs by one executor (e.g. an attention's
// block mask, rebuilt only when its mask tensors change). Evaluators own what
// they store.
class InstructionCache {
 public:
  template <typename T>
  T* Find(const HloInstruction& instr) const {
    auto it = entries_.find(&instr);
    return it == entries_.end() ? nullptr : static_cast<T*>(it->second.get());
  }
  template <typename T>
  T& Put(const HloInstruction& instr, std::shared_ptr<T> value) {
    T& ref = *value;
    entries_[&instr] = std::move(value);
    return ref;
  }
  // The executor's one T, made at the first call: state an evaluator shares
  // between instructions (the attention calls' block masks).
  template <typename T>
  T& Shared() {
    std::shared_ptr<void>& slot = shared_[std::type_index(typeid(T))];
    if (slot == nullptr) slot = std::make_shared<T>();
    return *static_cast<T*>(slot.get());
  }

 private:
  std::unordered_map<const HloInstruction*, std::shared_ptr<void>> entries_;
  std::unordered_map<std::type_index, std::shared_ptr<void>> shared_;
};

// The operands of one instruction as the evaluator sees them.
class EvalArgs {
 public:
  struct Operand {
    Value* value = nullptr;
    int32_t leaf = 0;          // the operand's first leaf in `value`
    bool dying = false;        // this instruction is the value's last use
    bool buffer_dies = false;  // and its buffer's (the buffer assignment's view)
  };
  EvalArgs(std::span<const Operand> operands, EvalContext& ctx, InstructionCache& cache)
      : operands_(operands), ctx_(ctx), cache_(cache) {}

  int64_t size() const { return static_cast<int64_t>(operands_.size()); }
  // Operand i, an array (every operand an evaluator reads is one).
  const HostTensor& array(int64_t i) const { return (*operands_[i].value)[operands_[i].leaf]; }
  EvalContext& ctx() const { return ctx_; }
  InstructionCache& cache() const { return cache_; }

  // A buffer for the next result leaf of `shape`: a candidate operand's
  // buffer when the buffer assignment decided so (statically: the operand
  // dies here, no other operand reads its buffer, the byte sizes match),
  // otherwise the leaf's own place (ctx().Allocate). The caller must read
  // element k of a candidate before writing element k of the result.
  HostTensor ReuseOrAllocate(const Shape& shape, std::initializer_list<int64_t> candidates) const;
  // Operand i's buffer if the assignment writes the next result leaf in
  // place of it, else an empty tensor.
  HostTensor TryReuse(int64_t i, const Shape& shape) const;
  // Whether operand i's buffer has its last use at this instruction (and
  // may be written): a slice of it is then copied when small.
  bool OperandDies(int64_t i) const { return operands_[i].buffer_dies; }

 private:
  std::span<const Operand> operands_;
  EvalContext& ctx_;
  InstructionCache& cache_;
};

using EvalFn = Value (*)(const HloInstruction& instr, EvalArgs& args);

// Each evaluator: Check* throws weft::Error for what it cannot run (called
// once when the executor is built); Eval* runs the instruction. The
// scheduler adds the instruction's name to errors.
void CheckElementwise(const HloInstruction& instr);
Value EvalElementwise(const HloInstruction& instr, EvalArgs& args);  // incl. convert
void CheckShapeOp(const HloInstruction& instr);
Value EvalShapeOp(const HloInstruction& instr, EvalArgs& args);
Value EvalAfterAll(const HloInstruction& instr, EvalArgs& args);  // a token (eval_shape_ops.cc)
// custom_call_target="AllocateBuffer": the result's buffer, not written.
void CheckAllocateBuffer(const HloInstruction& instr);
Value EvalAllocateBuffer(const HloInstruction& instr, EvalArgs& args);
// custom_call_target="Sharding" unpartitioned, and the memory-space moves
// (IsMemorySpaceMoveTarget): the operand's value.
Value EvalIdentity(const HloInstruction& instr, EvalArgs& args);
// cholesky and triangular-solve (eval_linalg.cc).
void CheckLinalg(const HloInstruction& instr);
// ragged-dot (eval_ragged_dot.cc).
void CheckRaggedDot(const HloInstruction& instr);
Value EvalRaggedDot(const HloInstruction& instr, EvalArgs& args);
Value EvalCholesky(const HloInstruction& instr, EvalArgs& args);
Value EvalTriangularSolve(const HloInstruction& instr, EvalArgs& args);
void CheckDot(const HloInstruction& instr);
Value EvalDot(const HloInstruction& instr, EvalArgs& args);
// One binary post-op of a dot's GEMM (a step of an output fusion's chain):
// result = result op src1 elementwise in f32, src1 of the dot's shape
// (its dense [batch, M, N] layout).
struct DotPostOp {
  HloOpcode op = HloOpcode::kAdd;  // kAdd or kMultiply
  const HostTensor* src1 = nullptr;
};
// Runs `dot` (its attributes and shapes; eval_dot.cc) on lhs and rhs, then
// the post-ops (f32 dots only), into the instruction's result buffer. The
// oneDNN primitive is made once and cached under `key`: the dot itself, or
// the output fusion that holds it.
Value RunDot(const HloInstruction& dot, const HloInstruction& key, const HostTensor& lhs,
             const HostTensor& rhs, std::span<const DotPostOp> post_ops, EvalArgs& args);
void CheckConvolution(const HloInstruction& instr);  // eval_convolution.cc
Value EvalConvolution(const HloInstruction& instr, EvalArgs& args);
void CheckReduce(const HloInstruction& instr);
Value EvalReduce(const HloInstruction& instr, EvalArgs& args);
void CheckGatherScatter(const HloInstruction& instr);
Value EvalGather(const HloInstruction& instr, EvalArgs& args);
Value EvalScatter(const HloInstruction& instr, EvalArgs& args);
void CheckCollective(const HloInstruction& instr);
Value EvalCollective(const HloInstruction& instr, EvalArgs& args);
Value EvalPartitionOrReplicaId(const HloInstruction& instr, EvalArgs& args);
void CheckCustomCall(const HloInstruction& instr);
Value EvalCustomCall(const HloInstruction& instr, EvalArgs& args);
void CheckWindowOp(const HloInstruction& instr);  // reduce-window, select-and-scatter
Value EvalReduceWindow(const HloInstruction& instr, EvalArgs& args);
Value EvalSelectAndScatter(const HloInstruction& instr, EvalArgs& args);
void CheckSort(const HloInstruction& instr);  // sort, topk (eval_sort.cc)
Value EvalSort(const HloInstruction& instr, EvalArgs& args);
Value EvalTopK(const HloInstruction& instr, EvalArgs& args);
void CheckRng(const HloInstruction& instr);  // rng, rng-bit-generator (eval_rng.cc)
Value EvalRng(const HloInstruction& instr, EvalArgs& args);
Value EvalRngBitGenerator(const HloInstruction& instr, EvalArgs& args);
void CheckFusion(const HloInstruction& instr);  // kLoop, kInput, kOutput (eval_fusion.cc)
Value EvalFusion(const HloInstruction& instr, EvalArgs& args);

// A collective-capable stand-in for one device alone (groups of one).
std::unique_ptr<Communicator> MakeSelfCommunicator();

// ---------------------------------------------------------------------------
// Reducers (reduce, scatter, all-reduce, reduce-scatter to_apply).

enum class ReducerKind { kAdd, kMultiply, kMaximum, kMinimum, kAnd, kOr, kXor, kReplace, kOther };
// What a two-parameter scalar computation does: add(p0, p1) etc. (either
// operand order); kReplace for a root that is parameter 1.
ReducerKind ClassifyReducer(const HloComputation& computation);
// acc folded with a contiguous f32 row by kAdd, kMultiply, kMaximum or
// kMinimum, exactly as reduce folds a row of its innermost reduced dims (add
// keeps eight partial sums): an input fusion gives the unfused bits.
float FoldRowF32(ReducerKind kind, float acc, const float* row, int64_t n);

// Interprets a scalar computation (parameters, constants, elementwise ops,
// compare, select, convert, tuple root) on doubles, rounding every result
// to its element type: the fallback for reducers weft has no fast path for.
class ScalarFunction {
 public:
  explicit ScalarFunction(const HloComputation& computation);
  // The value of `root` (an instruction of `computation`) alone: the
  // arguments are still all of the computation's parameters.
  ScalarFunction(const HloComputation& computation, const HloInstruction* root);
  ~ScalarFunction();
  ScalarFunction(ScalarFunction&&) noexcept;
  // args.size() == the computation's parameter count; returns its root's
  // leaves.
  void Call(std::span<const double> args, std::span<double> results) const;
  int64_t num_results() const;

  struct Program;

 private:
  std::unique_ptr<Program> program_;
};

// A sort comparator that orders by keys computed per element: its root
// compares (strictly: LT or GT) f of operand i's lhs parameter with the same
// f of its rhs parameter, or is XLA's lexicographic form
//   select(compare(c, c', EQ), tie, c)
// with c such a comparison, c' the same comparison of the swapped sides and
// `tie` again a comparator of this form. A sort then computes each key once
// per element instead of interpreting the comparator per comparison.
struct SortKey {
  int64_t operand = 0;
  bool greater = false;      // GT: descending
  bool total_order = false;  // compare's type=TOTALORDER
  ScalarFunction key;        // f, over the comparator's parameters
};
// The keys, most significant first; nullopt when the comparator is not of
// that form.
std::optional<std::vector<SortKey>> SortKeysOf(const HloComputation& comparator);

// An integer whose order is compare's type=TOTALORDER on `v` (-NaN < -inf <
// ... < -0 < +0 < ... < inf < NaN).
int64_t TotalOrderKey(double v);

// ---------------------------------------------------------------------------
// Helpers shared by the evaluators.

// Row-major strides in elements.
DimensionVector RowMajorStrides(std::span<const int64_t> dims);
// One dim of a strided copy: extent and source / destination strides in
// elements (a source stride may be 0 to repeat, or negative to reverse).
struct CopyDim {
  int64_t size, src, dst;
};
// A strided copy's dims: inside the object for the ranks programs have, so
// describing a copy allocates nothing.
using CopyDims = SmallVector<CopyDim, 8>;
// Drops size-1 dims and merges neighbours that are contiguous on both sides,
// in place (dims of size 0 are the caller's to check first).
void CanonicalizeCopyDims(CopyDims& dims);
// An odometer's digits over `rank` dims, zeroed (on the stack up to rank 8:
// a strided copy's walk allocates nothing).
using OdometerDigits = SmallVector<int64_t, 8>;
// Copies the elements `dims` describe from src to dst (merging contiguous
// dims, memcpy for contiguous runs, tiles for transposes).
void StridedCopy(const void* src, void* dst, CopyDims dims, int64_t elem_bytes);
// out = in transposed: out dims[i] = in_dims[perm[i]], elements of elem_bytes.
void TransposeBytes(const void* in, std::span<const int64_t> in_dims, std::span<const int64_t> perm,
                    int64_t elem_bytes, void* out);
// Reads element `index` of a buffer of `type` as a double / int64.
double LoadAsDouble(PrimitiveType type, const void* data, int64_t index);
int64_t LoadAsInt(PrimitiveType type, const void* data, int64_t index);
// Writes `value` (rounded / wrapped to `type`) as element `index`.
void StoreDouble(PrimitiveType type, void* data, int64_t index, double value);
// Writes integer `value` wrapped to integer `type` (pred: value != 0).
void StoreInt(PrimitiveType type, void* data, int64_t index, int64_t value);
// Converts n elements between element types (XLA convert semantics: float to
// integer truncates toward zero, saturates, NaN gives 0; to pred is != 0).
void ConvertElements(PrimitiveType from, const void* in, PrimitiveType to, void* out, int64_t n);
// Runs fn(begin, end) over [0, n) in chunks of at least min_chunk, on the
// thread pool when allowed and worthwhile.
void ParallelRanges(int64_t n, int64_t min_chunk, bool use_pool,
                    FunctionRef<void(int64_t, int64_t)> fn);
// Elements per thread-pool task of the elementwise and fused loops.
inline constexpr int64_t kParallelChunk = 1 << 15;

}  // namespace weft::runtime::exec
