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
// The float32 FMA peak of one instruction set (an entry of
// kernels::simd::AvailableIsas; the kernels': GetPrimitives().isa).
PeakResult MeasureFmaPeak(const char* isa, double seconds_per_measure = 0.3);

// The bf16 matrix peak of `isa` ("avx512bf16": vdpbf16ps; "amx": TDPBF16PS
// tiles; 2 flops per bf16 product pair) on one thread and on all pool
// threads; isa is empty and the figures 0 when this machine cannot run it.
PeakResult MeasureBf16Peak(const char* isa, double seconds_per_measure = 0.3);
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
