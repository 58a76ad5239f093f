// Benchmarks run by `weft bench <name>`. Each prints a table (or JSON) and
// states performance as a ratio to the machine's measured peak.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

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
int RunPeak(bool json);

struct AttentionBenchOptions {
  std::vector<int64_t> seq_lens{1024, 4096, 16384};
  std::vector<int64_t> head_dims{64, 128};
  std::vector<std::string> masks{"none", "causal", "sliding_window", "document"};
  int64_t batch = 1, heads = 8;
  bool backward = true;
  bool json = false;
};
int RunAttention(const AttentionBenchOptions& options);

}  // namespace weft::bench
