// Kernel configurations of flex attention, and the resource model that keeps
// them within the machine's caches.
//
// A configuration is the tile sizes of each kernel, the backward's work split
// and the instruction set. Tiles are independent of the BlockMask's blocks
// under one rule: a kernel tile divides its mask block (64 | 128 is fine, a
// 128-row tile over 64-row mask blocks is not), so every tile lies in exactly
// one mask block and takes its kind (full, partial, empty). Without a block
// mask any tile size goes. The backward dq and dk/dv kernels share one tile
// size (BLOCK_M_BWD x BLOCK_N_BWD): the fused and split backward visit the
// same tiles in the same order, which is what makes them bit-identical.
//
// Working set: the bytes the inner loop of a kernel touches per tile (score
// tile, accumulators, packed operand panels); it must fit the cache limit
// (the per-core L2, or WEFT_CACHE_LIMIT). The candidate set always contains
// the minimal configuration (16 x 16 tiles, or the mask block when it is not
// a multiple of 16); when even that does not fit it still runs and the
// explanation says so. No path ends in "no valid configuration".
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "weft/base/primitive_type.h"
#include "weft/kernels/attention.h"

namespace weft::kernels {

// Attention computes in f32 or bf16 (float32 accumulation); any other element
// type is refused by name.
void CheckAttentionType(PrimitiveType dtype);

// The limit a configuration's working set must fit: WEFT_CACHE_LIMIT (e.g.
// "8K", "1M") when set, else this core's L2 size. Read on every call (tests
// change the variable).
int64_t CacheLimitBytes();

enum class AttentionKernel { kForward, kBackwardDq, kBackwardDkDv };
const char* KernelName(AttentionKernel kernel);  // "forward", "backward_dq", "backward_dkdv"

// Bytes touched per tile by `kernel` with tiles block_m x block_n. Score
// tiles, dP and accumulators are float32 in both dtypes; with bf16 the GEMM
// operands (Q, K, V, dO panels and rows, P and dS as GEMM inputs) are 2 bytes
// an element, and P and dS also exist as bf16 copies.
int64_t WorkingSetBytes(AttentionKernel kernel, const AttentionDims& dims, TileSizes tiles,
                        bool has_score_mod, PrimitiveType dtype = PrimitiveType::kF32);

// Everything a configuration depends on, taken from one call.
struct ConfigProblem {
  AttentionDims dims;
  int64_t mask_q_block = 0;  // 0: no block mask (any tile goes)
  int64_t mask_kv_block = 0;
  double mask_density = 1.0;  // fraction of mask blocks that need work
  bool has_mask = false;
  bool has_score_mod = false;
  PrimitiveType dtype = PrimitiveType::kF32;
  std::string isa;  // the instruction set the kernels will use

  static ConfigProblem From(const AttentionDims& dims, const AttentionOptions& options,
                            PrimitiveType dtype);
  // "none" without a block mask; else the density class, e.g. "d50".
  std::string MaskClass() const;
  // Power-of-two bucket of max(Sq, Skv), at least 256.
  int64_t SizeBucket() const;
};

// One tile choice for the forward or the backward, judged against a limit.
struct Candidate {
  bool backward = false;
  TileSizes tiles;
  // Forward: one entry. Backward: dq and dk/dv (both must fit).
  std::vector<std::pair<AttentionKernel, int64_t>> working_sets;
  int64_t limit = 0;
  bool fits = false;
  bool minimal = false;   // the smallest candidate: always allowed to run
  std::string reason;     // "fits", or why it was rejected
  int64_t Bytes() const;  // the largest working set
};

// Every tile pair allowed for this problem (tiles that divide the mask blocks,
// multiples of 16 up to 256 when there is no mask), judged against `limit`.
// Sorted by working set, smallest first; never empty.
std::vector<Candidate> ForwardCandidates(const ConfigProblem& problem, int64_t limit);
std::vector<Candidate> BackwardCandidates(const ConfigProblem& problem, int64_t limit);

// The heuristic pick among candidates: the largest tiles up to 64 x 64 that
// fit (64 x 64 measured fastest for D in 64..128 in float32 on AVX2; larger
// tiles only where 64 is not allowed), else the smallest.
const Candidate& HeuristicPick(const std::vector<Candidate>& candidates);

// Where a configuration came from (for --explain and tests).
enum class ConfigSource { kForced, kCache, kHeuristic };

struct ChosenTiles {
  TileSizes tiles;
  ConfigSource source = ConfigSource::kHeuristic;
  int64_t bytes = 0, limit = 0;
  bool fits = true;  // false only for the minimal candidate under a tiny limit
  BackwardSplit split = BackwardSplit::kAuto;  // the tune cache's, if any
};

// The forward's (or the backward's) tiles for this call: the forced tiles in
// options.config when set (weft::Error naming the working set, the limit and
// the largest fitting tiles when they do not fit or break the divisibility
// rule), else the tune cache's entry when valid, else the heuristic.
ChosenTiles ChooseTiles(const ConfigProblem& problem, const AttentionOptions& options,
                        bool backward);

}  // namespace weft::kernels
