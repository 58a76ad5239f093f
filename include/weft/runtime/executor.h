// Executor: runs a per-device HLO program (an HloModule's entry computation)
// on one device, with weft's kernels, oneDNN GEMM for dot, and a
// Communicator for the collectives.
//
//   auto module = ParseHloModule(text);
//   Executor exec(*module);
//   std::vector<HostTensor> out = exec.Run({x, w});            // one device
//   RunOnDevices(*module, inputs_per_device, cluster);         // N threads
//
// Inputs and outputs are the entry's parameters and root flattened into
// array leaves (a tuple parameter takes as many inputs as it has leaves; a
// tuple root gives one output per leaf), in order.
//
// Scheduling and memory: each computation runs in a fixed topological order
// (compiler::ScheduleComputation), so every device makes the same collective calls in
// the same order. Where every value lives is decided before the first run
// by the buffer assignment (compiler/buffer_assignment.h) over that order:
// one arena per executor, allocated by the first Run and kept across runs,
// holds every intermediate value, every while loop's carry and body, and
// the scratch the compiler models; an instruction whose operand dies with
// it writes into that operand's buffer when the assignment says so (never
// when another operand reads the same buffer); reshape, copy, a same-type
// convert, contiguous slices, tuples and get-tuple-element share bytes.
// Inputs are only read (the caller owns them); outputs are copied out of
// the arena into buffers of their own (from the executor's BufferPool, so
// repeated runs reuse them once the caller lets go), so the next Run cannot
// overwrite them.
//
// stats().peak_bytes = the assignment's peak_bytes() — the inputs' bytes +
// the arena + the bytes of the outputs copied out (each rounded up to 64) —
// + the most bytes held at once of scratch the compiler did not model
// (bf16/f16 conversions inside dot, reduce and attention; 0 for f32
// programs). Constants (the module's) are not counted. A run after the
// first makes no fresh allocations (stats().allocations == 0) once the
// caller drops the previous outputs.
//
// Devices and ids: with the module's num_partitions P and replica_count R
// both > 1, device d is partition d % P of replica d / P, and replica groups
// follow XLA's modes (no channel_id: replica ids; channel_id: partition ids;
// use_global_device_ids: device ids). When P or R is 1 (the SPMD case), the
// ids in replica_groups are device ids and partition-id = replica-id =
// the device id (when both are 1) or the id along the dimension that is > 1.
// An empty replica_groups means all devices.
//
// Errors (weft::Error): inputs of the wrong count or shape name the
// parameter; unsupported opcode/type combinations name the instruction
// ("'d' (dot) at 7:3: dot of pred is not supported"), at construction when
// they can be seen statically, otherwise when run.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "weft/compiler/buffer_assignment.h"
#include "weft/hlo/custom_call_targets.h"
#include "weft/hlo/module.h"
#include "weft/runtime/comm_threads.h"
#include "weft/runtime/communicator.h"
#include "weft/runtime/executor_tensor.h"

namespace weft::runtime {

// ---------------------------------------------------------------------------
// Attention custom calls: kFlexAttentionTarget and
// kFlexAttentionBackwardTarget, whose operands, results and backend_config
// are defined in hlo/custom_call_targets.h.

// ---------------------------------------------------------------------------

// ---------------------------------------------------------------------------
// Profiling (ExecutorOptions::profile; `weft bench train` reads it): the
// classes a run's time is broken into.
enum class OpClass : int8_t {
  kDot,           // dot (oneDNN GEMM), output fusions (a GEMM with post-ops)
  kAttention,     // the flex attention custom calls, forward and backward
  kElementwise,   // elementwise ops (convert, compare, select included), iota
  kBroadcast,     // broadcast (a materialized copy today)
  kDataMovement,  // copy, reshape, transpose, slice, concatenate, pad, reverse,
                  // dynamic-slice, dynamic-update-slice, gather, scatter
  kReduction,     // reduce
  kCollective,    // all-reduce, all-gather, reduce-scatter, all-to-all,
                  // collective-permute (waiting for the other devices included)
  kFusedLoops,    // loop and input fusions (compiler/fusion.h), run a tile at a time
  kOther,         // parameters, constants, tuples, get-tuple-element, ids
};
inline constexpr int kNumOpClasses = 9;
// "dot", "attention", "elementwise", "broadcast", "data_movement",
// "reduction", "collective", "fused_loops", "other".
std::string_view OpClassName(OpClass op_class);
OpClass ClassifyInstruction(const HloInstruction& instr);

// ---------------------------------------------------------------------------

struct ExecutorOptions {
  // Large elementwise ops and reductions split over ThreadPool::Global(),
  // in teams of this device's share (gemm_threads).
  bool use_thread_pool = true;
  // This device thread's share of the pool: the team size of its GEMMs
  // (oneDNN's OpenMP threads) and of its ParallelFor jobs alike
  // (ThreadPool::SetThreadsForThisThread). 0: the pool's threads over the
  // devices of this process, or under MPI over the ranks on this host.
  int gemm_threads = 0;
  // The most iterations one execution of a while loop may run (its body
  // runs at most this many times each time the loop is reached); one more
  // and Run throws weft::Error naming the loop, the limit and
  // kMaxIterationsFlag, so a loop that never ends stops. Must be >= 1.
  int64_t max_while_iterations = kDefaultMaxWhileIterations;
  static constexpr int64_t kDefaultMaxWhileIterations = 10'000'000;
  // Time every executed instruction into ExecutorStats::class_seconds (two
  // clock reads per instruction). Off, it costs one untaken branch each.
  bool profile = false;
};

// The flag that sets ExecutorOptions::max_while_iterations (weft run).
inline constexpr std::string_view kMaxIterationsFlag = "--max-iterations";

struct ExecutorStats {
  int64_t peak_bytes = 0;       // see the file comment
  int64_t arena_bytes = 0;      // the buffer assignment's arena
  int64_t unplanned_bytes = 0;  // peak of scratch outside the arena
  // Results an evaluator did not write where the assignment placed them
  // (moved there with a copy): 0 when evaluators and assignment agree.
  int64_t misplaced_results = 0;
  // Executed (loop bodies count every iteration). Constants are not: each
  // is made once, when the executor is built, unless it is a root.
  int64_t instructions = 0;
  double seconds = 0;  // wall time of the last Run
  // Fresh buffers the executor asked the system for during the last Run
  // (the arena on the first run, outputs and unmodelled scratch the pool
  // could not serve), and their bytes.
  int64_t allocations = 0;
  int64_t allocated_bytes = 0;
  // With ExecutorOptions::profile, per OpClass: seconds spent in its
  // instructions during the last Run, and how many ran. While and call are
  // not timed themselves: the instructions of their computations are.
  std::array<double, kNumOpClasses> class_seconds{};
  std::array<int64_t, kNumOpClasses> class_instructions{};
  // With ExecutorOptions::profile, seconds per timed instruction during the
  // last Run (loop bodies summed over their iterations); the instructions
  // belong to the executor's module.
  std::unordered_map<const HloInstruction*, double> instruction_seconds;
  // What the communicator counted during the last Run.
  CollectiveStats collectives;
  int64_t collective_bytes() const { return collectives.TotalBytesSent(); }
};

class Executor {
 public:
  // Prepares the schedules of every computation and checks what it can
  // statically. The module must outlive the executor. `assignment` (over
  // compiler::ScheduleComputation) is computed here when not given.
  explicit Executor(const HloModule& module, ExecutorOptions options = {},
                    std::shared_ptr<const compiler::BufferAssignment> assignment = nullptr);
  ~Executor();
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  // One device alone (device 0 of 1): collectives see groups of one.
  // Inputs are only read.
  std::vector<HostTensor> Run(std::vector<HostTensor> inputs);
  // As the device comm.device_id() of comm.num_devices().
  std::vector<HostTensor> Run(std::vector<HostTensor> inputs, Communicator& comm);

  // Of the last Run.
  const ExecutorStats& stats() const { return stats_; }
  const HloModule& module() const { return module_; }
  const compiler::BufferAssignment& assignment() const;
  // What Run expects: the entry parameters' array leaves in order.
  std::vector<Shape> InputShapes() const;
  // Entry parameter name per input (a tuple parameter's leaves as "p{1}").
  std::vector<std::string> InputNames() const;

  struct Impl;  // implementation detail (executor.cc)

 private:
  const HloModule& module_;
  ExecutorStats stats_;
  std::unique_ptr<Impl> impl_;
};

// The executor runs each computation in compiler::ScheduleComputation's
// order (compiler/schedule.h).

// Runs the same per-device program on every device of `cluster` (one thread
// each, one Executor each); inputs_per_device[d] are device d's inputs.
// Returns each device's outputs; `stats`, when given, receives each device's
// ExecutorStats. A failure on any device is rethrown ("device D: ...").
std::vector<std::vector<HostTensor>> RunOnDevices(
    const HloModule& module, const std::vector<std::vector<HostTensor>>& inputs_per_device,
    LocalCluster& cluster, std::vector<ExecutorStats>* stats = nullptr,
    const ExecutorOptions& options = {});

// Runs the program on this MPI rank (device = rank) with `comm` (an
// MpiCommunicator, made once per process). First checks that every rank
// runs the same program (Communicator::VerifySameHash of the module text).
// Wrap the call in RunMpiMain so a failure on one rank ends the job.
std::vector<HostTensor> RunOnMpiRank(const HloModule& module, std::vector<HostTensor> inputs,
                                     Communicator& comm, ExecutorStats* stats = nullptr,
                                     const ExecutorOptions& options = {});

}  // namespace weft::runtime
