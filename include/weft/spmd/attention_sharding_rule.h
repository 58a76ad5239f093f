// Sharding rules of weft's attention custom calls (registered on first use
// of GetOpShardingRule; RegisterAttentionShardingRules is idempotent).
//
// Operand convention (hlo/custom_call_targets.h defines it):
//   "weft.flex_attention":          q [B,Hq,Sq,D], k [B,Hkv,Skv,D], v [B,Hkv,Skv,Dv],
//                                   then named tensors; result (out [B,Hq,Sq,Dv], lse [B,Hq,Sq])
//   "weft.flex_attention_backward": q, k, v, out, lse, dout [, dlse], then named
//                                   tensors; result (dq, dk, dv)
// The named tensors are listed in backend_config as JSON
// {"tensors": ["q_segment_ids", "kv_segment_ids"], ...}. A name starting with
// "q_" is [B,Sq], "kv_" is [B,Skv]; a rank-4 tensor is [B,Hq,Sq,Skv] (e.g. a
// score bias). Without names, rank-2 tensors are matched by shape: [B,Sq]
// first, then [B,Skv].
//
// Factors: batch B and the sequence factors Sq / Skv are shared by every
// tensor that has them, so segment ids always shard like q/k. head_dim D and
// Dv need replication. Heads: with Hq == Hkv one head factor; with GQA
// (Hq = G * Hkv) the q head dim is the product [Hkv-factor, G-factor] (q head
// h reads kv head h / G), so splitting q heads n ways with Hkv % n == 0
// splits k/v heads n ways, and splitting q heads beyond Hkv leaves k/v split
// Hkv ways (replicated within each group).
#pragma once

#include <optional>

#include "weft/hlo/custom_call_targets.h"  // kFlexAttentionTarget, kFlexAttentionBackwardTarget
#include "weft/spmd/op_sharding_rule.h"

namespace weft {

void RegisterAttentionShardingRules();

std::optional<OpShardingRule> FlexAttentionRule(const HloInstruction& instr);
std::optional<OpShardingRule> FlexAttentionBackwardRule(const HloInstruction& instr);

}  // namespace weft
