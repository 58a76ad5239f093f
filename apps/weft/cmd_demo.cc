// `weft demo`: what `make run` runs until training lands: a packed-document
// causal mask, its block structure, and attention forward + backward timed
// against this machine's measured peak.
#include <fmt/core.h>

#include <cmath>
#include <random>
#include <vector>

#include "bench.h"
#include "commands.h"
#include "timer.h"
#include "weft/base/cpu.h"
#include "weft/base/thread_pool.h"
#include "weft/kernels/attention.h"

namespace weft::cli {

namespace {

int RunDemo() {
  using namespace weft::kernels;
  const CpuInfo& cpu = GetCpuInfo();
  auto peaks = bench::MeasurePeak(0.2);
  fmt::print("weft demo on {} ({} threads), kernels use {} (peak {:.1f} GFLOP/s)\n\n",
             cpu.model_name, ThreadPool::Global().num_threads(), peaks[0].isa,
             peaks[0].gflops_all_threads);

  // Packed documents: 4096 tokens holding documents of random lengths.
  const int64_t S = 4096, H = 8, D = 128;
  std::mt19937 rng(7);
  IndexTensor seg{{1, S}, std::vector<int64_t>(S)};
  int64_t doc = 0, left = 0;
  for (int64_t i = 0; i < S; ++i) {
    if (left == 0) {
      left = 200 + static_cast<int64_t>(rng() % 1200);
      ++doc;
    }
    --left;
    seg.values[i] = doc;
  }
  auto mask = AndMasks({CausalMask(), DocumentMask(seg, seg)});
  BlockMask bm = BlockMask::Create(mask, 1, 1, S, S, 256, 256);
  fmt::print("mask: {}\n{}\n\n", mask->ToString(), bm.ToString());
  BlockMask kernel_mask = BlockMask::Create(mask, 1, 1, S, S);

  AttentionDims d{1, H, H, S, S, D, D};
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const size_t n = static_cast<size_t>(H * S * D);
  std::vector<float> q(n), k(n), v(n), out(n), dout(n), dq(n), dk(n), dv(n), lse(H * S);
  for (auto* x : {&q, &k, &v, &dout})
    for (auto& e : *x) e = normal(rng);
  double pairs = 0;
  for (int64_t i = 0; i < S; ++i)
    for (int64_t j = i; j >= 0 && seg.values[j] == seg.values[i]; --j) pairs += 1;
  pairs *= H;
  for (const char* name : {"causal", "causal + documents"}) {
    BlockMask causal = BlockMask::Create(CausalMask(), 1, 1, S, S);
    AttentionOptions o;
    bool docs = std::string(name) != "causal";
    o.block_mask = docs ? &kernel_mask : &causal;
    double p = docs ? pairs : double(H) * S * (S + 1) / 2;
    double t_fwd = bench::BestSeconds(2, [&] {
      FlexAttentionForward(d, q.data(), k.data(), v.data(), o, out.data(), lse.data());
    });
    double t_bwd = bench::BestSeconds(2, [&] {
      FlexAttentionBackward(d, q.data(), k.data(), v.data(), out.data(), lse.data(), dout.data(),
                            nullptr, o, dq.data(), dk.data(), dv.data());
    });
    double flops = 4.0 * p * D;
    fmt::print(
        "{:<20} B=1 H={} S={} D={}: forward {:7.1f} ms ({:5.1f}% of peak), backward "
        "{:7.1f} ms ({:5.1f}% of peak)\n",
        name, H, S, D, t_fwd * 1e3, 100 * flops / t_fwd / 1e9 / peaks[0].gflops_all_threads,
        t_bwd * 1e3, 100 * 2.5 * flops / t_bwd / 1e9 / peaks[0].gflops_all_threads);
  }
  fmt::print("\nMore: weft bench attention --help\n");
  return 0;
}

}  // namespace

void AddDemo(CLI::App& app) {
  auto* demo = app.add_subcommand(
      "demo", "Attention demo: packed-document mask, block sparsity, forward + backward timing");
  demo->callback([] { SetAction(RunDemo); });
}

}  // namespace weft::cli
