// Benchmarks run by `weft bench <name>`. Each prints a table (or JSON) and
// states performance as a ratio to the machine's measured peak.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "weft/kernels/mask_mod.h"

namespace weft::bench {

struct PeakResult {
  std::string isa;
  int threads = 1;
  double gflops_one_thread = 0;
  double gflops_all_threads = 0;
};

// Measures the float32 FMA peak of every instruction set this CPU has, on one
// thread and on all pool threads. The first entry is the one kernels use.
std::vector<PeakResult> MeasurePeak(double seconds_per_measure = 0.3);

// The bf16 dot-product peak (AVX512-BF16 vdpbf16ps, 2 flops per bf16 pair)
// on one thread and on all pool threads; isa is empty and the figures 0 when
// this CPU has no such instruction.
PeakResult MeasureBf16DotPeak(double seconds_per_measure = 0.3);
int RunPeak(bool json);

struct AttentionBenchOptions {
  std::vector<int64_t> seq_lens{1024, 4096, 16384};
  std::vector<int64_t> head_dims{64, 128};
  std::vector<std::string> masks{"none", "causal", "sliding_window", "document"};
  int64_t batch = 1, heads = 8;
  bool backward = true;
  bool json = false;
  std::string dtype = "f32";  // "f32" or "bf16" (bf16 also times f32 for the ratio)
};
int RunAttention(const AttentionBenchOptions& options);

// The AMX bf16 peak in GFLOP/s, or 0 when this CPU has no AMX (or weft cannot
// measure it yet: AMX needs the tile permission and tile kernels, issue 7).
double MeasureAmxBf16Peak();

// `weft tune attention`: times the candidate configurations that fit and
// stores the winner in the tune cache.
struct TuneOptions {
  int64_t batch = 1, heads = 8, seq = 4096, head_dim = 128;
  std::string dtype = "f32";
  std::string mask = "causal";
  bool explain = false;
  bool json = false;
};
int RunTuneAttention(const TuneOptions& options);

// Shared by bench and tune: the named benchmark mask (null for "none").
kernels::MaskModPtr MakeBenchMask(const std::string& name, int64_t seq);

}  // namespace weft::bench
