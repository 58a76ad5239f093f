#include "weft/runtime/run_command.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <limits>
#include <unordered_map>
#include <unordered_set>

#include "executor_eval.h"
#include "weft/base/error.h"
#include "weft/base/memory.h"
#include "weft/compiler/block_scaled_dot.h"
#include "weft/compiler/compile.h"
#include "weft/hlo/block_scaled_dot.h"
#include "weft/hlo/custom_call_targets.h"
#include "weft/hlo/parser.h"
#include "weft/runtime/comm_mpi.h"
#include "weft/runtime/config.h"
#include "weft/runtime/topology.h"

namespace weft::runtime {

using compiler::CompiledProgram;
using compiler::CompileForDevices;
using compiler::ShardingDeviceCount;

namespace {

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
  const int64_t longest_sum = LongestSum(module);
  for (size_t i = 0; i < outputs.size(); ++i) {
    const double error = MaxRelativeError(outputs[i], expected[i]);
    const double tolerance =
        CheckTolerance(expected[i].element_type(), NarrowestFloat(module), longest_sum);
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
  // Block-scaled dots run as the compiler expands them (as in the sharded
  // program).
  std::unique_ptr<HloModule> one_device;
  const bool expand = HasBlockScaledDot(module);
  if (module.num_partitions() != 1 || module.replica_count() != 1 || expand) {
    one_device = ParseHloModule(module.ToString());
    one_device->set_num_partitions(1);
    one_device->set_replica_count(1);
    if (expand) compiler::ExpandBlockScaledDots(*one_device);
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
      if (op == HloOpcode::kSend || op == HloOpcode::kRecv) {
        Fail(
            "{}: {}: weft run has no peer program to {} (send/recv pair two programs); give "
            "the values as entry parameters or results instead",
            path, instr->Describe(), op == HloOpcode::kSend ? "send to" : "receive from");
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
  std::unique_ptr<HloModule> module = ParseHloModuleFile(path);
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

// ---------------------------------------------------------------------------
// The two backends.

int RunOnThreads(const RunCommandOptions& options, std::ostream& out) {
  std::unique_ptr<HloModule> module = ReadModule(options.input);
  int64_t n = options.num_devices.value_or(0);
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
  WEFT_CHECK(!options.num_devices || *options.num_devices == n,
             "--num-devices {} does not match the {} ranks mpirun started; drop it or run "
             "mpirun -np {}",
             options.num_devices.value_or(0), n, options.num_devices.value_or(0));
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
      mine.push_back(ShardTensor(inputs[i], run.input_shardings[i], rank, run.local_input_shapes[i],
                                 /*pad=*/0, run.num_devices));
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
  // Entry values every device holds its own of (a manual parameter or
  // result) are a manual region without the conversions.
  const HloComputation* entry = module.entry_computation();
  std::vector<const HloInstruction*> ends(entry->parameter_instructions().begin(),
                                          entry->parameter_instructions().end());
  ends.push_back(entry->root_instruction());
  for (const HloInstruction* end : ends) {
    if (!end->has_sharding()) continue;
    const HloSharding& s = *end->sharding();
    if (s.IsManualOrPartlyManual() ||
        std::any_of(s.tuple_elements().begin(), s.tuple_elements().end(),
                    [](const HloSharding& e) { return e.IsManualOrPartlyManual(); })) {
      return true;
    }
  }
  for (const HloComputation* c : module.computations()) {
    for (const HloInstruction* instr : c->instructions()) {
      const std::string& target = instr->attrs().custom_call_target;
      if (instr->opcode() == HloOpcode::kCustomCall &&
          (target == kFullToShardTarget || target == kShardToFullTarget)) {
        return true;
      }
      // A cross-partition all-reduce sums the devices' values as written:
      // a manual region of one instruction.
      if (instr->opcode() == HloOpcode::kAllReduce && instr->attrs().channel_id) return true;
    }
  }
  return false;
}

namespace {

// A partly manual leaf with its automatic dims undone: the manual subgroup
// kept, every device of a manual group holding the group's whole piece.
HloSharding ReplicatedWithinManualGroups(const HloSharding& s) {
  if (s.IsTuple()) {
    std::vector<HloSharding> leaves;
    for (const HloSharding& e : s.tuple_elements())
      leaves.push_back(ReplicatedWithinManualGroups(e));
    return HloSharding::Tuple(std::move(leaves));
  }
  const int64_t manual = s.SubgroupManualDim();
  if (manual < 0) return HloSharding::Replicate();
  const TileAssignment& ta = s.tile_assignment();
  std::vector<int64_t> perm = {manual};
  for (int64_t d = 0; d < ta.num_dims(); ++d) {
    if (d != manual) perm.push_back(d);
  }
  std::vector<int64_t> dims(s.TiledDataRank(), 1);
  dims.push_back(ta.dim(manual));
  dims.push_back(ta.num_elements() / ta.dim(manual));
  return HloSharding::Subgroup(ta.Transpose(perm).Reshape(std::move(dims)),
                               {SubgroupType::kManual, SubgroupType::kReplicated});
}

bool HasManualLeaf(const HloSharding& s) {
  if (!s.IsTuple()) return s.IsManual();
  return std::any_of(s.tuple_elements().begin(), s.tuple_elements().end(),
                     [](const HloSharding& e) { return e.IsManual(); });
}

bool HasPartlyManualLeaf(const HloSharding& s) {
  if (!s.IsTuple()) return s.SubgroupManualDim() >= 0;
  return std::any_of(s.tuple_elements().begin(), s.tuple_elements().end(),
                     [](const HloSharding& e) { return e.SubgroupManualDim() >= 0; });
}

}  // namespace

void ReplicateOutsideManualRegions(HloModule& module) {
  auto has_manual_leaf = [](const HloSharding& s) { return HasManualLeaf(s); };
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
      if (!instr->has_sharding()) continue;
      if (HasPartlyManualLeaf(*instr->sharding())) {
        instr->set_sharding(ReplicatedWithinManualGroups(*instr->sharding()));
        continue;
      }
      if (keep.count(instr)) continue;
      const Shape& shape = instr->shape();
      instr->set_sharding(shape.IsTuple() ? HloSharding::Tuple(std::vector<HloSharding>(
                                                shape.LeafCount(), HloSharding::Replicate()))
                                          : HloSharding::Replicate());
    }
  }
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
  // Element by element: a copy of both as doubles would take 8 bytes per
  // element twice (a bf16[16,512,512,384] output: 26 GB).
  const PrimitiveType type = actual.element_type();
  const void* a_data = actual.raw_data();
  const void* b_data = expected.raw_data();
  double max_diff = 0, max_expected = 0;
  for (int64_t i = 0; i < actual.element_count(); ++i) {
    const double a = exec::LoadAsDouble(type, a_data, i);
    const double b = exec::LoadAsDouble(type, b_data, i);
    if (!std::isfinite(a) || !std::isfinite(b)) {
      const bool same = (std::isnan(a) && std::isnan(b)) || a == b;
      if (!same) return kInf;
      continue;
    }
    max_diff = std::max(max_diff, std::abs(a - b));
    max_expected = std::max(max_expected, std::abs(b));
  }
  if (max_diff == 0) return 0;
  return max_expected == 0 ? kInf : max_diff / max_expected;
}

double CheckTolerance(PrimitiveType type, PrimitiveType narrowest_float, int64_t longest_sum) {
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
  const double base =
      std::max(of(type), IsFloatingPoint(narrowest_float) ? of(narrowest_float) : 0.0);
  // Sharding reorders a sum; the rounding error of a sum of n terms taken in
  // another order grows as a random walk, with sqrt(n).
  return base * std::max(1.0, std::sqrt(static_cast<double>(longest_sum) / kCheckSumTerms));
}

int64_t LongestSum(const HloModule& module) {
  int64_t longest = 1;
  auto product = [](const Shape& shape, std::span<const int64_t> dims) {
    int64_t n = 1;
    for (int64_t d : dims) n *= shape.dimensions()[d];
    return n;
  };
  for (const HloComputation* c : module.computations()) {
    for (const HloInstruction* instr : c->instructions()) {
      if (instr->shape().IsArray() && !IsFloatingPoint(instr->shape().element_type())) continue;
      const HloAttributes& attrs = instr->attrs();
      int64_t terms = 1;
      switch (instr->opcode()) {
        case HloOpcode::kDot:
          terms = product(instr->operand(0)->shape(), attrs.dot.lhs_contracting_dims);
          break;
        case HloOpcode::kConvolution: {
          const ConvolutionDimensionNumbers& dn = attrs.convolution;
          const Shape& kernel = instr->operand(1)->shape();
          terms = product(kernel, dn.kernel_spatial_dimensions) *
                  kernel.dimensions()[dn.kernel_input_feature_dimension];
          break;
        }
        case HloOpcode::kReduce: {
          const Shape& operand = instr->operand(0)->shape();
          terms = product(operand, attrs.dimensions);
          break;
        }
        case HloOpcode::kReduceWindow:
          for (const WindowDim& w : attrs.window) terms *= w.size;
          break;
        default:
          break;
      }
      longest = std::max(longest, terms);
    }
  }
  return longest;
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
  // The environment first: a malformed WEFT_NUM_DEVICES (or another
  // runtime variable) is refused even where the module's shardings decide.
  CurrentConfig();
  WEFT_CHECK(
      !options.num_devices || (*options.num_devices >= 1 && *options.num_devices <= kMaxDevices),
      "--num-devices must be between 1 and {} (leave it out for the module's or the "
      "topology's count), got {}",
      kMaxDevices, options.num_devices.value_or(0));
  MakeExecutorOptions(options);  // checks --max-iterations before anything runs
  if (!Topology::InsideMpi()) return RunOnThreads(options, out);
  int code = 0;
  const int aborted = RunMpiMain([&](Communicator& comm) { code = RunOnRank(options, comm, out); });
  return aborted != 0 ? aborted : code;
}

}  // namespace weft::runtime
