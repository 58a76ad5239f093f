// `weft bench train CONFIG`: training steps of the config's Llama, run in
// this process exactly as `weft train` runs them (train/trainer.h's
// TrainStepsInMemory: the same step program, data, per-device loop and
// AdamW update, without a run directory), measured:
//
//   - tokens/s, from the median timed step (and the best);
//   - model-FLOPs utilisation: model FLOPs per step (ModelFlopsPerStep of
//     train/planner.h: 6 x matmul parameters x tokens + 3 x the causal
//     attention forward, 4·B·H·S(S+1)/2·Dh per layer) over the step time,
//     as a fraction of the peak of the run's precision on all pool threads,
//     measured in the same run (before and after the steps; the higher of
//     the two): the float32 FMA peak of the kernels' instruction set for
//     f32, the bf16 matrix peak of the bf16 kernels' (AMX tdpbf16ps or
//     AVX512-BF16 vdpbf16ps) for bf16, or the float32 peak where this CPU
//     has no bf16 instructions and bf16 GEMMs widen;
//   - where device 0's step time goes: the executor's per-instruction
//     timers by class (runtime::OpClass), the trainer's optimizer, and the
//     rest ("other": parameters, tuples, the interpreter's own work, drawing
//     and sharding the batch);
//   - buffers the executor allocated and page faults (getrusage, the whole
//     process) per step; device 0's executor peak bytes; the process's
//     largest resident set.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace weft::bench {

struct TrainBenchOptions {
  std::string config;
  std::string mesh;        // --mesh; empty: the config's [mesh]
  std::string precision;   // --precision bf16|f32; empty: the config's train.precision
  int64_t steps = 3;       // timed steps
  int64_t warmup = 1;      // untimed steps first (at least 1: the first pays one-time costs)
  bool profile = true;     // per-class executor timers (--no-profile: off)
  bool fuse_loops = true;  // false: --unfused, the per-device program without fusion
  bool json = false;
  int64_t top = 0;  // --top N: device 0's N instructions that took the most time
};

// One instruction of device 0's program and its time per timed step
// (--top): its name, opcode (a fusion's kind and fused opcodes), shape.
struct InstructionTime {
  std::string name, what, shape, op_class;
  double seconds_per_step = 0;
};

struct TrainBenchResult {
  std::string config, mesh, precision;
  int64_t devices = 0, batch_size = 0, seq_len = 0, parameters = 0;
  int64_t warmup = 0;
  std::vector<double> step_seconds;  // the timed steps, in order
  double step_seconds_min = 0, step_seconds_median = 0;
  double tokens_per_step = 0;
  double tokens_per_s = 0, tokens_per_s_best = 0;  // median step, best step
  // The peak MFU is measured against (see the file comment): its ISA and
  // instruction ("fma" for float32, "vdpbf16ps" or "tdpbf16ps" for bf16).
  std::string peak_isa, peak_instruction;
  int peak_threads = 0;
  double peak_gflops_before = 0, peak_gflops_after = 0, peak_gflops = 0;
  double model_flops_per_step = 0;
  double mfu = 0;  // from the median step
  bool profile = false;
  // Seconds per timed step by class, in report order: dot, attention,
  // elementwise, broadcast, data_movement, reduction, collective, optimizer,
  // other.
  std::vector<std::pair<std::string, double>> breakdown;
  double instructions_per_step = 0;
  double allocations_per_step = 0, allocated_bytes_per_step = 0;
  double minor_faults_per_step = 0, major_faults_per_step = 0;
  // Voluntary and involuntary, every thread of the process: a team that
  // sleeps at its barriers shows here (docs/DESIGN.md, "Threads").
  double context_switches_per_step = 0;
  // libgomp's spin count as the process started it: GOMP_SPINCOUNT, else
  // "OMP_WAIT_POLICY=<policy>", else "libgomp's default".
  std::string openmp_spin;
  int64_t peak_bytes_per_device = 0;  // device 0's executor, the largest over the timed steps
  int64_t max_rss_bytes = 0;
  double loss_first = 0, loss_last = 0;  // of the timed steps
  std::vector<InstructionTime> top;      // --top, the slowest first
};

// The formula behind model_flops_per_step, as printed.
inline constexpr const char* kModelFlopsFormula =
    "6 x matmul parameters x tokens + 3 x causal attention forward (4 B H S(S+1)/2 Dh per "
    "layer); embedding lookups and norms are not counted";

TrainBenchResult MeasureTrain(const TrainBenchOptions& options);
int RunTrainBench(const TrainBenchOptions& options);

}  // namespace weft::bench
