// `weft bench train`: see bench_train.h.
#include "bench_train.h"

#include <fmt/format.h>
#include <sys/resource.h>

#include <algorithm>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "bench.h"
#include "bench_executor.h"
#include "timer.h"
#include "weft/base/algorithm.h"
#include "weft/base/error.h"
#include "weft/base/memory.h"
#include "weft/hlo/computation.h"
#include "weft/kernels/simd.h"
#include "weft/models/llama_config.h"
#include "weft/runtime/executor.h"
#include "weft/train/planner.h"
#include "weft/train/program.h"
#include "weft/train/trainer.h"

namespace weft::bench {
namespace {

using runtime::OpClass;

// The executor classes reported on their own, in report order.
constexpr OpClass kReportedClasses[] = {
    OpClass::kDot,          OpClass::kAttention, OpClass::kElementwise, OpClass::kBroadcast,
    OpClass::kDataMovement, OpClass::kReduction, OpClass::kCollective,  OpClass::kFusedLoops};

struct Faults {
  int64_t minor = 0, major = 0, max_rss_bytes = 0, context_switches = 0;
};

Faults ProcessFaults() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return {usage.ru_minflt, usage.ru_majflt, static_cast<int64_t>(usage.ru_maxrss) * 1024,
          usage.ru_nvcsw + usage.ru_nivcsw};
}

std::string OpenMpSpin() {
  if (const char* count = std::getenv("GOMP_SPINCOUNT")) return count;
  if (const char* policy = std::getenv("OMP_WAIT_POLICY"))
    return fmt::format("OMP_WAIT_POLICY={}", policy);
  return "libgomp's default";
}

}  // namespace

namespace {

// An instruction as --top prints it.
InstructionTime DescribeForTop(const HloInstruction& instr) {
  InstructionTime t;
  t.name = instr.name();
  t.shape = instr.shape().ToString();
  t.op_class = std::string(runtime::OpClassName(runtime::ClassifyInstruction(instr)));
  t.what = OpcodeAndFusedOps(instr);
  return t;
}

}  // namespace

TrainBenchResult MeasureTrain(const TrainBenchOptions& options) {
  WEFT_CHECK(options.top == 0 || options.profile,
             "--top {} needs the executor's per-instruction timers: drop --no-profile",
             options.top);
  WEFT_CHECK(options.steps >= 1, "--steps {}: give at least 1 timed step", options.steps);
  WEFT_CHECK(options.warmup >= 1,
             "--warmup {}: give at least 1 (the first step pays one-time costs: first touches "
             "of every buffer, oneDNN primitive creation; it is never timed)",
             options.warmup);
  RunConfig config = LoadRunConfig(options.config);
  if (!options.precision.empty()) {
    config.train.precision = ParsePrecision(options.precision, "--precision");
  } else if (!config.train.precision) {
    config.train.precision = FastestPrecision().precision;  // as weft train chooses
  }
  TrainStepsOptions train;
  if (!options.mesh.empty()) train.mesh = ParseMeshFlag(options.mesh);
  const MeshConfig& mesh = train.mesh ? *train.mesh : config.mesh;
  train.steps = options.warmup + options.steps;
  train.profile = options.profile;
  train.fuse_loops = options.fuse_loops;

  TrainBenchResult r;
  r.config = options.config;
  r.mesh = MeshText(mesh);
  r.warmup = options.warmup;
  r.profile = options.profile;
  r.parameters = config.model.NumParameters();
  r.precision = PrecisionName(*config.train.precision);

  // bf16 runs are measured against the bf16 matrix peak where the kernels
  // have one (GetBf16Primitives: amx, else avx512bf16), else they widen to
  // float32 and the float32 FMA peak is theirs.
  const kernels::simd::Primitives* bf16 = nullptr;
  if (config.train.precision == Precision::kBf16) {
    bf16 = &kernels::simd::GetBf16Primitives();
    if (bf16->bf16_dot_peak_loop == nullptr) bf16 = nullptr;
  }
  const char* isa = bf16 ? bf16->isa : kernels::simd::GetPrimitives().isa;
  r.peak_instruction =
      bf16 ? (std::string(isa) == "amx" ? "tdpbf16ps" : "vdpbf16ps") : "float32 FMA";
  const auto measure_peak = [&] { return bf16 ? MeasureBf16Peak(isa) : MeasureFmaPeak(isa); };
  const PeakResult before = measure_peak();

  // Sums over the timed steps (device 0).
  std::array<double, runtime::kNumOpClasses> class_seconds{};
  double optimizer_seconds = 0, others_seconds = 0, instructions = 0, allocations = 0,
         allocated_bytes = 0;
  Faults faults_start;
  int64_t seen = 0;
  std::unordered_map<std::string, InstructionTime> instruction_times;  // --top, by name
  train.on_step = [&](const StepMetrics& m, const StepProfile& p) {
    ++seen;
    if (seen == options.warmup) faults_start = ProcessFaults();
    if (seen <= options.warmup) return;
    if (r.step_seconds.empty()) r.loss_first = m.loss;
    r.loss_last = m.loss;
    r.step_seconds.push_back(m.step_seconds);
    r.tokens_per_step = static_cast<double>(m.tokens);
    for (int k = 0; k < runtime::kNumOpClasses; ++k)
      class_seconds[k] += p.executor.class_seconds[k];
    if (options.top > 0) {
      for (const auto& [instr, seconds] : p.executor.instruction_seconds) {
        InstructionTime& t = instruction_times[instr->name()];
        if (t.name.empty()) t = DescribeForTop(*instr);
        t.seconds_per_step += seconds;
      }
    }
    optimizer_seconds += p.optimizer_seconds;
    others_seconds += p.executor.collectives.seconds_others_ran;
    instructions += static_cast<double>(p.executor.instructions);
    allocations += static_cast<double>(p.executor.allocations);
    allocated_bytes += static_cast<double>(p.executor.allocated_bytes);
    r.peak_bytes_per_device = std::max(r.peak_bytes_per_device, p.executor.peak_bytes);
  };
  const TrainStepsInfo info = TrainStepsInMemory(config, train);
  const Faults faults_end = ProcessFaults();
  WEFT_INTERNAL_CHECK(static_cast<int64_t>(r.step_seconds.size()) == options.steps,
                      "bench train: {} steps reported, {} expected", r.step_seconds.size(),
                      options.steps);

  const PeakResult after = measure_peak();
  r.peak_isa = isa;
  r.peak_threads = before.threads;
  r.peak_gflops_before = before.gflops_all_threads;
  r.peak_gflops_after = after.gflops_all_threads;
  r.peak_gflops = std::max(r.peak_gflops_before, r.peak_gflops_after);

  r.devices = info.num_devices;
  r.batch_size = info.batch_size;
  r.seq_len = info.seq_len;
  const double n = static_cast<double>(options.steps);
  double total_seconds = 0;
  for (double s : r.step_seconds) total_seconds += s;
  r.step_seconds_min = *std::min_element(r.step_seconds.begin(), r.step_seconds.end());
  r.step_seconds_median = Median(r.step_seconds);
  r.tokens_per_s = r.tokens_per_step / r.step_seconds_median;
  r.tokens_per_s_best = r.tokens_per_step / r.step_seconds_min;
  r.model_flops_per_step = ModelFlopsPerStep(config.model, info.batch_size, info.seq_len);
  r.mfu = r.model_flops_per_step / r.step_seconds_median / (r.peak_gflops * 1e9);

  double accounted = 0;
  for (OpClass c : kReportedClasses) {
    const double s = class_seconds[static_cast<int>(c)] / n;
    r.breakdown.emplace_back(std::string(runtime::OpClassName(c)), s);
    accounted += s;
  }
  // Device 0's thread running its other devices while device 0 waited in a
  // collective (more devices than cores): not device 0's work.
  r.breakdown.emplace_back("other_devices", others_seconds / n);
  accounted += others_seconds / n;
  r.breakdown.emplace_back("optimizer", optimizer_seconds / n);
  accounted += optimizer_seconds / n;
  // The executor's "other" class, its own work between instructions, and
  // the batch: the rest of the step.
  r.breakdown.emplace_back("other", std::max(0.0, total_seconds / n - accounted));

  r.instructions_per_step = instructions / n;
  r.allocations_per_step = allocations / n;
  r.allocated_bytes_per_step = allocated_bytes / n;
  r.minor_faults_per_step = static_cast<double>(faults_end.minor - faults_start.minor) / n;
  r.major_faults_per_step = static_cast<double>(faults_end.major - faults_start.major) / n;
  r.context_switches_per_step =
      static_cast<double>(faults_end.context_switches - faults_start.context_switches) / n;
  r.openmp_spin = OpenMpSpin();
  r.max_rss_bytes = faults_end.max_rss_bytes;
  for (auto& [name, t] : instruction_times) {
    t.seconds_per_step /= n;
    r.top.push_back(std::move(t));
  }
  std::sort(r.top.begin(), r.top.end(), [](const InstructionTime& a, const InstructionTime& b) {
    return a.seconds_per_step != b.seconds_per_step ? a.seconds_per_step > b.seconds_per_step
                                                    : a.name < b.name;
  });
  if (static_cast<int64_t>(r.top.size()) > options.top) r.top.resize(options.top);
  return r;
}

int RunTrainBench(const TrainBenchOptions& options) {
  const TrainBenchResult r = MeasureTrain(options);
  double step_total = 0;
  for (const auto& [name, seconds] : r.breakdown) step_total += seconds;
  if (options.json) {
    nlohmann::json j;
    j["config"] = r.config;
    j["mesh"] = r.mesh;
    j["precision"] = r.precision;
    j["devices"] = r.devices;
    j["batch_size"] = r.batch_size;
    j["seq_len"] = r.seq_len;
    j["tokens_per_step"] = r.tokens_per_step;
    j["parameters"] = r.parameters;
    j["warmup_steps"] = r.warmup;
    j["steps"] = r.step_seconds.size();
    j["step_seconds"] = r.step_seconds;
    j["step_seconds_min"] = r.step_seconds_min;
    j["step_seconds_median"] = r.step_seconds_median;
    j["tokens_per_s"] = r.tokens_per_s;
    j["tokens_per_s_best"] = r.tokens_per_s_best;
    j["peak"] = {{"isa", r.peak_isa},
                 {"instruction", r.peak_instruction},
                 {"threads", r.peak_threads},
                 {"what", "float32 FMA, all pool threads"},
                 {"gflops", r.peak_gflops},
                 {"gflops_before", r.peak_gflops_before},
                 {"gflops_after", r.peak_gflops_after}};
    j["model_flops_per_step"] = r.model_flops_per_step;
    j["model_flops_formula"] = kModelFlopsFormula;
    j["model_gflops_per_s"] = r.model_flops_per_step / r.step_seconds_median / 1e9;
    j["mfu"] = r.mfu;
    j["profile"] = r.profile;
    nlohmann::json breakdown = nlohmann::json::object();
    for (const auto& [name, seconds] : r.breakdown) {
      breakdown[name] = {{"seconds_per_step", seconds},
                         {"fraction", step_total > 0 ? seconds / step_total : 0.0}};
    }
    j["breakdown"] = breakdown;
    j["instructions_per_step"] = r.instructions_per_step;
    j["allocations_per_step"] = r.allocations_per_step;
    j["allocated_bytes_per_step"] = r.allocated_bytes_per_step;
    j["minor_faults_per_step"] = r.minor_faults_per_step;
    j["major_faults_per_step"] = r.major_faults_per_step;
    j["context_switches_per_step"] = r.context_switches_per_step;
    j["openmp_spin"] = r.openmp_spin;
    j["peak_bytes_per_device"] = r.peak_bytes_per_device;
    j["max_rss_bytes"] = r.max_rss_bytes;
    j["loss_first"] = r.loss_first;
    j["loss_last"] = r.loss_last;
    if (options.top > 0) {
      nlohmann::json top = nlohmann::json::array();
      for (const InstructionTime& t : r.top) {
        top.push_back({{"name", t.name},
                       {"op", t.what},
                       {"shape", t.shape},
                       {"class", t.op_class},
                       {"seconds_per_step", t.seconds_per_step}});
      }
      j["top"] = top;
    }
    fmt::print("{}\n", j.dump(2));
    return 0;
  }
  fmt::print(
      "{}: {} device(s) ({}), {}, batch {} x seq {} = {:.0f} tokens/step, {:.2f}M parameters\n",
      r.config, r.devices, r.mesh, r.precision, r.batch_size, r.seq_len, r.tokens_per_step,
      static_cast<double>(r.parameters) / 1e6);
  fmt::print(
      "peak: {} {} on {} threads, {:.1f} GFLOP/s (before the steps {:.1f}, after "
      "{:.1f}; the higher is used)\n",
      r.peak_isa, r.peak_instruction, r.peak_threads, r.peak_gflops, r.peak_gflops_before,
      r.peak_gflops_after);
  fmt::print("model FLOPs/step: {:.3g} = {}\n", r.model_flops_per_step, kModelFlopsFormula);
  fmt::print(
      "{} timed step(s) after {} warmup: {:.3f} s min, {:.3f} s median (loss {:.4f} -> "
      "{:.4f})\n",
      r.step_seconds.size(), r.warmup, r.step_seconds_min, r.step_seconds_median, r.loss_first,
      r.loss_last);
  fmt::print(
      "tokens/s: {:.0f} (median step), {:.0f} (best)    MFU: {:.1f}% of the peak "
      "({:.1f} model GFLOP/s)\n",
      r.tokens_per_s, r.tokens_per_s_best, 100 * r.mfu,
      r.model_flops_per_step / r.step_seconds_median / 1e9);
  fmt::print("time per step on device 0{}:\n",
             r.profile ? "" : " (--no-profile: the executor's classes are not timed)");
  for (const auto& [name, seconds] : r.breakdown) {
    fmt::print("  {:<14} {:>9.4f} s {:>6.1f}%\n", name, seconds,
               step_total > 0 ? 100 * seconds / step_total : 0.0);
  }
  fmt::print(
      "per step: {:.0f} instructions, {:.0f} buffer allocations ({}), {:.0f} minor and {:.0f} "
      "major page faults, {:.0f} context switches (whole process; OpenMP spin count: {})\n",
      r.instructions_per_step, r.allocations_per_step,
      FormatBytes(static_cast<int64_t>(r.allocated_bytes_per_step)), r.minor_faults_per_step,
      r.major_faults_per_step, r.context_switches_per_step, r.openmp_spin);
  fmt::print("peak bytes per device (device 0's executor): {}; process max RSS {}\n",
             FormatBytes(r.peak_bytes_per_device), FormatBytes(r.max_rss_bytes));
  if (options.top > 0) {
    fmt::print(
        "the {} instructions of device 0 that took the most time (seconds per step, % of "
        "the step):\n",
        r.top.size());
    for (const InstructionTime& t : r.top) {
      fmt::print("  {:>8.4f} s {:>5.1f}%  {:<14} {} = {} {}\n", t.seconds_per_step,
                 step_total > 0 ? 100 * t.seconds_per_step / step_total : 0.0, t.op_class, t.name,
                 t.shape, t.what);
    }
  }
  return 0;
}

}  // namespace weft::bench
