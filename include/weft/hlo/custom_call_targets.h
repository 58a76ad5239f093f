// The custom-call targets weft defines or gives a meaning: their names,
// operands, results and backend_config. They are part of the IR's vocabulary, so they live with
// the IR (header-only, in weft_hlo's include tree): the SPMD partitioner's
// sharding rules (spmd/attention_sharding_rule.h), the executor
// (runtime/eval_custom_call.cc) and the analyses (analysis/cost_model.cc,
// memory_plan.cc) read them from here, so the planner needs neither the
// executor nor the partitioner for a name.
#pragma once

#include <string_view>

namespace weft {

// ---------------------------------------------------------------------------
// Attention custom calls. Emit them as
//
//   fa = (f32[B,Hq,Sq,Dv], f32[B,Hq,Sq]) custom-call(q, k, v, seg),
//        custom_call_target="weft.flex_attention",
//        backend_config={"mask": "q_idx >= kv_idx && seg[b, q_idx] == seg[b, kv_idx]",
//                        "mask_tensors": ["seg"], "scale": 0.125}
//
// kFlexAttentionTarget ("weft.flex_attention"), the forward:
//   operands  q [B,Hq,Sq,D], k [B,Hkv,Skv,D], v [B,Hkv,Skv,Dv], then one
//             operand per name in "mask_tensors" (integer arrays: s32/s64/u32/
//             pred), then one per name in "score_tensors" (f32/bf16 arrays).
//   result    (out [B,Hq,Sq,Dv], lse [B,Hq,Sq]) — lse is the natural-log
//             logsumexp the backward needs — or the array out alone.
// kFlexAttentionBackwardTarget ("weft.flex_attention_backward"):
//   operands  q, k, v, out, lse, dout [B,Hq,Sq,Dv], then dlse [B,Hq,Sq] when
//             "has_dlse" is true, then the mask tensors and score tensors as
//             in the forward.
//   result    (dq, dk, dv), shaped like q, k, v (dk, dv summed over GQA groups).
// q/k/v/out/dout/dlse and the results may be f32 or bf16; lse is f32 or bf16
// likewise. The executor runs the bf16 kernels (bf16 storage, f32
// accumulation and softmax statistics) when q, k and v are all bf16 — they
// read and write out, dout, dq, dk, dv in bf16 and lse, dlse in f32 — and
// the f32 kernels otherwise; other types are converted on the way in and out.
// backend_config is a JSON object; every key is optional:
//   "mask"          mask expression text (kernels/mod_expr.h), "" = no mask
//   "score_mod"     score expression text, "" = identity
//   "mask_tensors"  names the mask expression uses, in operand order
//   "score_tensors" names the score expression uses, in operand order
//   "scale"         number; default 1/sqrt(D)
//   "enable_gqa"    bool; default: true when Hq != Hkv
//   "q_block", "kv_block"  BlockMask block sizes (default 64)
//   "q_offset_operand"  set by the SPMD partitioner when the query sequence
//                   is sharded: the index of one extra s32[] operand after
//                   the named tensors, the first global query position of
//                   this device's rows; masks and score mods see global q_idx
//   "global_q_len"  with it: the global query length; local rows past it are
//                   padding and are masked (output 0, lse -inf, gradients 0)
// The same config serves the forward and its backward, so autodiff can copy
// it (and add "has_dlse").
inline constexpr const char* kFlexAttentionTarget = "weft.flex_attention";
inline constexpr const char* kFlexAttentionBackwardTarget = "weft.flex_attention_backward";

// XLA's TopK custom call: custom-call(x), custom_call_target="TopK",
// called_computations={comparator}, result (T[..., k], s32[..., k]): the k
// largest along the last dim (k from the result shape) and their indices.
// weft runs it as the topk op with largest=true; the comparator (a
// greater-than) is checked, not interpreted.
inline constexpr const char* kTopKTarget = "TopK";

// XLA's sharding annotations and the edges of a manual region (what
// jax.shard_map emits): custom-call(x), custom_call_target="Sharding" pins
// x's sharding (an identity on values); "SPMDFullToShardShape" takes a value
// of a tiled sharding to its per-device piece, a value of sharding {manual}
// whose shape is the piece's; "SPMDShardToFullShape" takes the per-device
// pieces back to the full value of the instruction's tiled sharding. Between
// the two, instructions of sharding {manual} run per device as written (the
// partitioner passes them through, collectives included).
inline constexpr const char* kShardingTarget = "Sharding";
inline constexpr const char* kFullToShardTarget = "SPMDFullToShardShape";
inline constexpr const char* kShardToFullTarget = "SPMDShardToFullShape";

// XLA's AllocateBuffer: custom-call(), custom_call_target="AllocateBuffer",
// no operands, an array result whose contents are unspecified. The compiler
// gives it to a loop's init that the loop overwrites before reading
// (compiler/dead_loop_init.h); the executor hands out the result's buffer
// without writing it.
inline constexpr const char* kAllocateBufferTarget = "AllocateBuffer";

// XLA's memory-space moves and pins (host offloading, jax's
// device_put(memory_kind=...)): custom-call(x) with one of these targets, one
// array operand and a result of its shape. weft's devices have one memory, so
// each is an identity on values; propagation passes shardings through them
// and the partitioner partitions them elementwise, as XLA does.
inline bool IsMemorySpaceMoveTarget(std::string_view target) {
  return target == "MoveToHost" || target == "MoveToDevice" || target == "PinToDevice" ||
         target == "PinToDeviceSram";
}

}  // namespace weft
