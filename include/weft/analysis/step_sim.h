// The step time of a compiled per-device program on a chip, simulated over
// its schedule.
//
// Each instruction gets a time on the stream that runs it:
//   compute  dots (and fusions around one) by their FLOPs with M, N and K
//            padded to the chip's matrix_tile, at the matrix peak for the
//            precision x matrix_efficiency; attention calls by their FLOPs
//            the same way; everything else (fused loops, copies, slices,
//            reductions) by the bytes it reads and writes at HBM bandwidth
//            (at the cache's when they fit the chip's cache_mb) or its
//            elementwise work at vector_tflops, whichever is slower
//            (a dot too when its bytes take longer than its FLOPs)
//   ici      collectives whose group stays in a slice: a ring's steps x
//            ici_latency + bytes sent / bandwidth; the bandwidth is the
//            chip's whole ici rate on a switch (NVLink), and on a torus two
//            links (both directions of a ring) per torus axis the group
//            spans, devices laid out row-major over the slice's torus (a
//            16x16 torus for 256 chips, 4x4x8 for 128 in 3D)
//   dcn      collectives whose group crosses slices, at the chip's DCN share
//   host     offloaded buffers (written in the forward, read back in the
//            backward) at the host link, overlapping everything; only what
//            is longer than the rest of the step is exposed
// Parameters, constants, tuples, get-tuple-element and reshapes
// take no time (a chip's compiler makes them views).
//
// The schedule is simulated as a dataflow over the streams. The compute
// stream runs, among the instructions whose operands are ready, the first
// in schedule order, so it does other work while a collective is in flight
// wherever the program's dependencies allow (as XLA's latency-hiding
// scheduler does); each collective stream runs its collectives in schedule
// order (every device must issue them in the same order). While loops are
// unrolled trip by trip, each loop-state element ready when its producer
// is: a trip's compute starts when the previous trip's compute is done,
// except what only waits on a collective to update the loop state (a
// weight gradient's reduce-scatter and its accumulation), which may finish
// during the next trip; a trip's collectives may start once the previous
// trip has started (one trip of prefetch: the next layer's FSDP all-gather
// overlaps this layer's compute, as XLA's collective pipeliner arranges).
// The step is when the last instruction finishes; compute-stream idle time
// is exposed communication, charged to the stream it waited for.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "weft/analysis/chips.h"
#include "weft/hlo/module.h"

namespace weft::analysis {

enum class Stream { kCompute = 0, kIci = 1, kDcn = 2 };
inline constexpr int kNumStreams = 3;
std::string_view StreamName(Stream stream);  // "compute", "ici", "dcn"

struct SimOptions {
  int64_t num_devices = 1, slices = 1;
  int64_t device = 0;      // whose replica groups (the programs are the same)
  int64_t host_bytes = 0;  // offloaded bytes moved per step
  double model_flops = 0;  // per device per run of the program, for MFU
  // The program runs this many times per step, one after the other
  // (gradient accumulation): times, busy and exposed, scale by it.
  int64_t repeats = 1;
  int64_t top = 10;               // instructions kept in StepTime::top
  int64_t timeline_points = 400;  // busy intervals closer than step / this merge
};

// What bounds one run of an instruction and how long it takes.
struct InstructionCost {
  Stream stream = Stream::kCompute;
  double seconds = 0;
  std::string bound;    // "matrix", "memory", "vector", "link", "none"
  bool matrix = false;  // a dot, a fusion around one, or attention
};
InstructionCost CostOfInstruction(const HloModule& program, const HloInstruction& instr,
                                  const Chip& chip, const SimOptions& options);

struct SimInstruction {
  std::string instruction, computation;
  Stream stream = Stream::kCompute;
  std::string bound;
  int64_t runs = 0;
  double seconds = 0;  // over all runs
};

struct Interval {
  double start = 0, end = 0;
};

struct StepTime {
  double step_s = 0;                        // the simulated step, exposed host time included
  double compute_s = 0;                     // compute stream busy
  double matrix_s = 0;                      // of compute_s: dots, their fusions, attention
  double ici_s = 0, dcn_s = 0, host_s = 0;  // each link's busy time
  // Compute-stream idle time waiting for each link (step_s = compute_s +
  // these + idle time waiting for nothing, which a dataflow never has).
  double exposed_ici_s = 0, exposed_dcn_s = 0, exposed_host_s = 0;
  double serial_s = 0;  // compute + ici + dcn + host: no overlap at all
  // The matrix peak MFU is measured against: the chip's bf16 peak when most
  // of the program's matrix FLOPs (each instruction counted once) have bf16
  // or f16 operands, else its f32 peak.
  double peak_flops = 0;
  double mfu = 0, mfu_serial = 0;   // model FLOPs / (step x peak), at step_s / serial_s
  std::vector<SimInstruction> top;  // most time first
  std::array<std::vector<Interval>, kNumStreams> busy;  // merged busy intervals
  int64_t simulated_runs = 0;                           // instruction runs simulated
};

// Throws weft::InternalError for a program it cannot walk (a while whose
// trip count is unknown is weft::Error from loops.h).
StepTime SimulateStep(const HloModule& program, const Chip& chip, const SimOptions& options);

}  // namespace weft::analysis
