// Buffer assignment: where every array value of a per-device program lives,
// decided once per compiled program over a schedule (compiler/schedule.h),
// in XLA's spirit. The executor runs out of one arena of arena_bytes()
// bytes; the planner (analysis/memory_plan.h) reads the same assignment.
//
// Regions. Each computation gets a region of its own (offsets from the
// region's base, 64-byte aligned). A while or call instruction reserves, for
// the step that runs it, a nested region as large as its largest called
// computation (condition and body share it: they never run at once); the
// entry's region is the arena. Nesting is exact: a body's values are live
// only while the loop runs, and every call of a computation uses the same
// relative layout.
//
// Values. Every leaf of an instruction's result is one of
//   kNew      a buffer of its own at `offset` in the computation's region;
//   kInPlace  the buffer of operand `operand`'s leaf `operand_leaf`, which dies
//             at this instruction and is read through no other operand
//             (elementwise ops on their candidate operands, dynamic-update-
//             slice and scatter on operand 0, all-reduce and
//             collective-permute on their own operand, an array all-to-all
//             on its operand unless it writes through a transpose
//             (all_to_all_layout.h), a while's carry on its init) — the
//             evaluators' ReuseOrAllocate/TryReuse candidates;
//   kForward  bytes of an operand (or outside the region) that the executor
//             or the evaluator forwards: parameter, constant, tuple,
//             get-tuple-element, copy, reshape, a same-type convert, a
//             broadcast that adds only unit dims, a transpose an all-to-all
//             wrote in its layout (all_to_all_layout.h), a contiguous unit-stride
//             slice or dynamic-slice (a view, unless the operand dies here
//             and the slice is under half of it).
// Outside every region: the entry computation's parameters (the caller owns
// them: never written, never reused), constants (the module's), and the
// entry root's outputs (the executor copies them out of the arena into
// buffers of their own, so the next run cannot overwrite them). Called
// computations' parameters alias their arguments: a while body may write
// its carry in place (the loop owns it), a condition or call body may not.
// A while's result is its carry: for a leaf the body returns unchanged, the
// init's bytes as they are (kForward: nothing writes them); else the init's
// leaf buffer when it dies at the loop (kInPlace), or a new buffer the init
// is copied into (kNew). The body's root is copied back into the carry after
// each iteration where it is elsewhere.
// A call's result leaves are new buffers the callee's root is copied into.
//
// Scratch: some instructions need working memory while they run (a dot's
// packed operand, an attention forward's discarded logsumexp); InstructionScratch lists it, and it
// is a buffer live at that step only.
//
// Offsets: buffers sorted by size (largest first), each at the lowest offset
// where it overlaps no placed buffer whose live range intersects its own.
#pragma once

#include <cstdint>
#include <functional>
#include <unordered_map>
#include <vector>

#include "weft/hlo/module.h"

namespace weft::compiler {

// The order a computation runs in (every instruction once, operands first).
using SequenceFunction = std::function<std::vector<HloInstruction*>(const HloComputation&)>;

inline constexpr int64_t kBufferAlignment = 64;

struct LeafAssignment {
  enum class Kind : uint8_t { kNew, kInPlace, kForward };
  Kind kind = Kind::kForward;
  int64_t offset = -1;   // kNew, and kInPlace of a buffer in this region
  int32_t operand = -1;  // kInPlace
  int32_t operand_leaf = 0;
  // The region buffer it uses (index into ComputationAssignment::buffers,
  // kForward leaves included); -1: outside the region (parameters, constants).
  int32_t buffer = -1;
  // Where buffer is -1: the buffer outside the region it uses (index into
  // ComputationAssignment::external); -1 otherwise.
  int32_t external = -1;
};

struct InstructionAssignment {
  int64_t position = 0;                // in the sequence
  std::vector<LeafAssignment> leaves;  // one per array leaf of the result
  // Per operand: its first leaf's buffer has its last use here (false for
  // buffers outside the region that the computation may not write).
  std::vector<bool> operand_dies;
  int64_t scratch_offset = -1, scratch_bytes = 0;
  int64_t nested_offset = -1;  // while / call: base of the called computations' region
};

struct AssignedBuffer {
  enum class Kind : uint8_t { kValue, kScratch, kNested };
  Kind kind = Kind::kValue;
  const HloInstruction* instr = nullptr;  // defining (or, for kInPlace chains, first) instruction
  int64_t leaf = 0;
  int64_t offset = 0, size = 0;  // size rounded to kBufferAlignment
  int64_t start = 0, end = 0;    // live positions, inclusive (end == sequence size: the root's)
};

struct ComputationAssignment {
  const HloComputation* computation = nullptr;
  std::vector<HloInstruction*> sequence;
  std::vector<AssignedBuffer> buffers;
  // The buffers outside the region, for readers (the planner): each leaf of
  // the computation's parameters and each constant, offset -1, sized like a
  // region buffer, live from its instruction to its last use through the
  // values that forward it (end == sequence size: the root's). Not placed.
  std::vector<AssignedBuffer> external;
  std::unordered_map<const HloInstruction*, InstructionAssignment> instructions;
  int64_t size = 0;  // the region's bytes: max over buffers of offset + size
  // Largest sum of the sizes of buffers live at one position (nested regions
  // counted by their size): size >= max_live_bytes.
  int64_t max_live_bytes = 0;
};

class BufferAssignment {
 public:
  const ComputationAssignment& Of(const HloComputation& computation) const;
  const InstructionAssignment& Of(const HloInstruction& instr) const;
  bool Has(const HloComputation& computation) const { return computations_.count(&computation); }
  // The entry's region: the executor's arena.
  int64_t arena_bytes() const { return arena_bytes_; }
  // The entry parameters' leaves and the outputs copied out of the arena
  // (root leaves that are not entry parameters or constants), sized.
  int64_t input_bytes() const { return input_bytes_; }
  int64_t output_bytes() const { return output_bytes_; }
  // What a device holds while the program runs: inputs + arena + outputs.
  int64_t peak_bytes() const { return input_bytes_ + arena_bytes_ + output_bytes_; }
  const std::unordered_map<const HloComputation*, ComputationAssignment>& computations() const {
    return computations_;
  }

 private:
  friend BufferAssignment AssignBuffers(const HloModule&, const SequenceFunction&);
  std::unordered_map<const HloComputation*, ComputationAssignment> computations_;
  std::unordered_map<const HloInstruction*, const InstructionAssignment*> index_;
  int64_t arena_bytes_ = 0, input_bytes_ = 0, output_bytes_ = 0;
};

// Assigns every computation reachable from the entry, each buffer
// Shape::ByteSize rounded up to kBufferAlignment.
BufferAssignment AssignBuffers(const HloModule& module, const SequenceFunction& sequence);

// The scratch shapes an instruction's evaluator allocates after its results,
// in order (only those the compiler models: dots' packed operands and f32
// copies, attention's conversions and unreturned lse, a bf16/f16 reduce's f32
// copy; not the widening
// fallback of a bf16 dot where oneDNN has no bf16 kernel, nor attention's
// copies with clean padding rows). An output fusion (kind=kOutput) needs its
// dot's.
std::vector<Shape> InstructionScratch(const HloInstruction& instr);

// Whether the executor runs `instr` as a step of its own; the planner's
// timeline (analysis/memory_plan.h) has a point, and counts a step, for each
// instruction that does. Two kinds take none:
//  - a constant that is not its computation's root: made once, its readers
//    read it where it lies;
//  - a get-tuple-element of an array element, not the root, that only
//    evaluated instructions read (no tuple, get-tuple-element, copy, while,
//    call or conditional, which the executor's scheduler runs itself): its
//    readers read the tuple's leaf in place.
bool TakesStep(const HloInstruction& instr);

// Whether a (dynamic-)slice of `operand_dims` to `sizes` is one contiguous
// range of the operand (leading unit dims, then whole dims).
bool IsContiguousBox(const std::vector<int64_t>& operand_dims, const std::vector<int64_t>& sizes);

}  // namespace weft::compiler
