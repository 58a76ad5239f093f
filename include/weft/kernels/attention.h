// Flexible flash attention on the CPU: forward and backward, float32.
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

struct AttentionOptions {
  std::optional<float> scale;             // default 1 / sqrt(D)
  const ScoreMod* score_mod = nullptr;    // default: identity
  const BlockMask* block_mask = nullptr;  // default: no mask
  bool enable_gqa = false;                // required when q_heads != kv_heads
  BackwardSplit backward_split = BackwardSplit::kAuto;
};

inline constexpr int64_t kMaxHeadDim = 256;

// Throws weft::Error when dims and options do not fit together.
void ValidateAttention(const AttentionDims& dims, const AttentionOptions& options);

void FlexAttentionForward(const AttentionDims& dims, const float* q, const float* k,
                          const float* v, const AttentionOptions& options, float* out,
                          float* lse);

// dlse may be null (treated as zero). dk and dv are summed over each GQA group.
void FlexAttentionBackward(const AttentionDims& dims, const float* q, const float* k,
                           const float* v, const float* out, const float* lse,
                           const float* dout, const float* dlse, const AttentionOptions& options,
                           float* dq, float* dk, float* dv);

}  // namespace weft::kernels
