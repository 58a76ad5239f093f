// `weft run FILE.hlo [--seed S] [--check] [--num-devices N] [--max-iterations N]`: runs an HLO
// text module end to end on this process's devices (threads), or under
// `mpirun -np N weft run ...` with one device per rank:
//
//   parse -> propagate shardings (when some instruction has none)
//         -> partition into the per-device program
//         -> size the run (the memory plan of the per-device program, the
//            inputs and outputs) and refuse it, before allocating, when it
//            needs more than the machine's physical memory
//         -> seeded random inputs, split by the entry parameters' shardings
//         -> run (LocalCluster threads, or this MPI rank)
//         -> join the outputs by the root's sharding
//         -> print per-device peak memory and collective bytes
//         -> --check: run the unsharded module on one device and compare;
//            a module with manual regions (jax.shard_map), whose values
//            inside a region are per device and so has no unsharded run,
//            is compared with a run of the module whose automatic parts
//            are replicated (ReplicateOutsideManualRegions): both runs
//            execute the regions as written on the same pieces and differ
//            in everything propagation and the partitioner decide.
//
// Inputs: entry parameter leaf i draws from its own streams of `seed` (one
// per block of kRandomBlock elements):
// floats N(0, 1), pred a fair coin, integers uniform over what their uses
// admit (InputIntegerRanges): an index of a dynamic-slice, dynamic-update-
// slice, gather or scatter (directly or through converts, reshapes,
// broadcasts, slices and concatenates) over the indexed extent and 2 past
// each end (those ops clamp or drop out-of-range indices), a conditional's
// branch index over its branches and 2 past each end (out of range runs
// the last branch), other integers in [0, 4) (small segment ids); tokens
// hold nothing. Uneven tiles are padded (with zeros).
// Under MPI every rank compiles the same program and exchanges its hash before
// any compute (ranks given different files stop with "program hash ...
// differs between ranks"); a failure on any rank ends every rank with
// "rank R: <cause>" on stderr and a non-zero exit (RunMpiMain); rank 0 prints.
// The report ends with "output digest: <16 hex digits>", a hash of the
// joined outputs' bytes, the same bits on the threads and MPI backends.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "weft/compiler/compile.h"
#include "weft/hlo/module.h"
#include "weft/runtime/comm_threads.h"
#include "weft/runtime/executor.h"
#include "weft/runtime/executor_tensor.h"
#include "weft/sharding/hlo_sharding.h"

namespace weft::runtime {

struct RunCommandOptions {
  std::string input;   // FILE.hlo
  uint64_t seed = 0;   // --seed
  bool check = false;  // --check
  // --num-devices, at least 1 when given; unset: the rank count under MPI,
  // else the device count the module's shardings are written for, else the
  // topology's (WEFT_NUM_DEVICES).
  std::optional<int64_t> num_devices;
  // --max-iterations: the most iterations one while loop may run
  // (ExecutorOptions::max_while_iterations); a loop that never ends stops
  // with an error naming it.
  int64_t max_iterations = ExecutorOptions::kDefaultMaxWhileIterations;
  std::ostream* out = nullptr;  // the report; stdout when null (rank 0 only)
};

// Exit code of `weft run --check` when an output is off.
inline constexpr int kCheckFailedExitCode = 3;

// Returns 0, or kCheckFailedExitCode when --check finds an output whose
// maximum relative error exceeds CheckTolerance of its type (on every rank
// under MPI). Throws weft::Error for unreadable or invalid input, naming the
// file (parse errors carry FILE:line:col) or the instruction; the CLI prints
// "error: ..." and exits 2. Under MPI, errors end the job as described above.
int RunRunCommand(const RunCommandOptions& options);

// ---------------------------------------------------------------------------
// The steps, for tests and tools.

// Compiling (propagate -> partition) is compiler::CompileForDevices
// (compiler/compile.h); the steps below run a compiler::CompiledProgram.

// What a run holds in memory at once, estimated before anything is allocated.
struct RunMemoryEstimate {
  // One device's peak: the memory plan of the per-device program
  // (analysis::PlanMemory, the executor's liveness rules). When the plan
  // cannot follow the program (device_peak_planned false, with the reason),
  // the largest single buffer: a lower bound.
  int64_t device_peak_bytes = 0;
  // Of which the inputs a device borrows whole (shared with the global
  // inputs, so counted once, in input_bytes).
  int64_t device_shared_bytes = 0;
  bool device_peak_planned = false;
  std::string not_planned_reason;
  std::vector<std::string> largest_buffers;  // at the peak: "'b' f32[..] (16.00 GiB)"
  int64_t devices = 1;           // devices held by one process (threads), 1 per MPI rank
  int64_t processes = 1;         // processes on this machine (MPI ranks)
  int64_t input_bytes = 0;       // the global inputs (RandomInputs)
  int64_t output_bytes = 0;      // joined outputs not already held by a device
  int64_t check_peak_bytes = 0;  // --check: the unsharded module's peak less its inputs
  // processes x the larger of: inputs + outputs + devices x (device peak
  // less the inputs it borrows whole), and --check's run; saturating.
  int64_t total_bytes = 0;
};

// Estimates `program` (compiled from `module`) run on `devices` devices in
// this process (threads), or, with mpi_ranks_here > 0, one device per MPI
// rank with that many ranks on this machine; `check` adds --check's run of
// the unsharded module.
RunMemoryEstimate EstimateRunMemory(const HloModule& module,
                                    const compiler::CompiledProgram& program, int64_t devices,
                                    bool check, int64_t mpi_ranks_here = 0);

// Throws weft::Error when the estimate exceeds `available_bytes` (weft run:
// the physical memory; <= 0: unknown, never refuses), stating both figures,
// what makes up the estimate and what to change. `input` names the module.
void CheckRunFitsInMemory(const RunMemoryEstimate& estimate, int64_t available_bytes,
                          std::string_view input);

// The inclusive range each entry parameter leaf's integers are drawn from
// (see the file comment); [0, 3] for leaves that are not integers, tuples'
// leaves and integers used as no index.
struct IntegerRange {
  int64_t lo = 0, hi = 3;
};
std::vector<IntegerRange> InputIntegerRanges(const HloModule& module);

// Seeded inputs of the given shapes (see the file comment); integers over
// `ranges[i]` (empty: [0, 3] for every leaf). Each block of kRandomBlock
// elements of a leaf is its own stream (seed, leaf, block), drawn in
// parallel. Floats are standard normal (rounded to the type), f8e8m0fnu
// block scales powers of two from 2^-3 to 2^3.
inline constexpr int64_t kRandomBlock = int64_t{1} << 16;
std::vector<HostTensor> RandomInputs(std::span<const Shape> shapes, uint64_t seed,
                                     std::span<const IntegerRange> ranges = {});

// Device `device`'s piece of `global` under `sharding`, shaped `local_shape`
// (the padded tile); floating-point padding is `pad`, other padding 0. Under
// {manual} the global value is the devices' own values stacked along a new
// leading dim (CompiledProgram's shapes of a manual leaf), and the piece is
// entry `device`.
// Under unreduced axes the piece is the device's addend: a float value
// split in equal parts over its group, an integer one in quotients with the
// remainder on the group's first device ({unreduced}: a group of
// `num_devices`).
HostTensor ShardTensor(const HostTensor& global, const HloSharding& sharding, int64_t device,
                       const Shape& local_shape, double pad = 0, int64_t num_devices = 0);

// The inputs of every device: inputs_per_device[d][i] = ShardTensor(inputs[i], ...).
std::vector<std::vector<HostTensor>> ShardInputs(const compiler::CompiledProgram& program,
                                                 std::span<const HostTensor> inputs,
                                                 double pad = 0);

// Joins per-device pieces (pieces[d] from device d) into `global_shape`; a
// tile held by several devices is taken from the lowest device id; {manual}
// pieces are stacked; addends (unreduced axes) are summed.
HostTensor JoinTensor(std::span<const HostTensor> pieces, const HloSharding& sharding,
                      const Shape& global_shape);

// The whole tensor from every device's piece: an all-gather over `comm` (a
// collective: every device calls it, every device receives the tensor).
HostTensor GatherTensor(const HostTensor& piece, const HloSharding& sharding,
                        const Shape& global_shape, Communicator& comm);

// Runs the program on `cluster` (its device count must match) and returns the
// joined outputs; `stats` receives each device's ExecutorStats. Inputs are
// padded with `pad` (tests pass NaN: padding must never reach a result).
std::vector<HostTensor> RunSharded(const compiler::CompiledProgram& program,
                                   std::span<const HostTensor> inputs, LocalCluster& cluster,
                                   std::vector<ExecutorStats>* stats = nullptr,
                                   const ExecutorOptions& options = {}, double pad = 0);

// max|actual - expected| / max|expected| over the elements (0 when both are
// all zero; infinity when the shapes differ or a NaN / infinity is in one
// and not at the same place, with the same value, in the other).
double MaxRelativeError(const HostTensor& actual, const HostTensor& expected);

// The largest MaxRelativeError --check accepts for an output of `type`:
// 1e-10 for f64, 1e-5 for f32, 1e-2 for bf16 / f16, 0 for integers and
// pred; a floating output of a module that computes in a narrower float
// (NarrowestFloat) takes that type's tolerance (an f32 result of bf16
// arithmetic). A module whose longest sum (LongestSum) adds more than
// kCheckSumTerms terms scales a float tolerance by
// sqrt(longest_sum / kCheckSumTerms): sharding changes the order of the sum,
// and its rounding error grows as a random walk.
inline constexpr int64_t kCheckSumTerms = 4096;
double CheckTolerance(PrimitiveType type, PrimitiveType narrowest_float = PrimitiveType::kF64,
                      int64_t longest_sum = 1);
// The most terms one float sum of the module adds: a dot's contracting
// elements, a convolution's window times its input features, a reduce's
// reduced elements, a reduce-window's window (1 when there is none).
int64_t LongestSum(const HloModule& module);
// The floating-point type of fewest bits any instruction of the module
// produces (kF64 when none is narrower, or the module has no floats).
PrimitiveType NarrowestFloat(const HloModule& module);

// Whether the module has a manual region (an SPMDFullToShardShape or
// SPMDShardToFullShape custom call, an entry parameter or result with a
// {manual} leaf, or a cross-partition all-reduce: one with a channel_id
// sums what each device holds, so it runs only on its devices).
bool HasManualRegions(const HloModule& module);
// --check's reference for such a module, in place on a module whose
// shardings are complete (propagated): every sharded instruction outside
// the manual regions made replicated; kept are the {manual} instructions,
// the regions' edges (SPMDFullToShardShape and its operand, whose sharding
// cuts the pieces, and SPMDShardToFullShape, whose sharding joins them);
// a partly manual instruction keeps its manual subgroup and is replicated
// within each manual group (each group computes its piece whole).
void ReplicateOutsideManualRegions(HloModule& module);

// FNV-1a over the outputs' bytes, in order.
uint64_t OutputDigest(std::span<const HostTensor> outputs);

}  // namespace weft::runtime
