// `weft bench peak`: the float32 FMA peak of this machine, per instruction set.
#include <fmt/core.h>

#include <nlohmann/json.hpp>
#include <atomic>
#include <thread>
#include <vector>

#include "bench.h"
#include "simd/primitives.h"
#include "timer.h"
#include "weft/base/cpu.h"
#include "weft/base/thread_pool.h"

namespace weft::bench {

namespace {

// GFLOP/s of fma_peak_loop on `threads` threads at once.
double Measure(const kernels::simd::Primitives& p, int threads, double seconds) {
  // Calibrate the iteration count on one thread.
  float sink = 0;
  int64_t iters = 1 << 16;
  for (;;) {
    double t0 = NowSeconds();
    p.fma_peak_loop(iters, &sink);
    double dt = NowSeconds() - t0;
    if (dt > seconds / 4 || iters > (int64_t(1) << 40)) {
      iters = static_cast<int64_t>(iters * seconds / std::max(dt, 1e-6));
      break;
    }
    iters *= 4;
  }
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    std::vector<float> sinks(threads);
    std::vector<int64_t> flops(threads);
    // One dedicated thread per measured thread, released together (a pool's
    // dynamic scheduling could let one thread run several loops in a row).
    std::atomic<int> ready{0};
    std::atomic<bool> go{false};
    std::vector<std::thread> workers;
    for (int t = 1; t < threads; ++t) {
      workers.emplace_back([&, t] {
        ready++;
        while (!go.load()) std::this_thread::yield();
        flops[t] = p.fma_peak_loop(iters, &sinks[t]);
      });
    }
    while (ready.load() < threads - 1) std::this_thread::yield();
    double t0 = NowSeconds();
    go = true;
    flops[0] = p.fma_peak_loop(iters, &sinks[0]);
    for (auto& w : workers) w.join();
    double dt = NowSeconds() - t0;
    double total = 0;
    for (auto f : flops) total += double(f);
    best = std::max(best, total / dt / 1e9);
  }
  return best;
}

}  // namespace

double MeasureAmxBf16Peak() {
  // weft has no AMX tile kernels yet (they need arch_prctl(ARCH_REQ_XCOMP_PERM,
  // XFEATURE_XTILEDATA) and a CPU to test on), so there is nothing to measure.
  return 0;
}

std::vector<PeakResult> MeasurePeak(double seconds) {
  int n = 0;
  const char* const* isas = kernels::simd::AvailableIsas(&n);
  std::vector<PeakResult> results;
  const char* chosen = kernels::simd::GetPrimitives().isa;
  int threads = ThreadPool::Global().num_threads();
  auto measure = [&](const char* isa) {
    const auto* p = kernels::simd::PrimitivesFor(isa);
    PeakResult r;
    r.isa = isa;
    r.threads = threads;
    r.gflops_one_thread = Measure(*p, 1, seconds);
    r.gflops_all_threads = threads == 1 ? r.gflops_one_thread : Measure(*p, threads, seconds);
    results.push_back(r);
  };
  measure(chosen);
  for (int i = 0; i < n; ++i)
    if (std::string(isas[i]) != chosen) measure(isas[i]);
  return results;
}

int RunPeak(bool json) {
  auto results = MeasurePeak();
  const CpuInfo& cpu = GetCpuInfo();
  if (json) {
    nlohmann::json j;
    j["cpu"] = cpu.model_name;
    j["threads"] = ThreadPool::Global().num_threads();
    for (const auto& r : results)
      j["float32_fma"].push_back({{"isa", r.isa},
                                  {"gflops_one_thread", r.gflops_one_thread},
                                  {"gflops_all_threads", r.gflops_all_threads}});
    j["amx_bf16_gflops"] = nullptr;  // not measurable: see RunPeak's table note
    j["amx_bf16"] = cpu.amx_bf16 ? "present, not measured (no AMX kernels yet)" : "absent";
    fmt::print("{}\n", j.dump(2));
    return 0;
  }
  fmt::print("CPU: {} ({} threads in the pool; L1d {} KiB, L2 {} KiB)\n", cpu.model_name,
             ThreadPool::Global().num_threads(), cpu.l1d_bytes / 1024, cpu.l2_bytes / 1024);
  fmt::print("{:<10} {:>16} {:>16}\n", "isa", "GFLOP/s 1 thread", "GFLOP/s all");
  for (const auto& r : results)
    fmt::print("{:<10} {:>16.1f} {:>16.1f}{}\n", r.isa, r.gflops_one_thread,
               r.gflops_all_threads, &r == &results[0] ? "   (used by the kernels)" : "");
  fmt::print("AMX bf16 peak: {}\n",
             cpu.amx_bf16 ? "not measured: weft has no AMX tile kernels yet"
                          : "n/a: this CPU has no AMX (bf16 attention runs on the float32 FMA "
                            "units; its peak is the one above)");
  return 0;
}

}  // namespace weft::bench
