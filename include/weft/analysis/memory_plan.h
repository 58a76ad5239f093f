// Per-device memory of a per-device program, from the compiler's buffer
// assignment (compiler/buffer_assignment.h) over its schedule, without
// running it.
//
// One set of rules: every allocation decision (which instruction allocates,
// forwards or aliases an operand, reuses a dying operand in place, needs
// scratch, when a buffer dies) is the assignment's, which the executor runs
// by. The plan walks the program's execution (while loops trip by trip,
// calls) and at each position of each computation holds exactly the
// assignment's buffers live there (AssignedBuffer start..end; scratch for its
// step); a while or call is accounted by walking its called computations'
// own buffers, not by the nested region the assignment reserves for them.
// Entry parameters (the caller's) are held from the start until their last
// use, or for the whole step when weights_resident; the entry root's buffers
// until the end. Sizes are the program's own (Shape::ByteSize), aligned as
// the assignment aligns them; constants (the module's) are not counted.
// With executor_accounting, peak_bytes is the assignment's inputs + arena +
// outputs, exactly Executor::stats().peak_bytes (tests check it on the
// training step). Not modelled: the f32 scratch copies the executor makes of
// bf16 operands (a bf16 plan counts buffers as a native bf16 accelerator
// holds them) and the padded-row copies of an attention backward whose query
// length does not divide evenly.
//
// Categories come from what a buffer holds (a buffer of the assignment takes
// the label of the first labelled value that uses it):
//   parameters       entry parameters that are weights (after the data inputs)
//   inputs           the data inputs (tokens, targets, ...)
//   gradients        buffers that reach the entry root's outputs 1.. (the
//                    gradients), including a backward scan's stacked
//                    accumulators from their allocation on
//   saved            the stacked buffers a forward scan writes for a later
//                    loop (the backward): residuals, or with remat the
//                    per-layer inputs
//   collectives      results of collectives (all-gathered weights, ...)
//   temporaries      everything else
// With offload_saved, "saved" buffers live in host memory: they are counted
// in host_peak_bytes, not in device memory, and every part of them that a
// value reads (a layer the backward slices out, a view in the assignment) is
// a device buffer of its own, the prefetched layer, live while it is read.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "weft/hlo/module.h"

namespace weft::analysis {

enum class BufferCategory : uint8_t {
  kParameters,
  kInputs,
  kGradients,
  kSaved,
  kCollectives,
  kTemporaries,
};
inline constexpr int kNumBufferCategories = 6;
// "parameters", "inputs", "gradients", "saved for backward", "collective buffers",
// "temporaries".
std::string_view BufferCategoryName(BufferCategory category);
// The JSON key: "parameters", "inputs", "gradients", "saved", "collectives", "temporaries".
std::string_view BufferCategoryKey(BufferCategory category);

struct MemoryPlanOptions {
  // Entry parameter leaves before the weights (the batch); the rest are
  // weights. Outputs after the first (the loss) are gradients of weights
  // in the same order.
  int64_t num_data_inputs = 0;
  // Names of the weights, in input order (for the role of each buffer).
  std::vector<std::string> weight_names;
  // The caller holds the weights for the whole step (the trainer does):
  // they are never freed. false: until their last use (the executor's
  // accounting holds every input for the whole run either way).
  bool weights_resident = false;
  // Saved-for-backward buffers live in host memory (remat offload).
  bool offload_saved = false;
  // Whose memory: true, weft's executor (the buffer assignment's inputs +
  // arena + outputs, scratch included, exactly ExecutorStats::peak_bytes:
  // weft run, weft train's fit check, weft plan on the local-cpu chip);
  // false, the most bytes live at once, for a chip whose own compiler packs
  // the buffers (weft does not model its arena packing or scratch).
  // Offloaded plans always count live bytes.
  bool executor_accounting = false;
  // Samples kept of the live-memory timeline (the maximum over each bucket).
  int64_t timeline_points = 400;
};

// One buffer live at the peak.
struct LiveBuffer {
  std::string instruction;  // the instruction that allocated it
  std::string computation;  // where that instruction lives
  std::string role;         // "grad layers.attention.wq", "weight norm", "" ...
  Shape shape;              // the per-device (local) shape, element type as compiled
  int64_t bytes = 0;
  BufferCategory category = BufferCategory::kTemporaries;
};

struct TimelinePoint {
  int64_t step = 0;  // instructions executed before this bucket ends
  int64_t total = 0;
  std::array<int64_t, kNumBufferCategories> by_category{};
};

struct MemoryPlan {
  // Device memory held by the program at its peak. With executor_accounting
  // (and nothing offloaded), exactly the executor's ExecutorStats::peak_bytes:
  // the buffer assignment's (compiler/buffer_assignment.h) inputs + arena +
  // outputs; the peak is then placed where
  // the arena holds the most live bytes, and the categories are every input,
  // the arena's buffers live there (its packing counted as temporaries) and
  // the outputs copied out of it. Otherwise the most bytes live at once
  // (live_peak_bytes), where they are first reached.
  int64_t peak_bytes = 0;
  int64_t live_peak_bytes = 0;  // the most bytes live at once (the timeline's highest)
  int64_t arena_bytes = 0;      // the buffer assignment's arena
  // Executed instructions up to the peak (1-based) and in the step, as the
  // executor counts them (ExecutorStats::instructions: constants aside).
  int64_t peak_step = 0;
  int64_t total_steps = 0;
  std::string peak_instruction, peak_computation;
  std::array<int64_t, kNumBufferCategories> peak_by_category{};
  int64_t host_peak_bytes = 0;           // offloaded buffers (offload_saved)
  int64_t saved_bytes = 0;               // largest total of saved-for-backward buffers
  std::vector<LiveBuffer> live_at_peak;  // largest first
  std::vector<TimelinePoint> timeline;
};

// Throws weft::Error naming the instruction for what it cannot follow
// (e.g. a while whose trip count cannot be derived).
MemoryPlan PlanMemory(const HloModule& program, const MemoryPlanOptions& options);

}  // namespace weft::analysis
