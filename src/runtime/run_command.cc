#include "weft/runtime/run_command.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <limits>
#include <random>
#include <set>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include "executor_eval.h"
#include "weft/analysis/loops.h"
#include "weft/analysis/memory_plan.h"
#include "weft/base/error.h"
#include "weft/base/memory.h"
#include "weft/compiler/compile.h"
#include "weft/hlo/custom_call_targets.h"
#include "weft/hlo/parser.h"
#include "weft/runtime/comm_mpi.h"
#include "weft/runtime/topology.h"

namespace weft::runtime {

using compiler::CompiledProgram;
using compiler::CompileForDevices;
using compiler::ShardingDeviceCount;

namespace {

// ---------------------------------------------------------------------------
// Shardings and leaves.

// ---------------------------------------------------------------------------
// Copying a box of elements between row-major arrays.

struct Box {
  std::vector<int64_t> start, extent;
};

void CopyBox(const std::byte* src, const std::vector<int64_t>& src_dims,
             const std::vector<int64_t>& src_start, std::byte* dst,
             const std::vector<int64_t>& dst_dims, const std::vector<int64_t>& dst_start,
             const std::vector<int64_t>& extent, int64_t elem) {
  const size_t rank = extent.size();
  for (int64_t e : extent) {
    if (e == 0) return;
  }
  if (rank == 0) {
    std::memcpy(dst, src, elem);
    return;
  }
  std::vector<int64_t> src_stride(rank, 1), dst_stride(rank, 1);
  for (size_t i = rank - 1; i > 0; --i) {
    src_stride[i - 1] = src_stride[i] * src_dims[i];
    dst_stride[i - 1] = dst_stride[i] * dst_dims[i];
  }
  const int64_t run = extent[rank - 1] * elem;
  std::vector<int64_t> idx(rank, 0);  // odometer over all dims but the last
  while (true) {
    int64_t s = 0, d = 0;
    for (size_t i = 0; i < rank; ++i) {
      s += (src_start[i] + idx[i]) * src_stride[i];
      d += (dst_start[i] + idx[i]) * dst_stride[i];
    }
    std::memcpy(dst + d * elem, src + s * elem, run);
    int64_t i = static_cast<int64_t>(rank) - 2;
    while (i >= 0 && ++idx[i] == extent[i]) idx[i--] = 0;
    if (i < 0) return;
  }
}

// ---------------------------------------------------------------------------
// The report.

std::string HumanBytes(int64_t bytes) {
  const double b = static_cast<double>(bytes);
  if (bytes < 1024) return fmt::format("{} B", bytes);
  if (b < 1024.0 * 1024) return fmt::format("{:.1f} KiB", b / 1024);
  if (b < 1024.0 * 1024 * 1024) return fmt::format("{:.1f} MiB", b / (1024.0 * 1024));
  return fmt::format("{:.2f} GiB", b / (1024.0 * 1024 * 1024));
}

// What one device reports; travels between ranks as int64 values.
struct DeviceReport {
  int64_t peak_bytes = 0, collective_bytes = 0, collective_calls = 0, instructions = 0;
  int64_t nanoseconds = 0;
  static constexpr int kFields = 5;

  static DeviceReport From(const ExecutorStats& s) {
    DeviceReport r;
    r.peak_bytes = s.peak_bytes;
    r.collective_bytes = s.collective_bytes();
    for (CollectiveKind kind :
         {CollectiveKind::kAllReduce, CollectiveKind::kAllGather, CollectiveKind::kReduceScatter,
          CollectiveKind::kAllToAll, CollectiveKind::kCollectivePermute}) {
      r.collective_calls += s.collectives.Calls(kind);
    }
    r.instructions = s.instructions;
    r.nanoseconds = static_cast<int64_t>(s.seconds * 1e9);
    return r;
  }
  std::vector<int64_t> Pack() const {
    return {peak_bytes, collective_bytes, collective_calls, instructions, nanoseconds};
  }
  static DeviceReport Unpack(const int64_t* v) {
    return DeviceReport{v[0], v[1], v[2], v[3], v[4]};
  }
};

void PrintRun(std::ostream& out, const RunCommandOptions& options, const CompiledProgram& p,
              std::string_view backend, const std::vector<DeviceReport>& devices,
              std::span<const HostTensor> outputs) {
  out << fmt::format("weft run {}: {} device{} ({}), seed {}; shardings {}\n", options.input,
                     p.num_devices, p.num_devices == 1 ? "" : "s", backend, options.seed,
                     p.propagated ? "completed by propagation" : "as written");
  auto print_leaves = [&](const char* title, const std::vector<std::string>& names,
                          const std::vector<Shape>& shapes, const std::vector<Shape>& locals,
                          const std::vector<HloSharding>& shardings) {
    out << title << "\n";
    for (size_t i = 0; i < names.size(); ++i) {
      out << fmt::format("  {:<16} {:<20} local {:<20} {}\n", names[i], shapes[i].ToString(),
                         locals[i].ToString(), shardings[i].ToString());
    }
  };
  print_leaves("inputs", p.input_names, p.input_shapes, p.local_input_shapes, p.input_shardings);
  print_leaves("outputs", p.output_names, p.output_shapes, p.local_output_shapes,
               p.output_shardings);
  out << fmt::format("{:>6}  {:>12}  {:>16}  {:>11}  {:>12}  {:>10}\n", "device", "peak memory",
                     "collective bytes", "collectives", "instructions", "time");
  DeviceReport total;
  for (size_t d = 0; d < devices.size(); ++d) {
    const DeviceReport& r = devices[d];
    out << fmt::format("{:>6}  {:>12}  {:>16}  {:>11}  {:>12}  {:>7.2f} ms\n", d,
                       HumanBytes(r.peak_bytes), HumanBytes(r.collective_bytes), r.collective_calls,
                       r.instructions, r.nanoseconds * 1e-6);
    total.peak_bytes = std::max(total.peak_bytes, r.peak_bytes);
    total.collective_bytes += r.collective_bytes;
  }
  out << fmt::format(
      "max peak memory {} ({} bytes); collective bytes sent, all devices: {} "
      "({} bytes)\n",
      HumanBytes(total.peak_bytes), total.peak_bytes, HumanBytes(total.collective_bytes),
      total.collective_bytes);
  out << fmt::format("output digest: {:016x}\n", OutputDigest(outputs));
}

// Compares against the unsharded module on one device; returns the exit code.
// Prints each output's error against `expected` and the verdict.
int CompareOutputs(std::ostream& out, const HloModule& module, const CompiledProgram& p,
                   std::span<const HostTensor> outputs, std::span<const HostTensor> expected,
                   std::string_view against, std::string_view differs) {
  WEFT_CHECK(expected.size() == outputs.size(),
             "internal: the reference run gave {} outputs, the sharded one {}", expected.size(),
             outputs.size());
  out << fmt::format("check against {}:\n", against);
  out << fmt::format("  {:<16} {:>16} {:>10}\n", "output", "max rel error", "tolerance");
  bool ok = true;
  for (size_t i = 0; i < outputs.size(); ++i) {
    const double error = MaxRelativeError(outputs[i], expected[i]);
    const double tolerance = CheckTolerance(expected[i].element_type(), NarrowestFloat(module));
    const bool good = error <= tolerance;
    ok = ok && good;
    out << fmt::format("  {:<16} {:>16.3e} {:>10.0e}  {}\n", p.output_names[i], error, tolerance,
                       good ? "ok" : "FAILED");
  }
  out << (ok ? std::string("check passed\n") : fmt::format("check FAILED: {}\n", differs));
  return ok ? 0 : kCheckFailedExitCode;
}

int CheckAgainstUnsharded(std::ostream& out, const HloModule& module, const CompiledProgram& p,
                          std::span<const HostTensor> inputs, std::span<const HostTensor> outputs,
                          const ExecutorOptions& options) {
  // The unsharded module runs on one device: the partition and replica
  // counts XLA's SPMD modules declare describe the partitioned program.
  std::unique_ptr<HloModule> one_device;
  if (module.num_partitions() != 1 || module.replica_count() != 1) {
    one_device = ParseHloModule(module.ToString());
    one_device->set_num_partitions(1);
    one_device->set_replica_count(1);
  }
  Executor reference(one_device ? *one_device : module, options);
  const std::vector<HostTensor> expected =
      reference.Run(std::vector<HostTensor>(inputs.begin(), inputs.end()));
  return CompareOutputs(out, module, p, outputs, expected, "the unsharded module on one device",
                        "the sharded result differs from the unsharded one");
}

constexpr std::string_view kAgainstReplicated =
    "the module with its automatic parts replicated (its manual regions run as written)";
constexpr std::string_view kDiffersFromReplicated =
    "the sharded result differs from the run with the automatic parts replicated";

// What the module may hold but `weft run` cannot compute: complex values,
// and infeed / outfeed (no host feeds or drains the devices). Refused before
// anything is compiled, naming the first such instruction.
void RefuseWhatRunCannotCompute(const HloModule& module, const std::string& path) {
  for (const HloComputation* c : module.computations()) {
    for (const HloInstruction* instr : c->instructions()) {
      const HloOpcode op = instr->opcode();
      if (op == HloOpcode::kInfeed || op == HloOpcode::kOutfeed) {
        Fail(
            "{}: {}: weft run has no host to {} the devices; give the values as entry "
            "parameters (weft run makes random inputs) or results instead",
            path, instr->Describe(), op == HloOpcode::kInfeed ? "feed" : "drain");
      }
      for (const Shape& leaf : instr->shape().Leaves()) {
        if (!IsComplex(leaf.element_type())) continue;
        Fail(
            "{}: {} has {}: weft run computes with real and integer types only; complex (c64) "
            "values are parsed but not run",
            path, instr->Describe(), instr->shape().ToString());
      }
    }
  }
}

std::unique_ptr<HloModule> ReadModule(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  WEFT_CHECK(in.good(), "cannot read '{}'; give the path of an HLO text module", path);
  std::stringstream text;
  text << in.rdbuf();
  HloParseOptions parse;
  parse.source_name = path;
  std::unique_ptr<HloModule> module = ParseHloModule(text.str(), parse);
  RefuseWhatRunCannotCompute(*module, path);
  return module;
}

uint64_t Fnv1a(uint64_t hash, const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) hash = (hash ^ p[i]) * 0x100000001b3ULL;
  return hash;
}

// ---------------------------------------------------------------------------
// Options and memory.

ExecutorOptions MakeExecutorOptions(const RunCommandOptions& options) {
  WEFT_CHECK(options.max_iterations >= 1,
             "{} must be at least 1 (the iterations one while loop may run), got {}",
             kMaxIterationsFlag, options.max_iterations);
  ExecutorOptions exec;
  exec.max_while_iterations = options.max_iterations;
  return exec;
}

// Ranks of this job on this machine (Open MPI, MPICH/Hydra, Slurm); 1 when
// none says.
int64_t LocalRanks() {
  for (const char* name :
       {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "SLURM_NTASKS_PER_NODE"}) {
    if (const char* value = std::getenv(name)) {
      const long long n = std::atoll(value);
      if (n >= 1) return n;
    }
  }
  return 1;
}

int64_t SatAdd(int64_t a, int64_t b) {
  const std::optional<int64_t> r = CheckedAdd(a, b);
  return r ? *r : std::numeric_limits<int64_t>::max();
}

int64_t SatMul(int64_t a, int64_t b) {
  const std::optional<int64_t> r = CheckedMul(a, b);
  return r ? *r : std::numeric_limits<int64_t>::max();
}

// The instructions the memory plan steps through (it runs every while trip
// by trip, twice), saturating. Throws weft::Error when a trip count cannot
// be derived, as the plan itself would.
int64_t PlannedSteps(const HloModule& program) {
  std::unordered_map<const HloComputation*, int64_t> runs;
  const std::vector<HloComputation*> order = program.MakeComputationPostOrder();
  runs[program.entry_computation()] = 1;
  int64_t steps = 0;
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    auto found = runs.find(*it);
    if (found == runs.end()) continue;
    const int64_t n = found->second;
    steps = SatAdd(steps, SatMul(n, (*it)->instruction_count()));
    for (const HloInstruction* instr : (*it)->instructions()) {
      if (instr->opcode() == HloOpcode::kWhile) {
        const int64_t trips = analysis::WhileTripCount(*instr);
        runs[instr->while_body()] = SatAdd(runs[instr->while_body()], SatMul(n, trips));
        runs[instr->while_condition()] =
            SatAdd(runs[instr->while_condition()], SatMul(n, SatAdd(trips, 1)));
      } else if (instr->opcode() == HloOpcode::kCall) {
        runs[instr->to_apply()] = SatAdd(runs[instr->to_apply()], n);
      }
    }
  }
  return SatMul(steps, 2);
}

// The peak of one device running `program`, from the memory plan (the
// executor's own liveness rules, analysis/memory_plan.h). When the plan
// cannot follow the program (a while whose trip count it cannot derive, or
// one too long to step through quickly), the largest single buffer: a lower
// bound. `shared`: entry parameters whose buffers are the caller's own
// inputs (borrowed, not copied): their bytes at the peak are `shared_bytes`.
struct DevicePeak {
  int64_t bytes = 0;
  int64_t shared_bytes = 0;
  bool planned = false;
  std::string why_not;
  std::vector<std::string> largest;  // "'b' f32[65536,65536] (16.00 GiB)"
};

DevicePeak PlanDevicePeak(const HloModule& program, const std::set<std::string>& shared) {
  // Enough for any real module in well under a second.
  constexpr int64_t kMaxPlannedSteps = 2'000'000;
  const std::string& entry = program.entry_computation()->name();
  DevicePeak peak;
  try {
    const int64_t steps = PlannedSteps(program);
    if (steps <= kMaxPlannedSteps) {
      analysis::MemoryPlanOptions options;
      options.executor_accounting = true;
      const analysis::MemoryPlan plan = analysis::PlanMemory(program, options);
      peak.bytes = plan.peak_bytes;
      peak.planned = true;
      for (const analysis::LiveBuffer& b : plan.live_at_peak) {
        if (b.computation == entry && shared.count(b.instruction)) {
          peak.shared_bytes = SatAdd(peak.shared_bytes, b.bytes);
        }
        if (peak.largest.size() < 3) {
          peak.largest.push_back(
              fmt::format("'{}' {} ({})", b.instruction, b.shape.ToString(), FormatBytes(b.bytes)));
        }
      }
      return peak;
    }
    peak.why_not = fmt::format("its loops run {} steps, too many to step through", steps / 2);
  } catch (const Error& e) {
    peak.why_not = e.what();
  }
  const HloInstruction* largest = nullptr;
  for (const HloComputation* c : program.computations()) {
    for (const HloInstruction* instr : c->instructions()) {
      if (!instr->shape().IsArray()) continue;
      if (largest == nullptr || instr->shape().ByteSize() > largest->shape().ByteSize()) {
        largest = instr;
      }
    }
  }
  if (largest != nullptr) {
    peak.bytes = largest->shape().ByteSize();
    if (largest->parent()->name() == entry && shared.count(largest->name())) {
      peak.shared_bytes = peak.bytes;
    }
    peak.largest.push_back(fmt::format("'{}' {} ({})", largest->name(), largest->shape().ToString(),
                                       FormatBytes(peak.bytes)));
  }
  return peak;
}

int64_t LeafBytes(std::span<const Shape> shapes) {
  int64_t total = 0;
  for (const Shape& s : shapes) total = SatAdd(total, s.ByteSize());
  return total;
}

// ---------------------------------------------------------------------------
// The two backends.

int RunOnThreads(const RunCommandOptions& options, std::ostream& out) {
  std::unique_ptr<HloModule> module = ReadModule(options.input);
  int64_t n = options.num_devices;
  if (n == 0) {
    n = ShardingDeviceCount(*module);
    if (n == 1) n = Topology::Global().num_devices();
  }
  const CompiledProgram program = CompileForDevices(*module, {.num_devices = n});
  // Before anything is allocated: all n devices live in this process.
  CheckRunFitsInMemory(EstimateRunMemory(*module, program, n, options.check), PhysicalMemoryBytes(),
                       options.input);
  const std::vector<HostTensor> inputs =
      RandomInputs(program.input_shapes, options.seed, InputIntegerRanges(*module));
  LocalCluster cluster(n);
  std::vector<ExecutorStats> stats;
  const ExecutorOptions exec_options = MakeExecutorOptions(options);
  const std::vector<HostTensor> outputs =
      RunSharded(program, inputs, cluster, &stats, exec_options);
  std::vector<DeviceReport> reports;
  for (const ExecutorStats& s : stats) reports.push_back(DeviceReport::From(s));
  PrintRun(out, options, program, "threads", reports, outputs);
  if (!options.check) return 0;
  if (!HasManualRegions(*module)) {
    return CheckAgainstUnsharded(out, *module, program, inputs, outputs, exec_options);
  }
  std::unique_ptr<HloModule> replicated = ParseHloModule(module->ToString());
  ReplicateOutsideManualRegions(*replicated);
  const CompiledProgram reference = CompileForDevices(*replicated, {.num_devices = n});
  const std::vector<HostTensor> expected =
      RunSharded(reference, inputs, cluster, nullptr, exec_options);
  return CompareOutputs(out, *module, program, outputs, expected, kAgainstReplicated,
                        kDiffersFromReplicated);
}

// One rank's part; every rank runs it.
int RunOnRank(const RunCommandOptions& options, Communicator& comm, std::ostream& out) {
  const int64_t n = comm.num_devices();
  const int64_t rank = comm.device_id();
  WEFT_CHECK(options.num_devices == 0 || options.num_devices == n,
             "--num-devices {} does not match the {} ranks mpirun started; drop it or run "
             "mpirun -np {}",
             options.num_devices, n, options.num_devices);
  std::unique_ptr<HloModule> module = ReadModule(options.input);
  const CompiledProgram program = CompileForDevices(*module, {.num_devices = n});
  // Before anything is allocated: one device per rank, and every rank on
  // this machine holds as much (every rank computes the same refusal).
  CheckRunFitsInMemory(EstimateRunMemory(*module, program, 1, options.check, LocalRanks()),
                       PhysicalMemoryBytes(), options.input);
  // Before any compute: the same program and the same inputs everywhere.
  comm.VerifySameHash(std::hash<std::string>{}(program.program->ToString()),
                      fmt::format("program hash of module '{}'", program.program->name()));
  comm.VerifySameHash(Fnv1a(0xcbf29ce484222325ULL, &options.seed, sizeof(options.seed)) ^
                          static_cast<uint64_t>(options.check),
                      "weft run's --seed / --check");

  const std::vector<HostTensor> inputs =
      RandomInputs(program.input_shapes, options.seed, InputIntegerRanges(*module));
  ExecutorStats stats;
  const ExecutorOptions exec_options = MakeExecutorOptions(options);
  // This rank's piece of every input, run, and the outputs gathered (every
  // rank takes part; rank 0 uses them).
  auto run_here = [&](const CompiledProgram& run, ExecutorStats* run_stats) {
    std::vector<HostTensor> mine;
    for (size_t i = 0; i < inputs.size(); ++i) {
      mine.push_back(
          ShardTensor(inputs[i], run.input_shardings[i], rank, run.local_input_shapes[i]));
    }
    const std::vector<HostTensor> local =
        RunOnMpiRank(*run.program, std::move(mine), comm, run_stats, exec_options);
    std::vector<HostTensor> joined;
    for (size_t i = 0; i < local.size(); ++i) {
      joined.push_back(GatherTensor(local[i], run.output_shardings[i], run.output_shapes[i], comm));
    }
    return joined;
  };
  const std::vector<HostTensor> outputs = run_here(program, &stats);
  // A module with manual regions is checked against its automatic parts
  // replicated, a run every rank takes part in.
  std::vector<HostTensor> replicated_outputs;
  const bool manual = options.check && HasManualRegions(*module);
  if (manual) {
    std::unique_ptr<HloModule> replicated = ParseHloModule(module->ToString());
    ReplicateOutsideManualRegions(*replicated);
    replicated_outputs =
        run_here(CompileForDevices(*replicated, {.num_devices = n}), /*run_stats=*/nullptr);
  }
  const std::vector<int64_t> packed = comm.AllGather(DeviceReport::From(stats).Pack());
  int code = 0;
  if (rank == 0) {
    std::vector<DeviceReport> reports;
    for (int64_t d = 0; d < n; ++d) {
      reports.push_back(DeviceReport::Unpack(packed.data() + d * DeviceReport::kFields));
    }
    PrintRun(out, options, program, "mpi", reports, outputs);
    if (manual) {
      code = CompareOutputs(out, *module, program, outputs, replicated_outputs, kAgainstReplicated,
                            kDiffersFromReplicated);
    } else if (options.check) {
      code = CheckAgainstUnsharded(out, *module, program, inputs, outputs, exec_options);
    }
    out.flush();
  }
  // Every rank exits with rank 0's verdict.
  const std::vector<int64_t> verdict = comm.AllReduce(std::vector<int64_t>{code}, ReduceOp::kMax);
  return static_cast<int>(verdict[0]);
}

}  // namespace

// ---------------------------------------------------------------------------

bool HasManualRegions(const HloModule& module) {
  for (const HloComputation* c : module.computations()) {
    for (const HloInstruction* instr : c->instructions()) {
      const std::string& target = instr->attrs().custom_call_target;
      if (instr->opcode() == HloOpcode::kCustomCall &&
          (target == kFullToShardTarget || target == kShardToFullTarget)) {
        return true;
      }
    }
  }
  return false;
}

void ReplicateOutsideManualRegions(HloModule& module) {
  auto has_manual_leaf = [](const HloSharding& s) {
    if (!s.IsTuple()) return s.IsManual();
    return std::any_of(s.tuple_elements().begin(), s.tuple_elements().end(),
                       [](const HloSharding& e) { return e.IsManual(); });
  };
  auto is_target = [](const HloInstruction* instr, const char* target) {
    return instr->opcode() == HloOpcode::kCustomCall && instr->attrs().custom_call_target == target;
  };
  // Region edges and how they cut: kept.
  std::unordered_set<const HloInstruction*> keep;
  for (const HloComputation* c : module.computations()) {
    for (const HloInstruction* instr : c->instructions()) {
      if (is_target(instr, kFullToShardTarget)) {
        keep.insert(instr);
        keep.insert(instr->operand(0));
      } else if (is_target(instr, kShardToFullTarget) ||
                 (instr->has_sharding() && has_manual_leaf(*instr->sharding()))) {
        keep.insert(instr);
      }
    }
  }
  for (HloComputation* c : module.computations()) {
    for (HloInstruction* instr : c->instructions()) {
      if (!instr->has_sharding() || keep.count(instr)) continue;
      const Shape& shape = instr->shape();
      instr->set_sharding(shape.IsTuple() ? HloSharding::Tuple(std::vector<HloSharding>(
                                                shape.LeafCount(), HloSharding::Replicate()))
                                          : HloSharding::Replicate());
    }
  }
}

RunMemoryEstimate EstimateRunMemory(const HloModule& module, const CompiledProgram& program,
                                    int64_t devices, bool check, int64_t mpi_ranks_here) {
  RunMemoryEstimate e;
  e.devices = devices;
  e.processes = std::max<int64_t>(1, mpi_ranks_here);
  // The devices borrow (share) the global inputs they take whole; tiled
  // inputs are copied into shards, which the device peak counts.
  std::set<std::string> shared;
  const HloComputation* local_entry = program.program->entry_computation();
  for (const HloInstruction* p : local_entry->parameter_instructions()) {
    if (p->shape().IsArray() && !(p->has_sharding() && p->sharding()->IsTiled())) {
      shared.insert(p->name());
    }
  }
  const DevicePeak peak = PlanDevicePeak(*program.program, shared);
  e.device_peak_bytes = peak.bytes;
  e.device_shared_bytes = std::min(peak.shared_bytes, peak.bytes);
  e.device_peak_planned = peak.planned;
  e.not_planned_reason = peak.why_not;
  e.largest_buffers = peak.largest;
  e.input_bytes = LeafBytes(program.input_shapes);
  // Joined outputs: a tiled one is a new tensor, another is a device's own
  // (already in its peak). Under MPI the pieces are all-gathered first.
  for (size_t i = 0; i < program.output_shapes.size(); ++i) {
    const int64_t global = program.output_shapes[i].ByteSize();
    const bool tiled = program.output_shardings[i].IsTiled();
    if (mpi_ranks_here > 0) {
      // GatherTensor: the all-gathered bytes and a copy per piece, then the
      // joined tensor (a tiled one; otherwise one of the pieces).
      const int64_t pieces = SatMul(program.num_devices, program.local_output_shapes[i].ByteSize());
      e.output_bytes = SatAdd(e.output_bytes, SatAdd(tiled ? global : 0, SatMul(2, pieces)));
    } else if (tiled) {
      e.output_bytes = SatAdd(e.output_bytes, global);
    }
  }
  const int64_t running =
      SatAdd(SatAdd(e.input_bytes, e.output_bytes),
             SatMul(devices, std::max<int64_t>(0, peak.bytes - peak.shared_bytes)));
  int64_t checking = 0;
  if (check) {
    // The unsharded module on one device borrows every input.
    std::set<std::string> all;
    for (const HloInstruction* p : module.entry_computation()->parameter_instructions()) {
      all.insert(p->name());
    }
    const DevicePeak reference = PlanDevicePeak(module, all);
    e.check_peak_bytes = std::max<int64_t>(0, reference.bytes - reference.shared_bytes);
    checking = SatAdd(SatAdd(e.input_bytes, LeafBytes(program.output_shapes)), e.check_peak_bytes);
  }
  e.total_bytes = SatMul(e.processes, std::max(running, checking));
  return e;
}

void CheckRunFitsInMemory(const RunMemoryEstimate& e, int64_t available_bytes,
                          std::string_view input) {
  if (available_bytes <= 0 || e.total_bytes <= available_bytes) return;
  const int64_t own = e.device_peak_bytes - e.device_shared_bytes;
  std::string device =
      fmt::format("{} device{} x {}: ", e.devices, e.devices == 1 ? "" : "s", FormatBytes(own));
  if (e.device_peak_planned) {
    device += fmt::format("the memory plan's peak {} of the per-device program",
                          FormatBytes(e.device_peak_bytes));
    if (e.device_shared_bytes > 0) {
      device += fmt::format(" less {} of inputs it shares", FormatBytes(e.device_shared_bytes));
    }
    if (!e.largest_buffers.empty()) {
      device += fmt::format(" (largest at the peak: {})", fmt::join(e.largest_buffers, ", "));
    }
  } else {
    device += fmt::format(
        "at least the largest buffer of the per-device program{}, as the memory plan could not "
        "follow the program ({})",
        e.largest_buffers.empty() ? std::string()
                                  : fmt::format(", {}", fmt::join(e.largest_buffers, ", ")),
        e.not_planned_reason);
  }
  std::string holds = fmt::format("inputs {}; {}; joined outputs {}", FormatBytes(e.input_bytes),
                                  device, FormatBytes(e.output_bytes));
  if (e.check_peak_bytes > 0) {
    holds += fmt::format("; or, for --check, the unsharded module's own buffers {}",
                         FormatBytes(e.check_peak_bytes));
  }
  if (e.processes > 1) holds += fmt::format("; times {} ranks on this machine", e.processes);
  Fail(
      "weft run {}: the run needs {}{} ({} bytes) at once but this machine has {} ({} bytes) of "
      "physical memory. It would hold: {}. Nothing was allocated. Make the largest buffers "
      "smaller (their shapes in {}), or spread the devices over machines (mpirun -np N weft "
      "run, one rank per machine){}",
      input, e.device_peak_planned ? "about " : "at least ", FormatBytes(e.total_bytes),
      e.total_bytes, FormatBytes(available_bytes), available_bytes, holds, input,
      e.check_peak_bytes > 0 ? ", or drop --check" : "");
}

HostTensor GatherTensor(const HostTensor& piece, const HloSharding& sharding,
                        const Shape& global_shape, Communicator& comm) {
  const int64_t n = comm.num_devices();
  const int64_t bytes = piece.byte_size();
  std::vector<std::byte> all(static_cast<size_t>(bytes * n));
  comm.AllGather(piece.raw_data(), all.data(), bytes, DataType::kU8);
  std::vector<HostTensor> pieces;
  for (int64_t d = 0; d < n; ++d) {
    HostTensor t = HostTensor::Uninitialized(piece.shape());
    std::memcpy(t.mutable_raw_data(), all.data() + d * bytes, static_cast<size_t>(bytes));
    pieces.push_back(std::move(t));
  }
  return JoinTensor(pieces, sharding, global_shape);
}

namespace {

// The largest start index `user` admits through operand `k` (-1: not an
// index there): the indexed extent less the slice, over the dims it indexes.
int64_t IndexExtent(const HloInstruction& user, int64_t k) {
  const HloAttributes& a = user.attrs();
  switch (user.opcode()) {
    case HloOpcode::kDynamicSlice:
      if (k == 0) return -1;
      return user.operand(0)->shape().dimensions(k - 1) - a.dynamic_slice_sizes.at(k - 1);
    case HloOpcode::kDynamicUpdateSlice:
      if (k < 2) return -1;
      return user.operand(0)->shape().dimensions(k - 2) -
             user.operand(1)->shape().dimensions(k - 2);
    case HloOpcode::kGather: {
      if (k != 1) return -1;
      int64_t most = 0;
      for (size_t i = 0; i < a.gather.start_index_map.size(); ++i) {
        const int64_t d = a.gather.start_index_map[i];
        most = std::max(most, user.operand(0)->shape().dimensions(d) - a.gather_slice_sizes.at(d));
      }
      return most;
    }
    case HloOpcode::kScatter: {
      const int64_t operands = (user.operand_count() - 1) / 2;
      if (k != operands) return -1;
      int64_t most = 0;
      for (int64_t d : a.scatter.scatter_dims_to_operand_dims) {
        most = std::max(most, user.operand(0)->shape().dimensions(d));
      }
      return most;
    }
    case HloOpcode::kConditional:  // a branch index: N branches
      return k == 0 ? static_cast<int64_t>(user.called_computations().size()) - 1 : -1;
    default:
      return -1;
  }
}

// Whether `op` passes its (first) operand's values through unchanged.
bool KeepsValues(HloOpcode op) {
  return op == HloOpcode::kConvert || op == HloOpcode::kReshape || op == HloOpcode::kBroadcast ||
         op == HloOpcode::kSlice || op == HloOpcode::kConcatenate || op == HloOpcode::kCopy ||
         op == HloOpcode::kTranspose;
}

}  // namespace

std::vector<IntegerRange> InputIntegerRanges(const HloModule& module) {
  std::vector<IntegerRange> out;
  const HloComputation* entry = module.entry_computation();
  if (entry == nullptr) return out;
  for (const HloInstruction* p : entry->parameter_instructions()) {
    const size_t leaves = p->shape().Leaves().size();
    IntegerRange r;
    if (p->shape().IsArray() && !IsFloatingPoint(p->shape().element_type()) &&
        p->shape().element_type() != PrimitiveType::kPred) {
      int64_t most = -1;
      std::vector<const HloInstruction*> stack = {p};
      std::unordered_set<const HloInstruction*> seen;
      while (!stack.empty()) {
        const HloInstruction* v = stack.back();
        stack.pop_back();
        if (!seen.insert(v).second) continue;
        for (const HloInstruction* u : v->users()) {
          for (int64_t k = 0; k < u->operand_count(); ++k) {
            if (u->operand(k) == v) most = std::max(most, IndexExtent(*u, k));
          }
          if (KeepsValues(u->opcode())) stack.push_back(u);
        }
      }
      if (most >= 0) r = IntegerRange{-2, most + 2};
    }
    for (size_t i = 0; i < leaves; ++i) out.push_back(r);
  }
  return out;
}

std::vector<HostTensor> RandomInputs(std::span<const Shape> shapes, uint64_t seed,
                                     std::span<const IntegerRange> ranges) {
  std::vector<HostTensor> out;
  for (size_t i = 0; i < shapes.size(); ++i) {
    // One stream per leaf, independent of the other leaves' sizes.
    std::seed_seq seq{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32),
                      static_cast<uint32_t>(i), 0x77656674u};
    std::mt19937_64 rng(seq);
    const Shape& shape = shapes[i];
    WEFT_CHECK(shape.IsArray(), "internal: input {} is not an array", i);
    // Written in place (as FromDoubles stores each value): no staging copy
    // of 8 bytes per element beside the tensor.
    HostTensor t = HostTensor::Uninitialized(shape);
    const PrimitiveType type = shape.element_type();
    void* data = t.mutable_raw_data();
    const int64_t n = shape.ElementsCount();
    if (type == PrimitiveType::kToken) {
      // No bytes to fill.
    } else if (IsFloatingPoint(type)) {
      std::normal_distribution<double> normal(0.0, 1.0);
      for (int64_t k = 0; k < n; ++k) exec::StoreDouble(type, data, k, normal(rng));
    } else if (type == PrimitiveType::kPred) {
      std::bernoulli_distribution coin(0.5);
      for (int64_t k = 0; k < n; ++k) exec::StoreDouble(type, data, k, coin(rng) ? 1 : 0);
    } else {
      IntegerRange r = i < ranges.size() ? ranges[i] : IntegerRange{};
      if (!IsSignedInteger(type)) r.lo = std::max<int64_t>(r.lo, 0);  // unsigned: no negatives
      std::uniform_int_distribution<int64_t> uniform(r.lo, r.hi);
      for (int64_t k = 0; k < n; ++k) {
        exec::StoreDouble(type, data, k, static_cast<double>(uniform(rng)));
      }
    }
    out.push_back(std::move(t));
  }
  return out;
}

HostTensor ShardTensor(const HostTensor& global, const HloSharding& sharding, int64_t device,
                       const Shape& local_shape, double pad) {
  if (!sharding.IsTiled()) {
    WEFT_CHECK(local_shape == global.shape(),
               "internal: an unsplit input of shape {} has local shape {}",
               global.shape().ToString(), local_shape.ToString());
    return global;
  }
  const std::vector<int64_t>& dims = global.dimensions();
  const std::vector<int64_t> tile = sharding.TileShape(dims);
  WEFT_CHECK(
      local_shape.dimensions() == tile && local_shape.element_type() == global.element_type(),
      "internal: input {} under {} should be {} per device, the program takes {}",
      global.shape().ToString(), sharding.ToString(), fmt::join(tile, ","), local_shape.ToString());
  const std::vector<int64_t> offset = sharding.TileOffsetForDevice(dims, device);
  const std::vector<int64_t> extent = sharding.TileShapeForDevice(dims, device);
  HostTensor local = HostTensor::Uninitialized(local_shape);
  if (extent != tile) {
    const double fill = IsFloatingPoint(global.element_type()) ? pad : 0;
    for (int64_t k = 0; k < local_shape.ElementsCount(); ++k) {
      exec::StoreDouble(local_shape.element_type(), local.mutable_raw_data(), k, fill);
    }
  }
  CopyBox(static_cast<const std::byte*>(global.raw_data()), dims, offset,
          static_cast<std::byte*>(local.mutable_raw_data()), tile,
          std::vector<int64_t>(tile.size(), 0), extent, ByteWidth(global.element_type()));
  return local;
}

std::vector<std::vector<HostTensor>> ShardInputs(const CompiledProgram& program,
                                                 std::span<const HostTensor> inputs, double pad) {
  WEFT_CHECK(inputs.size() == program.input_shapes.size(), "the program takes {} inputs, got {}",
             program.input_shapes.size(), inputs.size());
  std::vector<std::vector<HostTensor>> out(program.num_devices);
  for (int64_t d = 0; d < program.num_devices; ++d) {
    for (size_t i = 0; i < inputs.size(); ++i) {
      WEFT_CHECK(inputs[i].shape() == program.input_shapes[i], "input {} ('{}') must be {}, got {}",
                 i, program.input_names[i], program.input_shapes[i].ToString(),
                 inputs[i].shape().ToString());
      out[d].push_back(ShardTensor(inputs[i], program.input_shardings[i], d,
                                   program.local_input_shapes[i], pad));
    }
  }
  return out;
}

HostTensor JoinTensor(std::span<const HostTensor> pieces, const HloSharding& sharding,
                      const Shape& global_shape) {
  const int64_t n = static_cast<int64_t>(pieces.size());
  if (!sharding.IsTiled()) {
    const int64_t source = sharding.IsMaximal() ? sharding.device() : 0;
    WEFT_CHECK(source < n && pieces[source].shape() == global_shape,
               "internal: output {} under {} has no whole copy on device {}",
               global_shape.ToString(), sharding.ToString(), source);
    return pieces[source];
  }
  const std::vector<int64_t>& dims = global_shape.dimensions();
  const std::vector<int64_t> tile = sharding.TileShape(dims);
  HostTensor global(global_shape);
  std::set<std::vector<int64_t>> joined;
  for (int64_t d = 0; d < n; ++d) {
    if (!sharding.UsesDevice(d) || !joined.insert(sharding.TileIndexForDevice(d)).second) continue;
    WEFT_CHECK(pieces[d].dimensions() == tile,
               "internal: device {}'s output piece is {}, the tile of {} under {} is [{}]", d,
               pieces[d].shape().ToString(), global_shape.ToString(), sharding.ToString(),
               fmt::join(tile, ","));
    CopyBox(static_cast<const std::byte*>(pieces[d].raw_data()), tile,
            std::vector<int64_t>(tile.size(), 0),
            static_cast<std::byte*>(global.mutable_raw_data()), dims,
            sharding.TileOffsetForDevice(dims, d), sharding.TileShapeForDevice(dims, d),
            ByteWidth(global_shape.element_type()));
  }
  return global;
}

std::vector<HostTensor> RunSharded(const CompiledProgram& program,
                                   std::span<const HostTensor> inputs, LocalCluster& cluster,
                                   std::vector<ExecutorStats>* stats,
                                   const ExecutorOptions& options, double pad) {
  WEFT_CHECK(cluster.num_devices() == program.num_devices,
             "the program is partitioned for {} devices but the cluster has {}",
             program.num_devices, cluster.num_devices());
  const std::vector<std::vector<HostTensor>> locals =
      RunOnDevices(*program.program, ShardInputs(program, inputs, pad), cluster, stats, options);
  std::vector<HostTensor> outputs;
  for (size_t i = 0; i < program.output_shapes.size(); ++i) {
    std::vector<HostTensor> pieces;
    for (const std::vector<HostTensor>& device : locals) pieces.push_back(device.at(i));
    outputs.push_back(JoinTensor(pieces, program.output_shardings[i], program.output_shapes[i]));
  }
  return outputs;
}

double MaxRelativeError(const HostTensor& actual, const HostTensor& expected) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  if (actual.shape() != expected.shape()) return kInf;
  if (actual.element_type() == PrimitiveType::kToken) return 0;  // tokens hold nothing
  const std::vector<double> a = actual.ToDoubles();
  const std::vector<double> b = expected.ToDoubles();
  double max_diff = 0, max_expected = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(a[i]) || !std::isfinite(b[i])) {
      const bool same = (std::isnan(a[i]) && std::isnan(b[i])) || a[i] == b[i];
      if (!same) return kInf;
      continue;
    }
    max_diff = std::max(max_diff, std::abs(a[i] - b[i]));
    max_expected = std::max(max_expected, std::abs(b[i]));
  }
  if (max_diff == 0) return 0;
  return max_expected == 0 ? kInf : max_diff / max_expected;
}

double CheckTolerance(PrimitiveType type, PrimitiveType narrowest_float) {
  auto of = [](PrimitiveType t) {
    switch (t) {
      case PrimitiveType::kF64:
        return 1e-10;
      case PrimitiveType::kF32:
        return 1e-5;
      case PrimitiveType::kBF16:
      case PrimitiveType::kF16:
        return 1e-2;
      default:
        return 0.0;
    }
  };
  if (!IsFloatingPoint(type)) return of(type);
  return std::max(of(type), IsFloatingPoint(narrowest_float) ? of(narrowest_float) : 0.0);
}

PrimitiveType NarrowestFloat(const HloModule& module) {
  PrimitiveType narrowest = PrimitiveType::kF64;
  for (const HloComputation* c : module.computations()) {
    for (const HloInstruction* instr : c->instructions()) {
      for (const Shape& leaf : instr->shape().Leaves()) {
        const PrimitiveType t = leaf.element_type();
        if (IsFloatingPoint(t) && ByteWidth(t) < ByteWidth(narrowest)) narrowest = t;
      }
    }
  }
  return narrowest;
}

uint64_t OutputDigest(std::span<const HostTensor> outputs) {
  uint64_t hash = 0xcbf29ce484222325ULL;
  for (const HostTensor& t : outputs) {
    hash = Fnv1a(hash, t.raw_data(), static_cast<size_t>(t.byte_size()));
  }
  return hash;
}

int RunRunCommand(const RunCommandOptions& options) {
  std::ostream& out = options.out != nullptr ? *options.out : std::cout;
  WEFT_CHECK(options.num_devices >= 0 && options.num_devices <= kMaxDevices,
             "--num-devices must be between 1 and {} (or 0: from the module), got {}", kMaxDevices,
             options.num_devices);
  MakeExecutorOptions(options);  // checks --max-iterations before anything runs
  if (!Topology::InsideMpi()) return RunOnThreads(options, out);
  int code = 0;
  const int aborted = RunMpiMain([&](Communicator& comm) { code = RunOnRank(options, comm, out); });
  return aborted != 0 ? aborted : code;
}

}  // namespace weft::runtime
