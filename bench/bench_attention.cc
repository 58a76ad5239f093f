// `weft bench attention`: flex attention forward and backward throughput,
// as GFLOP/s over unmasked (q, kv) pairs and percent of the measured peak.
#include <fmt/core.h>

#include <algorithm>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <vector>

#include "bench.h"
#include "timer.h"
#include "weft/base/error.h"
#include "weft/base/thread_pool.h"
#include "weft/kernels/attention.h"
#include "weft/kernels/simd.h"

namespace weft::bench {

namespace {

using kernels::MaskModPtr;

constexpr int64_t kWindow = 512;   // sliding window: q - 512 <= kv <= q
constexpr int64_t kDocuments = 8;  // document mask: 8 equal documents

}  // namespace

MaskModPtr MakeBenchMask(const std::string& name, int64_t S) {
  if (name == "none") return nullptr;
  if (name == "causal") return kernels::CausalMask();
  if (name == "sliding_window") return kernels::SlidingWindowMask(kWindow, 0);
  if (name == "document") {
    kernels::IndexTensor seg{{1, S}, std::vector<int64_t>(S)};
    for (int64_t i = 0; i < S; ++i) seg.values[i] = i * kDocuments / S;
    return kernels::DocumentMask(seg, seg);
  }
  Fail("weft bench attention: unknown mask '{}'; use none, causal, sliding_window or document",
       name);
}

namespace {

// Unmasked (q, kv) pairs of one head, from each mask's definition.
double Pairs(const std::string& name, int64_t S) {
  double pairs = 0;
  for (int64_t q = 0; q < S; ++q) {
    if (name == "none") pairs += double(S);
    if (name == "causal") pairs += double(q + 1);
    if (name == "sliding_window") pairs += double(std::min(q, kWindow) + 1);
    if (name == "document") {
      int64_t doc = q * kDocuments / S;
      // ids are floor(i * 8 / S): count the keys with the same id.
      int64_t lo = (doc * S + kDocuments - 1) / kDocuments;
      int64_t hi = ((doc + 1) * S + kDocuments - 1) / kDocuments;
      pairs += double(hi - lo);
    }
  }
  return pairs;
}

}  // namespace

int RunAttention(const AttentionBenchOptions& opt) {
  const bool use_bf16 = opt.dtype == "bf16";
  WEFT_CHECK(use_bf16 || opt.dtype == "f32",
             "weft bench attention: --dtype {} is not supported; use "
             "f32 or bf16",
             opt.dtype);
  auto peaks = MeasurePeak(0.2);
  // bf16 is stated against the peak of the units its GEMMs run on: AMX tiles
  // or AVX512-BF16 (vdpbf16ps) when the bf16 kernels use them, else the
  // float32 FMA units they widen to.
  const std::string bf16_isa = kernels::simd::GetBf16Primitives().isa;
  const PeakResult bf16_peak = use_bf16 ? MeasureBf16Peak(bf16_isa.c_str(), 0.2) : PeakResult{};
  double peak = peaks[0].gflops_all_threads;
  std::string peak_name = "float32 FMA";
  if (bf16_peak.gflops_all_threads > 0) {
    peak = bf16_peak.gflops_all_threads;
    peak_name = bf16_isa == "amx" ? "AMX bf16 tdpbf16ps" : "AVX512-BF16 vdpbf16ps";
  }
  const std::string isa = use_bf16 ? bf16_isa : peaks[0].isa;
  const int threads = ThreadPool::Global().num_threads();
  nlohmann::json rows = nlohmann::json::array();
  if (!opt.json) {
    fmt::print(
        "flex attention {}, B={} H={}, {} threads, isa {}, measured {} peak {:.1f} "
        "GFLOP/s{}\n",
        use_bf16 ? "bfloat16" : "float32", opt.batch, opt.heads, threads, isa, peak_name, peak,
        use_bf16 ? fmt::format(" (float32 FMA peak {:.1f}{})", peaks[0].gflops_all_threads,
                               bf16_isa == "amx" ? "" : "; no AMX here")
                 : "");
    fmt::print("{:>6} {:>4} {:<15} {:>10} {:>9} {:>6} {:>10} {:>9} {:>6}{}\n", "S", "D", "mask",
               "fwd ms", "GFLOP/s", "%peak", "fwd+bwd ms", "GFLOP/s", "%peak",
               use_bf16 ? "  fwd x f32  all x f32" : "");
  }
  std::mt19937 rng(1234);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int64_t S : opt.seq_lens)
    for (int64_t D : opt.head_dims) {
      kernels::AttentionDims d{opt.batch, opt.heads, opt.heads, S, S, D, D};
      const size_t n = static_cast<size_t>(opt.batch * opt.heads * S * D);
      std::vector<float> q(n), k(n), v(n), out(n), dout(n), dq(n), dk(n), dv(n);
      std::vector<float> lse(static_cast<size_t>(opt.batch * opt.heads * S));
      for (auto* x : {&q, &k, &v, &dout})
        for (auto& e : *x) e = normal(rng);
      std::vector<weft::bf16> qh(n), kh(n), vh(n), outh(n), douth(n), dqh(n), dkh(n), dvh(n);
      if (use_bf16) {
        for (size_t i = 0; i < n; ++i) {
          qh[i] = weft::bf16(q[i]);
          kh[i] = weft::bf16(k[i]);
          vh[i] = weft::bf16(v[i]);
          douth[i] = weft::bf16(dout[i]);
        }
      }
      for (const auto& mask_name : opt.masks) {
        MaskModPtr mask = MakeBenchMask(mask_name, S);
        std::optional<kernels::BlockMask> bm;
        kernels::AttentionOptions o;
        if (mask) {
          bm.emplace(kernels::BlockMask::Create(mask, 1, 1, S, S));
          o.block_mask = &*bm;
        }
        const double pairs = Pairs(mask_name, S) * double(opt.batch * opt.heads);
        const double fwd_flops = 4.0 * pairs * double(D);
        const double bwd_flops = 2.5 * fwd_flops;
        // Repeat short runs to reduce noise; long runs once.
        const int reps = fwd_flops < 2e10 ? 5 : (fwd_flops < 2e11 ? 2 : 1);
        auto forward = [&] {
          kernels::FlexAttentionForward(d, q.data(), k.data(), v.data(), o, out.data(), lse.data());
        };
        auto backward = [&] {
          kernels::FlexAttentionBackward(d, q.data(), k.data(), v.data(), out.data(), lse.data(),
                                         dout.data(), nullptr, o, dq.data(), dk.data(), dv.data());
        };
        auto forward_bf16 = [&] {
          kernels::FlexAttentionForwardBf16(d, qh.data(), kh.data(), vh.data(), o, outh.data(),
                                            lse.data());
        };
        auto backward_bf16 = [&] {
          kernels::FlexAttentionBackwardBf16(d, qh.data(), kh.data(), vh.data(), outh.data(),
                                             lse.data(), douth.data(), nullptr, o, dqh.data(),
                                             dkh.data(), dvh.data());
        };
        // The float32 run is the reference for bf16's speedup, in the same process.
        double f32_fwd = 0, f32_all = 0;
        if (use_bf16) {
          forward();
          f32_fwd = BestSeconds(reps, forward);
          f32_all = f32_fwd + (opt.backward ? BestSeconds(reps, backward) : 0);
        }
        if (use_bf16)
          forward_bf16();
        else
          forward();  // warm up (and the backward's output)
        double t_fwd = BestSeconds(
            reps, use_bf16 ? std::function<void()>(forward_bf16) : std::function<void()>(forward));
        double t_bwd = 0;
        if (opt.backward) {
          t_bwd = BestSeconds(reps, use_bf16 ? std::function<void()>(backward_bf16)
                                             : std::function<void()>(backward));
        }
        double gf_fwd = fwd_flops / t_fwd / 1e9;
        double t_all = t_fwd + t_bwd;
        double gf_all = opt.backward ? (fwd_flops + bwd_flops) / t_all / 1e9 : 0;
        nlohmann::json row = {{"S", S},
                              {"D", D},
                              {"mask", mask_name},
                              {"pairs", pairs},
                              {"forward_ms", t_fwd * 1e3},
                              {"forward_gflops", gf_fwd},
                              {"forward_percent_of_peak", 100 * gf_fwd / peak}};
        if (opt.backward) {
          row["backward_ms"] = t_bwd * 1e3;
          row["forward_backward_ms"] = t_all * 1e3;
          row["forward_backward_gflops"] = gf_all;
          row["forward_backward_percent_of_peak"] = 100 * gf_all / peak;
        }
        if (use_bf16) {
          row["f32_forward_ms"] = f32_fwd * 1e3;
          if (opt.backward) row["f32_forward_backward_ms"] = f32_all * 1e3;
          row["forward_speedup_vs_f32"] = f32_fwd / t_fwd;
          if (opt.backward) row["forward_backward_speedup_vs_f32"] = f32_all / t_all;
        }
        rows.push_back(row);
        if (!opt.json) {
          fmt::print("{:>6} {:>4} {:<15} {:>10.2f} {:>9.1f} {:>5.1f}% ", S, D, mask_name,
                     t_fwd * 1e3, gf_fwd, 100 * gf_fwd / peak);
          if (opt.backward)
            fmt::print("{:>10.2f} {:>9.1f} {:>5.1f}%", t_all * 1e3, gf_all, 100 * gf_all / peak);
          if (use_bf16) {
            fmt::print("  {:>8.2f}x", f32_fwd / t_fwd);
            if (opt.backward) fmt::print("  {:>8.2f}x", f32_all / t_all);
          }
          fmt::print("\n");
          std::fflush(stdout);
        }
      }
    }
  if (opt.json) {
    nlohmann::json j = {{"benchmark", "attention"},
                        {"dtype", use_bf16 ? "bfloat16" : "float32"},
                        {"peak", peak_name},
                        {"isa", isa},
                        {"float32_fma_peak_gflops", peaks[0].gflops_all_threads},
                        {"threads", threads},
                        {"peak_gflops", peak},
                        {"batch", opt.batch},
                        {"heads", opt.heads},
                        {"results", rows}};
    fmt::print("{}\n", j.dump(2));
  }
  return 0;
}

}  // namespace weft::bench
