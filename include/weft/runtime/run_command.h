// `weft run FILE.hlo [--seed S] [--check] [--num-devices N]`: runs an HLO
// text module end to end on this process's devices (threads), or under
// `mpirun -np N weft run ...` with one device per rank:
//
//   parse -> propagate shardings (when some instruction has none)
//         -> partition into the per-device program
//         -> seeded random inputs, split by the entry parameters' shardings
//         -> run (LocalCluster threads, or this MPI rank)
//         -> join the outputs by the root's sharding
//         -> print per-device peak memory and collective bytes
//         -> --check: run the unsharded module on one device and compare.
//
// Inputs: entry parameter leaf i draws from its own stream of `seed`:
// floats N(0, 1), integers uniform in [0, 4) (small segment ids / indices),
// pred a fair coin. Uneven tiles are padded (with zeros).
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
#include <span>
#include <string>
#include <vector>

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
  // --num-devices; 0: the rank count under MPI, else the device count the
  // module's shardings are written for, else the topology's (WEFT_NUM_DEVICES).
  int64_t num_devices = 0;
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

// A module compiled for `num_devices` devices. Leaves are the entry
// parameters' / root's array leaves in order (executor.h).
struct ShardedProgram {
  std::unique_ptr<HloModule> program;  // the per-device program
  int64_t num_devices = 1;
  bool propagated = false;  // shardings were completed by propagation
  std::vector<std::string> input_names, output_names;
  std::vector<Shape> input_shapes, output_shapes;              // global
  std::vector<Shape> local_input_shapes, local_output_shapes;  // per device (padded tiles)
  std::vector<HloSharding> input_shardings, output_shardings;
};

// The number of devices the module's shardings are written for: its
// num_partitions when set, else the largest tile assignment (or maximal
// device + 1); 1 when it has no sharding.
int64_t ShardingDeviceCount(const HloModule& module);

// Propagates shardings in `module` (in place; parameters and outputs without
// a sharding may receive one, the rest becomes {replicated}) unless every
// instruction outside scalar computations (reducers) has one, then
// partitions it. Throws weft::Error when the shardings are written for
// another number of devices, or are manual on an entry parameter or output.
ShardedProgram CompileForDevices(HloModule& module, int64_t num_devices);

// Seeded inputs of the given shapes (see the file comment).
std::vector<HostTensor> RandomInputs(std::span<const Shape> shapes, uint64_t seed);

// Device `device`'s piece of `global` under `sharding`, shaped `local_shape`
// (the padded tile); floating-point padding is `pad`, other padding 0.
HostTensor ShardTensor(const HostTensor& global, const HloSharding& sharding, int64_t device,
                       const Shape& local_shape, double pad = 0);

// The inputs of every device: inputs_per_device[d][i] = ShardTensor(inputs[i], ...).
std::vector<std::vector<HostTensor>> ShardInputs(const ShardedProgram& program,
                                                 std::span<const HostTensor> inputs,
                                                 double pad = 0);

// Joins per-device pieces (pieces[d] from device d) into `global_shape`; a
// tile held by several devices is taken from the lowest device id.
HostTensor JoinTensor(std::span<const HostTensor> pieces, const HloSharding& sharding,
                      const Shape& global_shape);

// The whole tensor from every device's piece: an all-gather over `comm` (a
// collective: every device calls it, every device receives the tensor).
HostTensor GatherTensor(const HostTensor& piece, const HloSharding& sharding,
                        const Shape& global_shape, Communicator& comm);

// Runs the program on `cluster` (its device count must match) and returns the
// joined outputs; `stats` receives each device's ExecutorStats. Inputs are
// padded with `pad` (tests pass NaN: padding must never reach a result).
std::vector<HostTensor> RunSharded(const ShardedProgram& program,
                                   std::span<const HostTensor> inputs, LocalCluster& cluster,
                                   std::vector<ExecutorStats>* stats = nullptr,
                                   const ExecutorOptions& options = {}, double pad = 0);

// max|actual - expected| / max|expected| over the elements (0 when both are
// all zero; infinity when the shapes differ or a NaN / infinity is in one
// and not at the same place, with the same value, in the other).
double MaxRelativeError(const HostTensor& actual, const HostTensor& expected);

// The largest MaxRelativeError --check accepts: 1e-5 for f32, 1e-2 for
// bf16 / f16, 0 for integers and pred.
double CheckTolerance(PrimitiveType type);

// FNV-1a over the outputs' bytes, in order.
uint64_t OutputDigest(std::span<const HostTensor> outputs);

}  // namespace weft::runtime
