// The resource model, candidate tiles, heuristic and forced-config checks of
// flex attention (see attention_config.h).
#include "weft/kernels/attention_config.h"

#include <fmt/core.h>

#include <algorithm>
#include <cstdlib>
#include <tuple>

#include "weft/base/cpu.h"
#include "weft/base/env.h"
#include "weft/base/error.h"
#include "weft/kernels/simd.h"
#include "weft/kernels/tune_cache.h"

namespace weft::kernels {

namespace {

constexpr int64_t kMaxTile = 256;
constexpr int64_t kHeuristicArea = 64 * 64;

std::string Kib(int64_t bytes) { return fmt::format("{:.1f} KiB", double(bytes) / 1024.0); }

// Tile sizes allowed along one axis of length len with mask blocks of `block`
// (0: no mask), ascending, never empty.
std::vector<int64_t> TileChoices(int64_t len, int64_t block) {
  const int64_t cap = std::max<int64_t>(simd::kPadN, simd::PadN(len));
  std::vector<int64_t> out;
  for (int64_t t = simd::kPadN; t <= kMaxTile; t += simd::kPadN) {
    if (block > 0 && block % t != 0) continue;
    if (block == 0 && (t & (t - 1)) != 0) continue;  // powers of two without a mask
    if (t > cap && !out.empty()) break;
    out.push_back(t);
  }
  // A mask block with no multiple-of-16 divisor (e.g. 37) is its own tile.
  if (out.empty()) out.push_back(block);
  return out;
}

bool Matches(const TileSizes& forced, const TileSizes& t) {
  return (forced.block_m == 0 || forced.block_m == t.block_m) &&
         (forced.block_n == 0 || forced.block_n == t.block_n);
}

std::string TilesText(const TileSizes& t, bool backward) {
  return backward ? fmt::format("BLOCK_M_BWD={}, BLOCK_N_BWD={}", t.block_m, t.block_n)
                  : fmt::format("BLOCK_M={}, BLOCK_N={}", t.block_m, t.block_n);
}

// The AMX GEMM's own scratch per call (simd/amx_gemm.cc), added to every
// working set when the kernels run on tiles: a 32 x 32 float32 copy of C for
// blocks of fewer than 16 rows, A's rows copied with K padded to 32 when a
// block is short or K is not a multiple of 32, and B's last pair rows padded
// to a full tile (1 KiB per 16 columns). The tiles themselves are registers
// (8 x 1 KiB, checked against the CPU's palette when the ISA is chosen).
int64_t AmxScratchBytes(const AttentionDims& d, TileSizes t) {
  const int64_t k_max = std::max({d.head_dim, d.value_dim, t.block_m, t.block_n});
  const int64_t k_padded = (k_max + 31) / 32 * 32;
  return 32 * 32 * 4 + 32 * k_padded * 2 + simd::PadN(k_max) / simd::kPadN * 1024;
}

std::vector<Candidate> MakeCandidates(const ConfigProblem& p, int64_t limit, bool backward) {
  const auto ms = TileChoices(p.dims.q_len, p.mask_q_block);
  const auto ns = TileChoices(p.dims.kv_len, p.mask_kv_block);
  std::vector<Candidate> out;
  for (int64_t m : ms)
    for (int64_t n : ns) {
      Candidate c;
      c.backward = backward;
      c.tiles = {m, n};
      c.limit = limit;
      const int64_t scratch =
          p.isa.rfind("amx", 0) == 0 ? AmxScratchBytes(p.dims, c.tiles) : 0;  // amx, amx-emulated
      auto add = [&](AttentionKernel k) {
        c.working_sets.emplace_back(
            k, WorkingSetBytes(k, p.dims, c.tiles, p.has_score_mod, p.dtype) + scratch);
      };
      if (backward) {
        add(AttentionKernel::kBackwardDq);
        add(AttentionKernel::kBackwardDkDv);
      } else {
        add(AttentionKernel::kForward);
      }
      c.fits = c.Bytes() <= limit;
      out.push_back(std::move(c));
    }
  std::stable_sort(out.begin(), out.end(),
                   [](const Candidate& a, const Candidate& b) { return a.Bytes() < b.Bytes(); });
  out.front().minimal = true;
  for (Candidate& c : out) {
    std::string sets;
    for (const auto& [k, bytes] : c.working_sets)
      sets += fmt::format("{}{} {}", sets.empty() ? "" : ", ", KernelName(k), Kib(bytes));
    if (c.fits) {
      c.reason = fmt::format("fits: {} <= limit {}", sets, Kib(limit));
    } else if (c.minimal) {
      c.reason =
          fmt::format("minimal configuration: runs although {} > limit {}", sets, Kib(limit));
    } else {
      c.reason = fmt::format("rejected: {} > limit {}", sets, Kib(limit));
    }
  }
  return out;
}

}  // namespace

void CheckAttentionType(PrimitiveType dtype) {
  CheckSupportedType(dtype, {PrimitiveType::kF32, PrimitiveType::kBF16}, "attention");
}

const char* KernelName(AttentionKernel kernel) {
  switch (kernel) {
    case AttentionKernel::kForward:
      return "forward";
    case AttentionKernel::kBackwardDq:
      return "backward_dq";
    case AttentionKernel::kBackwardDkDv:
      return "backward_dkdv";
  }
  return "?";
}

int64_t CacheLimitBytes() {
  if (auto text = GetEnv("WEFT_CACHE_LIMIT")) {
    int64_t bytes = ParseByteSize(*text, "WEFT_CACHE_LIMIT");
    WEFT_CHECK(bytes > 0, "WEFT_CACHE_LIMIT={} must be positive, e.g. 8K or 1M", *text);
    return bytes;
  }
  return GetCpuInfo().l2_bytes;
}

int64_t WorkingSetBytes(AttentionKernel kernel, const AttentionDims& d, TileSizes t,
                        bool has_score_mod, PrimitiveType dtype) {
  const int64_t m = t.block_m, n = t.block_n, np = simd::PadN(n);
  const int64_t dp = simd::PadN(d.head_dim), dvp = simd::PadN(d.value_dim);
  const int64_t f = sizeof(float);
  CheckAttentionType(dtype);
  if (dtype == PrimitiveType::kBF16) {
    // GEMM operands in bf16 (pair-packed panels round their k rows up to
    // even: at most one extra row, counted).
    const int64_t h = 2, de = d.head_dim + 1, dve = d.value_dim + 1, me = m + 1, ne = n + 1;
    // Score tile (float32) and mask bytes, Q rows, the K^T panel.
    int64_t bytes = m * np * f + m * np + m * d.head_dim * h + de * np * h;
    switch (kernel) {
      case AttentionKernel::kForward:
        // O accumulator, m and l, P in bf16, the V panel.
        bytes += m * dvp * f + 2 * m * f + m * np * h + ne * dvp * h;
        break;
      case AttentionKernel::kBackwardDq:
        // dP, score-mod gradient, dS in bf16, dO rows, V^T panel, K panel,
        // dq accumulator.
        bytes += m * np * f + (has_score_mod ? m * np * f : 0) + m * np * h + m * d.value_dim * h +
                 dve * np * h + ne * dp * h + m * dp * f;
        break;
      case AttentionKernel::kBackwardDkDv:
        // dP, score-mod gradient, dS in bf16, P^T and dS^T in bf16 (rounded
        // and transposed in one pass), dO rows and panel, Q panel, V^T panel,
        // dk and dv accumulators.
        bytes += m * np * f + (has_score_mod ? m * np * f : 0) + m * np * h + 2 * n * m * h +
                 m * d.value_dim * h + me * dvp * h + me * dp * h + dve * np * h + n * dp * f +
                 n * dvp * f;
        break;
    }
    return bytes;
  }
  // Live in every kernel's inner loop: the score tile (and its mask bytes),
  // the scaled Q rows and the K^T panel that produce it.
  int64_t bytes = m * np * f + m * np + m * d.head_dim * f + d.head_dim * np * f;
  switch (kernel) {
    case AttentionKernel::kForward:
      // O accumulator, m and l, the V panel.
      bytes += m * dvp * f + 2 * m * f + n * dvp * f;
      break;
    case AttentionKernel::kBackwardDq:
      // dP, score-mod gradient, dO rows, V^T panel, K rows, dq accumulator.
      bytes += m * np * f + (has_score_mod ? m * np * f : 0) + m * d.value_dim * f +
               d.value_dim * np * f + n * dp * f + m * dp * f;
      break;
    case AttentionKernel::kBackwardDkDv:
      // dP, score-mod gradient, dO rows (row-major and packed), Q rows,
      // V^T panel, dk and dv accumulators (P and dS are read in place as
      // transposed GEMM operands: no P^T or dS^T).
      bytes += m * np * f + (has_score_mod ? m * np * f : 0) + m * d.value_dim * f + m * dvp * f +
               m * dp * f + d.value_dim * np * f + n * dp * f + n * dvp * f;
      break;
  }
  return bytes;
}

ConfigProblem ConfigProblem::From(const AttentionDims& dims, const AttentionOptions& options,
                                  PrimitiveType dtype) {
  CheckAttentionType(dtype);
  ConfigProblem p;
  p.dims = dims;
  p.dtype = dtype;
  p.has_score_mod = options.score_mod != nullptr;
  if (options.block_mask != nullptr) {
    p.has_mask = true;
    p.mask_q_block = options.block_mask->q_block();
    p.mask_kv_block = options.block_mask->kv_block();
    p.mask_density = options.block_mask->Density();
  }
  return p;
}

std::string ConfigProblem::MaskClass() const {
  if (!has_mask) return "none";
  return fmt::format("d{}", static_cast<int>(mask_density * 10 + 0.5) * 10);
}

int64_t ConfigProblem::SizeBucket() const {
  int64_t s = std::max(dims.q_len, dims.kv_len), bucket = 256;
  while (bucket < s) bucket *= 2;
  return bucket;
}

int64_t Candidate::Bytes() const {
  int64_t b = 0;
  for (const auto& [k, bytes] : working_sets) b = std::max(b, bytes);
  return b;
}

std::vector<Candidate> ForwardCandidates(const ConfigProblem& p, int64_t limit) {
  return MakeCandidates(p, limit, false);
}

std::vector<Candidate> BackwardCandidates(const ConfigProblem& p, int64_t limit) {
  return MakeCandidates(p, limit, true);
}

const Candidate& HeuristicPick(const std::vector<Candidate>& cands) {
  const Candidate* best = nullptr;
  auto key = [](const Candidate& c) {
    const int64_t area = c.tiles.block_m * c.tiles.block_n;
    // Larger tiles up to 64 x 64, then squarer, then smaller.
    return std::make_tuple(std::min(area, kHeuristicArea),
                           -std::abs(c.tiles.block_m - c.tiles.block_n), -area);
  };
  for (const Candidate& c : cands)
    if (c.fits && (best == nullptr || key(c) > key(*best))) best = &c;
  return best != nullptr ? *best : cands.front();  // front: the minimal one
}

ChosenTiles ChooseTiles(const ConfigProblem& p, const AttentionOptions& options, bool backward) {
  const int64_t limit = CacheLimitBytes();
  const std::vector<Candidate> cands =
      backward ? BackwardCandidates(p, limit) : ForwardCandidates(p, limit);
  auto chosen = [&](const Candidate& c, ConfigSource source) {
    return ChosenTiles{c.tiles, source, c.Bytes(), limit, c.fits};
  };

  TileSizes forced;
  if (options.config) forced = backward ? options.config->backward : options.config->forward;
  if (forced.block_m != 0 || forced.block_n != 0) {
    WEFT_CHECK(forced.block_m >= 0 && forced.block_n >= 0,
               "flex_attention: forced tiles ({}) must be positive", TilesText(forced, backward));
    std::vector<Candidate> matching;
    for (const Candidate& c : cands)
      if (Matches(forced, c.tiles)) matching.push_back(c);
    if (matching.empty()) {
      std::string ms, ns;
      for (int64_t t : TileChoices(p.dims.q_len, p.mask_q_block)) ms += fmt::format(" {}", t);
      for (int64_t t : TileChoices(p.dims.kv_len, p.mask_kv_block)) ns += fmt::format(" {}", t);
      Fail(
          "flex_attention: forced tiles {} are not allowed: a kernel tile must divide the "
          "block mask's block ({} x {}; 0 = no mask) and be a multiple of 16 up to {}; "
          "allowed query tiles:{}; key tiles:{}",
          TilesText(forced, backward), p.mask_q_block, p.mask_kv_block, kMaxTile, ms, ns);
    }
    const Candidate& pick = HeuristicPick(matching);
    if (!pick.fits && !pick.minimal) {
      const Candidate* largest = nullptr;
      for (const Candidate& c : cands)
        if (c.fits && (largest == nullptr || c.Bytes() > largest->Bytes())) largest = &c;
      Fail(
          "flex_attention: forced {} needs a {} working set of {}, over the cache limit {} "
          "(L2, or WEFT_CACHE_LIMIT); the largest configuration that fits is {}",
          TilesText(pick.tiles, backward), backward ? "backward" : "forward", Kib(pick.Bytes()),
          Kib(limit),
          largest ? TilesText(largest->tiles, backward) + " (" + Kib(largest->Bytes()) + ")"
                  : TilesText(cands.front().tiles, backward) + " (the minimal one)");
    }
    return chosen(pick, ConfigSource::kForced);
  }

  const std::string key = TuneKey(p);
  if (auto entry = LookupTuneEntry(key)) {
    const TileSizes want = backward ? entry->backward : entry->forward;
    for (const Candidate& c : cands) {
      if (c.tiles == want && c.fits) {
        ChosenTiles t = chosen(c, ConfigSource::kCache);
        t.split = entry->split;
        return t;
      }
    }
    WarnOnce(
        fmt::format("tune cache entry '{}' ({}) is stale: it does not fit the limit {} or "
                    "this mask's blocks; using the heuristic (rerun `weft tune attention`)",
                    key, TilesText(want, backward), Kib(limit)));
  }
  return chosen(HeuristicPick(cands), ConfigSource::kHeuristic);
}

}  // namespace weft::kernels
