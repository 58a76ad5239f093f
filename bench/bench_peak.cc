// `weft bench peak`: the float32 FMA peak of this machine, per instruction
// set, and the bf16 peaks where present: AVX512-BF16 (vdpbf16ps) and AMX
// (TDPBF16PS on tiles).
#include <fmt/core.h>

#include <atomic>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "bench.h"
#include "timer.h"
#include "weft/base/cpu.h"
#include "weft/base/thread_pool.h"
#include "weft/kernels/simd.h"

namespace weft::bench {

namespace {

using PeakLoop = int64_t (*)(int64_t iterations, float* sink);

// GFLOP/s of `loop` (a peak loop of the primitives) on `threads` threads at once.
double Measure(PeakLoop loop, int threads, double seconds) {
  // Calibrate the iteration count on one thread.
  float sink = 0;
  int64_t iters = 1 << 16;
  for (;;) {
    double t0 = NowSeconds();
    loop(iters, &sink);
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
        flops[t] = loop(iters, &sinks[t]);
      });
    }
    while (ready.load() < threads - 1) std::this_thread::yield();
    double t0 = NowSeconds();
    go = true;
    flops[0] = loop(iters, &sinks[0]);
    for (auto& w : workers) w.join();
    double dt = NowSeconds() - t0;
    double total = 0;
    for (auto f : flops) total += double(f);
    best = std::max(best, total / dt / 1e9);
  }
  return best;
}

}  // namespace

PeakResult MeasureFmaPeak(const char* isa, double seconds) {
  const auto* p = kernels::simd::PrimitivesFor(isa);
  const int threads = ThreadPool::Global().num_threads();
  PeakResult r;
  r.isa = isa;
  r.threads = threads;
  r.gflops_one_thread = Measure(p->fma_peak_loop, 1, seconds);
  r.gflops_all_threads =
      threads == 1 ? r.gflops_one_thread : Measure(p->fma_peak_loop, threads, seconds);
  return r;
}

std::vector<PeakResult> MeasurePeak(double seconds) {
  int n = 0;
  const char* const* isas = kernels::simd::AvailableIsas(&n);
  std::vector<PeakResult> results;
  const char* chosen = kernels::simd::GetPrimitives().isa;
  auto measure = [&](const char* isa) { results.push_back(MeasureFmaPeak(isa, seconds)); };
  measure(chosen);
  // avx512bf16's float32 FMA code is avx512's: measured once, as avx512.
  for (int i = 0; i < n; ++i)
    if (std::string(isas[i]) != chosen && std::string(isas[i]) != "avx512bf16") measure(isas[i]);
  return results;
}

PeakResult MeasureBf16Peak(const char* isa, double seconds) {
  PeakResult r;
  const auto* p = kernels::simd::PrimitivesFor(isa);
  if (p == nullptr || p->bf16_dot_peak_loop == nullptr) return r;  // not on this machine
  r.isa = p->isa;
  r.threads = ThreadPool::Global().num_threads();
  r.gflops_one_thread = Measure(p->bf16_dot_peak_loop, 1, seconds);
  r.gflops_all_threads =
      r.threads == 1 ? r.gflops_one_thread : Measure(p->bf16_dot_peak_loop, r.threads, seconds);
  return r;
}

int RunPeak(bool json) {
  auto results = MeasurePeak();
  const PeakResult bf16 = MeasureBf16Peak("avx512bf16");
  const PeakResult amx = MeasureBf16Peak("amx");
  const CpuInfo& cpu = GetCpuInfo();
  const std::string& amx_absent = kernels::simd::AmxUnavailableReason();
  if (json) {
    nlohmann::json j;
    j["cpu"] = cpu.model_name;
    j["threads"] = ThreadPool::Global().num_threads();
    for (const auto& r : results)
      j["float32_fma"].push_back({{"isa", r.isa},
                                  {"gflops_one_thread", r.gflops_one_thread},
                                  {"gflops_all_threads", r.gflops_all_threads}});
    if (bf16.isa.empty()) {
      j["bf16_dot"] = nullptr;  // no AVX512-BF16 on this CPU
    } else {
      j["bf16_dot"] = {{"isa", bf16.isa},
                       {"instruction", "vdpbf16ps"},
                       {"gflops_one_thread", bf16.gflops_one_thread},
                       {"gflops_all_threads", bf16.gflops_all_threads}};
    }
    if (amx.isa.empty()) {
      j["amx_bf16"] = {{"absent", amx_absent}};
    } else {
      j["amx_bf16"] = {{"isa", amx.isa},
                       {"instruction", "tdpbf16ps"},
                       {"gflops_one_thread", amx.gflops_one_thread},
                       {"gflops_all_threads", amx.gflops_all_threads}};
    }
    fmt::print("{}\n", j.dump(2));
    return 0;
  }
  fmt::print("CPU: {} ({} threads in the pool; L1d {} KiB, L2 {} KiB)\n", cpu.model_name,
             ThreadPool::Global().num_threads(), cpu.l1d_bytes / 1024, cpu.l2_bytes / 1024);
  fmt::print("{:<22} {:>16} {:>16}\n", "peak", "GFLOP/s 1 thread", "GFLOP/s all");
  for (const auto& r : results)
    fmt::print("{:<22} {:>16.1f} {:>16.1f}{}\n", r.isa + " f32 FMA", r.gflops_one_thread,
               r.gflops_all_threads, &r == &results[0] ? "   (float32 kernels)" : "");
  if (!bf16.isa.empty()) {
    fmt::print("{:<22} {:>16.1f} {:>16.1f}   (bfloat16 kernels; 2 flops per bf16 pair)\n",
               bf16.isa + " vdpbf16ps", bf16.gflops_one_thread, bf16.gflops_all_threads);
  } else {
    fmt::print(
        "AVX512-BF16 peak: n/a (this CPU has no avx512_bf16; bf16 kernels widen to "
        "float32 and run on the FMA units above)\n");
  }
  if (!amx.isa.empty()) {
    fmt::print("{:<22} {:>16.1f} {:>16.1f}   (bfloat16 kernels on AMX tiles)\n", "amx tdpbf16ps",
               amx.gflops_one_thread, amx.gflops_all_threads);
  } else {
    fmt::print("AMX bf16 peak: n/a ({})\n", amx_absent);
  }
  return 0;
}

}  // namespace weft::bench
