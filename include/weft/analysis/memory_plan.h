// Per-device memory of a per-device program, from buffer liveness over the
// executor's schedule (runtime/executor.h), without running it.
//
// The simulation follows the executor's policy step by step, on sizes instead
// of data: the same post-order schedule per computation (parameters and
// their get-tuple-elements first), a value freed right after its last use,
// the same in-place rules (an elementwise op, dynamic-update-slice, scatter,
// all-reduce or collective-permute writes into a dying operand's buffer when
// nothing else references it), the same aliasing (reshape, copy, tuple,
// get-tuple-element, a no-op convert or broadcast, and contiguous slices
// share bytes), the same scratch inside ops (transposed dot operands,
// interleaved collective chunks), and while loops run trip by trip: a body's
// buffers are live during the loop, a scan's stacked carries are whole
// buffers from the start. With options.precision = kF32 and
// weights_resident = false, peak_bytes is what Executor::stats().peak_bytes
// measures when the caller keeps its inputs (RunOnDevices, RunSharded and the
// trainer do: the executor borrows them, read-only, until their last use);
// tests check it on the training step. Not modelled: the f32 scratch copies
// the executor makes of bf16 operands (a bf16 plan counts buffers as a
// native bf16 accelerator holds them) and the padded-row copies of an
// attention backward whose query length does not divide evenly.
//
// Categories come from what a buffer is:
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
// in host_peak_bytes, not in device memory, and every slice the backward
// reads from them is a device buffer of its own (the prefetched layer).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "weft/analysis/precision.h"
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
  Precision precision = Precision::kF32;
  // Entry parameter leaves before the weights (the batch); the rest are
  // weights. Outputs after the first (the loss) are gradients of weights
  // in the same order.
  int64_t num_data_inputs = 0;
  // Names of the weights, in input order (for the role of each buffer).
  std::vector<std::string> weight_names;
  // The caller holds the weights for the whole step (the trainer does):
  // they are never freed. false: as the executor counts them, until their
  // last use.
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
  int64_t bytes = 0;        // under the precision policy
  BufferCategory category = BufferCategory::kTemporaries;
};

struct TimelinePoint {
  int64_t step = 0;  // instructions executed before this bucket ends
  int64_t total = 0;
  std::array<int64_t, kNumBufferCategories> by_category{};
};

struct MemoryPlan {
  // Device memory held by the program at its peak. With executor_accounting
  // (and nothing offloaded), exactly the executor's ExecutorStats::peak_bytes: the buffer assignment's
  // (compiler/buffer_assignment.h) inputs + arena + outputs, sized under the
  // precision policy; the categories then come from the liveness simulation
  // below at its own peak, with the rest of the assignment's peak (arena
  // packing, outputs copied out) counted as temporaries. Otherwise the
  // simulation's peak (live_peak_bytes).
  int64_t peak_bytes = 0;
  int64_t live_peak_bytes = 0;  // the most bytes live at once (the timeline's highest)
  int64_t arena_bytes = 0;      // the buffer assignment's arena, under the policy
  int64_t peak_step = 0;    // executed instructions up to the peak (1-based)
  int64_t total_steps = 0;  // executed instructions in the step
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
