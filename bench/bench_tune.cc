// `weft tune attention`: times every candidate configuration that fits this
// machine's cache limit (forward and backward separately: they are separate
// kernels) and stores the fastest in the tune cache, which the kernels then
// use for calls of the same class (CPU, isa, dtype, head dims, mask class,
// size bucket).
#include <fmt/core.h>

#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <vector>

#include "bench.h"
#include "timer.h"
#include "weft/base/cpu.h"
#include "weft/base/error.h"
#include "weft/kernels/attention.h"
#include "weft/kernels/attention_config.h"
#include "weft/kernels/simd.h"
#include "weft/kernels/tune_cache.h"

namespace weft::bench {

using kernels::AttentionOptions;
using kernels::Candidate;

int RunTuneAttention(const TuneOptions& t) {
  WEFT_CHECK(t.dtype == "f32" || t.dtype == "bf16",
             "weft tune attention: --dtype {} is not supported; use f32 or bf16", t.dtype);
  WEFT_CHECK(t.batch >= 1 && t.heads >= 1 && t.seq >= 1 && t.head_dim >= 1 &&
                 t.head_dim <= kernels::kMaxHeadDim,
             "weft tune attention: --shape B,H,S,D needs positive sizes and D <= {}",
             kernels::kMaxHeadDim);
  const bool use_bf16 = t.dtype == "bf16";
  kernels::AttentionDims d{t.batch, t.heads, t.heads, t.seq, t.seq, t.head_dim, t.head_dim};
  kernels::MaskModPtr mask = MakeBenchMask(t.mask, t.seq);
  std::optional<kernels::BlockMask> bm;
  AttentionOptions base;
  if (mask) {
    bm.emplace(kernels::BlockMask::Create(mask, 1, 1, t.seq, t.seq));
    base.block_mask = &*bm;
  }
  const auto dtype = use_bf16 ? PrimitiveType::kBF16 : PrimitiveType::kF32;
  kernels::ConfigProblem problem = kernels::ConfigProblem::From(d, base, dtype);
  // The ISA the kernels will look the entry up under (bf16 calls have their own).
  problem.isa =
      (use_bf16 ? kernels::simd::GetBf16Primitives() : kernels::simd::GetPrimitives()).isa;
  const int64_t limit = kernels::CacheLimitBytes();

  const size_t n = static_cast<size_t>(t.batch * t.heads * t.seq * t.head_dim);
  std::mt19937 rng(99);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> q(n), k(n), v(n), dout(n), out(n), dq(n), dk(n), dv(n);
  std::vector<float> lse(static_cast<size_t>(t.batch * t.heads * t.seq));
  for (auto* x : {&q, &k, &v, &dout})
    for (auto& e : *x) e = normal(rng);
  std::vector<weft::bf16> qh(n), kh(n), vh(n), douth(n), outh(n), dqh(n), dkh(n), dvh(n);
  for (size_t i = 0; use_bf16 && i < n; ++i) {
    qh[i] = weft::bf16(q[i]);
    kh[i] = weft::bf16(k[i]);
    vh[i] = weft::bf16(v[i]);
    douth[i] = weft::bf16(dout[i]);
  }
  auto forward = [&](const AttentionOptions& o) {
    if (use_bf16) {
      kernels::FlexAttentionForwardBf16(d, qh.data(), kh.data(), vh.data(), o, outh.data(),
                                        lse.data());
    } else {
      kernels::FlexAttentionForward(d, q.data(), k.data(), v.data(), o, out.data(), lse.data());
    }
  };
  auto backward = [&](const AttentionOptions& o) {
    if (use_bf16) {
      kernels::FlexAttentionBackwardBf16(d, qh.data(), kh.data(), vh.data(), outh.data(),
                                         lse.data(), douth.data(), nullptr, o, dqh.data(),
                                         dkh.data(), dvh.data());
    } else {
      kernels::FlexAttentionBackward(d, q.data(), k.data(), v.data(), out.data(), lse.data(),
                                     dout.data(), nullptr, o, dq.data(), dk.data(), dv.data());
    }
  };
  forward(base);  // the backward needs out and lse

  struct Timed {
    Candidate c;
    double ms = -1;  // -1: not timed (rejected)
  };
  // Times the candidates that fit (the minimal one when none does).
  auto time_all = [&](std::vector<Candidate> cands, bool is_backward) {
    bool any_fits = false;
    for (const auto& c : cands) any_fits |= c.fits;
    std::vector<Timed> timed;
    for (auto& c : cands) {
      Timed r{c};
      if (c.fits || (!any_fits && c.minimal)) {
        AttentionOptions o = base;
        o.config.emplace();
        (is_backward ? o.config->backward : o.config->forward) = c.tiles;
        auto run = [&] { is_backward ? backward(o) : forward(o); };
        run();  // warm up
        r.ms = BestSeconds(2, run) * 1e3;
      }
      timed.push_back(r);
    }
    return timed;
  };
  std::vector<Timed> fwd = time_all(kernels::ForwardCandidates(problem, limit), false);
  std::vector<Timed> bwd = time_all(kernels::BackwardCandidates(problem, limit), true);
  auto best = [](const std::vector<Timed>& v) {
    const Timed* b = nullptr;
    for (const auto& r : v)
      if (r.ms >= 0 && (b == nullptr || r.ms < b->ms)) b = &r;
    return *b;  // some candidate is always timed
  };
  const Timed bf = best(fwd), bb = best(bwd);
  kernels::TuneEntry entry{bf.c.tiles, bb.c.tiles, kernels::BackwardSplit::kAuto, bf.ms, bb.ms};
  const std::string key = kernels::TuneKey(problem);
  kernels::StoreTuneEntry(key, entry);

  if (t.json) {
    nlohmann::json j = {
        {"key", key}, {"cache", kernels::TuneCachePath().string()}, {"limit_bytes", limit}};
    for (auto* list : {&fwd, &bwd})
      for (const auto& r : *list) {
        nlohmann::json c = {{"kernel", r.c.backward ? "backward" : "forward"},
                            {"BLOCK_M", r.c.tiles.block_m},
                            {"BLOCK_N", r.c.tiles.block_n},
                            {"working_set_bytes", r.c.Bytes()},
                            {"fits", r.c.fits},
                            {"reason", r.c.reason}};
        if (r.ms >= 0) c["ms"] = r.ms;
        j["candidates"].push_back(c);
      }
    j["winner"] = {{"BLOCK_M", bf.c.tiles.block_m},
                   {"BLOCK_N", bf.c.tiles.block_n},
                   {"BLOCK_M_BWD", bb.c.tiles.block_m},
                   {"BLOCK_N_BWD", bb.c.tiles.block_n}};
    fmt::print("{}\n", j.dump(2));
    return 0;
  }
  fmt::print(
      "tune attention B={} H={} S={} D={} dtype {} mask {} isa {}; cache limit {:.1f} "
      "KiB\n",
      t.batch, t.heads, t.seq, t.head_dim, t.dtype, t.mask, problem.isa, double(limit) / 1024);
  if (t.explain) {
    if (problem.isa == "amx") {
      const CpuInfo& cpu = GetCpuInfo();
      fmt::print(
          "AMX palette 1: {} tiles of {} rows x {} bytes; the GEMM keeps a 32 x 32 float32 "
          "block of C in 4 tiles, 2 A and 2 B tiles; working sets include its scratch\n",
          cpu.amx_max_tiles, cpu.amx_max_rows, cpu.amx_bytes_per_row);
    }
    fmt::print("{:<9} {:>7} {:>7} {:>12} {:>10}  {}\n", "kernel", "BLOCK_M", "BLOCK_N",
               "working set", "ms", "verdict");
    for (auto* list : {&fwd, &bwd})
      for (const auto& r : *list) {
        fmt::print("{:<9} {:>7} {:>7} {:>8.1f} KiB {:>10}  {}{}\n",
                   r.c.backward ? "backward" : "forward", r.c.tiles.block_m, r.c.tiles.block_n,
                   double(r.c.Bytes()) / 1024, r.ms >= 0 ? fmt::format("{:.2f}", r.ms) : "-",
                   r.c.fits ? "accepted, " : "", r.c.reason);
      }
  }
  fmt::print(
      "winner: BLOCK_M={} BLOCK_N={} ({:.2f} ms), BLOCK_M_BWD={} BLOCK_N_BWD={} ({:.2f} "
      "ms)\nstored under '{}' in {}\n",
      bf.c.tiles.block_m, bf.c.tiles.block_n, bf.ms, bb.c.tiles.block_m, bb.c.tiles.block_n, bb.ms,
      key, kernels::TuneCachePath().string());
  return 0;
}

}  // namespace weft::bench
