// Flexible flash attention on the CPU: forward and backward, float32 and
// bfloat16 (bf16 storage, float32 accumulation and softmax statistics).
//
// Layouts (contiguous, row-major): q [B, Hq, Sq, D], k [B, Hkv, Skv, D],
// v [B, Hkv, Skv, Dv], out [B, Hq, Sq, Dv], lse [B, Hq, Sq] (natural log).
// GQA when Hq is a multiple of Hkv (query head h uses kv head h / (Hq/Hkv)).
// score = q.k * scale, then score_mod, then the block mask; softmax over keys.
// A query row with every key masked gives out 0, lse -inf, gradients 0.
// No Sq x Skv buffer is ever allocated; results are deterministic.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "weft/base/bfloat16.h"
#include "weft/kernels/block_mask.h"
#include "weft/kernels/score_mod.h"

namespace weft::kernels {

struct AttentionDims {
  int64_t batch = 1;
  int64_t q_heads = 1;
  int64_t kv_heads = 1;
  int64_t q_len = 0;
  int64_t kv_len = 0;
  int64_t head_dim = 0;   // D, at most 256
  int64_t value_dim = 0;  // Dv, at most 256
};

// How the backward pass divides work between threads. kFused runs one task
// per (batch row, kv head) that produces dq, dk and dv together; kSplit runs
// a dk/dv pass over kv blocks and a dq pass over query blocks, so both
// parallelize even when B * Hkv is small. kAuto picks by the thread count.
enum class BackwardSplit { kAuto, kFused, kSplit };

// Kernel tile sizes; 0 means "choose" (see attention_config.h).
struct TileSizes {
  int64_t block_m = 0;  // query rows per tile
  int64_t block_n = 0;  // keys per tile
  bool operator==(const TileSizes&) const = default;
};

// A forced kernel configuration (FlexAttention's kernel_options). Fields
// left at 0 / kAuto / "" are chosen as usual. Forced tiles must divide the
// block mask's blocks and fit the cache limit, else weft::Error says which
// tiles would.
struct AttentionConfig {
  TileSizes forward;   // BLOCK_M, BLOCK_N
  TileSizes backward;  // BLOCK_M_BWD, BLOCK_N_BWD (dq and dk/dv kernels)
  BackwardSplit split = BackwardSplit::kAuto;
  std::string isa;  // "avx512bf16", "avx512", "avx2", "portable"; "" = the default for the dtype
};

struct AttentionOptions {
  std::optional<float> scale;             // default 1 / sqrt(D)
  const ScoreMod* score_mod = nullptr;    // default: identity
  const BlockMask* block_mask = nullptr;  // default: no mask
  bool enable_gqa = false;                // required when q_heads != kv_heads
  BackwardSplit backward_split = BackwardSplit::kAuto;
  std::optional<AttentionConfig> config;  // forced configuration; its split wins
};

inline constexpr int64_t kMaxHeadDim = 256;

// Throws weft::Error when dims and options do not fit together.
void ValidateAttention(const AttentionDims& dims, const AttentionOptions& options);

void FlexAttentionForward(const AttentionDims& dims, const float* q, const float* k, const float* v,
                          const AttentionOptions& options, float* out, float* lse);

// dlse may be null (treated as zero). dk and dv are summed over each GQA group.
void FlexAttentionBackward(const AttentionDims& dims, const float* q, const float* k,
                           const float* v, const float* out, const float* lse, const float* dout,
                           const float* dlse, const AttentionOptions& options, float* dq, float* dk,
                           float* dv);

// bfloat16 inputs and outputs (q, k, v, out, dout, dq, dk, dv); lse and
// dlse stay float32. Same semantics and options as the float32 kernels.
void FlexAttentionForwardBf16(const AttentionDims& dims, const bf16* q, const bf16* k,
                              const bf16* v, const AttentionOptions& options, bf16* out,
                              float* lse);

void FlexAttentionBackwardBf16(const AttentionDims& dims, const bf16* q, const bf16* k,
                               const bf16* v, const bf16* out, const float* lse, const bf16* dout,
                               const float* dlse, const AttentionOptions& options, bf16* dq,
                               bf16* dk, bf16* dv);

}  // namespace weft::kernels
