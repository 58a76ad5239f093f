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
// (compiler::ScheduleComputation: post-order from the root; parameters and
// their get-tuple-elements first),
// so every device makes the same collective calls in the same order. A value
// is freed right after its last use; an op whose operand dies with it writes
// its result into that operand's buffer when nothing else references it
// (elementwise ops, dynamic-update-slice — a scan's stacked carry is updated
// in place —, scatter, all-reduce, collective-permute). Reshape, copy, bitcast-like slices, tuples
// and get-tuple-element share bytes instead of copying. stats().peak_bytes is the largest sum of
// the bytes of distinct buffers held at once during the last Run: parameters (until their last
// use), constants (while used), intermediates and outputs. Freed buffers
// return to the executor's BufferPool (executor_tensor.h), bounded by twice
// the last run's peak, and serve later allocations of the same size class:
// repeated runs (training steps) take no fresh memory and no page faults.
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
#include <vector>

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
  kDot,           // dot (oneDNN GEMM)
  kAttention,     // the flex attention custom calls, forward and backward
  kElementwise,   // elementwise ops (convert, compare, select included), iota
  kBroadcast,     // broadcast (a materialized copy today)
  kDataMovement,  // copy, reshape, transpose, slice, concatenate, pad, reverse,
                  // dynamic-slice, dynamic-update-slice, gather, scatter
  kReduction,     // reduce
  kCollective,    // all-reduce, all-gather, reduce-scatter, all-to-all,
                  // collective-permute (waiting for the other devices included)
  kOther,         // parameters, constants, tuples, get-tuple-element, ids
};
inline constexpr int kNumOpClasses = 8;
// "dot", "attention", "elementwise", "broadcast", "data_movement",
// "reduction", "collective", "other".
std::string_view OpClassName(OpClass op_class);
OpClass ClassifyInstruction(const HloInstruction& instr);

// ---------------------------------------------------------------------------

struct ExecutorOptions {
  // Large elementwise ops and reductions split over ThreadPool::Global().
  // (When several devices run as threads, the pool serves one at a time and
  // the others run their loops inline, by the pool's design.)
  bool use_thread_pool = true;
  // Threads oneDNN's GEMM uses on this device's thread; 0 = all cores
  // divided by the number of devices of this process.
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
  int64_t peak_bytes = 0;    // see the file comment
  int64_t instructions = 0;  // executed (loop bodies count every iteration)
  double seconds = 0;        // wall time of the last Run
  // Fresh buffers the executor asked the system for during the last Run
  // (results that could neither take over a dying operand's buffer nor an
  // idle one of the executor's pool, and the evaluators' scratch), and
  // their bytes. A run that repeats the previous one's allocations (a
  // training step after the first two) makes none.
  int64_t allocations = 0;
  int64_t allocated_bytes = 0;
  // With ExecutorOptions::profile, per OpClass: seconds spent in its
  // instructions during the last Run, and how many ran. While and call are
  // not timed themselves: the instructions of their computations are.
  std::array<double, kNumOpClasses> class_seconds{};
  std::array<int64_t, kNumOpClasses> class_instructions{};
  // What the communicator counted during the last Run.
  CollectiveStats collectives;
  int64_t collective_bytes() const { return collectives.TotalBytesSent(); }
};

class Executor {
 public:
  // Prepares the schedules of every computation and checks what it can
  // statically. The module must outlive the executor.
  explicit Executor(const HloModule& module, ExecutorOptions options = {});
  ~Executor();
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  // One device alone (device 0 of 1): collectives see groups of one.
  // Inputs nobody else references (a vector of moved tensors; note that
  // Run({std::move(t)}) copies, as initializer lists do) are freed after
  // their last use and their buffers reused; shared ones are only read.
  std::vector<HostTensor> Run(std::vector<HostTensor> inputs);
  // As the device comm.device_id() of comm.num_devices().
  std::vector<HostTensor> Run(std::vector<HostTensor> inputs, Communicator& comm);

  // Of the last Run.
  const ExecutorStats& stats() const { return stats_; }
  const HloModule& module() const { return module_; }
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
