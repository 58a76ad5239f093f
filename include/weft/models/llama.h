// The Llama forward pass as an HLO module: a scalar mean cross-entropy loss
// from a batch and the model's weights, ready for autodiff (autodiff/grad.h)
// and sharding propagation.
//
// Entry parameters, in order:
//   0 tokens s32[B,S]   1 targets s32[B,S]   2 loss_mask f32[B,S]
//   3 segment_ids s32[B,S]   4 positions s32[B,S]   (data/packing.h Batch)
//   5.. the weights (LlamaForward::weights), layer weights stacked over layers:
//     tok_embeddings [V, D]
//     layers.attention_norm [L, D]
//     layers.attention.wq [L, D, Hq*Dh]   wk, wv [L, D, Hkv*Dh]   wo [L, Hq*Dh, D]
//     layers.ffn_norm [L, D]
//     layers.feed_forward.w1, w3 [L, D, F]   w2 [L, F, D]
//     norm [D]
//     output [D, V]   (absent with tie_embeddings: the head is tok_embeddings^T)
// A stacked weight `layers.X` [L, ...] holds Meta's `layers.N.X` for every N
// (weights stored [in, out]). Its sharding comes from the config rule that
// matches the per-layer name `layers.0.X` (every layer shares one layout),
// with the layer dim unsplit, so configs keep Meta's names.
//
// The layers run in a Scan (models/scan.h). Each layer: RMSNorm, q/k/v
// projections, RoPE (Meta's interleaved pairs) at the per-document positions,
// GQA flex attention ("weft.flex_attention", causal and same-document mask
// from the segment ids), output projection, residual; RMSNorm, SwiGLU MLP,
// residual. Then RMSNorm, the output head and the mean cross-entropy over
// the tokens whose loss_mask is set (log-softmax with max subtraction).
// With LlamaOutput::kLogits the root is the logits f32[B,S,V] instead (after
// the final norm and the head; the same parameters, with targets and
// loss_mask unused): what sampling (train/sample.h) runs.
// With a mesh, the data inputs and the residual stream are split on the batch
// dim over the mesh's batch axes ("dcn", "data", "fsdp", those present).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "weft/hlo/module.h"
#include "weft/models/llama_config.h"

namespace weft {

enum class LlamaOutput {
  kLoss,    // scalar mean cross-entropy (training)
  kLogits,  // f32[B,S,V] (inference)
};

struct LlamaBuildOptions {
  int64_t batch_size = 1;
  int64_t seq_len = 0;  // 0: the config's seq_len
  // Sharding rules and mesh; null: no sharding annotations.
  const RunConfig* run = nullptr;
  LlamaOutput output = LlamaOutput::kLoss;
  // The mixed-precision policy (llama_config.h): kBf16 casts each f32
  // weight to bf16 where it is read and keeps activations in bf16. The
  // builder's default is the all-f32 program; runs take train.precision.
  Precision precision = Precision::kF32;
};

struct LlamaWeight {
  std::string name;  // "tok_embeddings", "layers.attention.wq", ...
  Shape shape;
  int64_t parameter_number = 0;
  // Llama's initialization (InitLlamaWeight): N(0, 0.02) for the embeddings
  // and projections, the residual stream's outputs (wo, w2) scaled by
  // 1/sqrt(2 L); 0 for a norm's scale, which starts at 1.
  double init_stddev = 0.0;
};

struct LlamaForward {
  std::unique_ptr<HloModule> module;
  std::vector<LlamaWeight> weights;  // in parameter order
  static constexpr int64_t kNumDataInputs = 5;
  // The weights' parameter numbers (what autodiff differentiates).
  std::vector<int64_t> WeightParameters() const;
};

// Throws weft::Error for an inconsistent config (ValidateLlamaConfig), a
// sharding rule that does not fit its weight, or one that no weight uses
// (CheckShardingRules).
LlamaForward BuildLlamaForward(const LlamaConfig& config, const LlamaBuildOptions& options);

// The model's weights, names, global shapes and parameter numbers, without
// building anything (the order and shapes of the list above).
std::vector<LlamaWeight> LlamaWeights(const LlamaConfig& config);

// Weight `weight`'s values at the start of a run seeded `seed`, f32 in
// row-major order (what `weft train` starts from without --resume or
// --init-from). One random stream per weight, keyed by its place in
// LlamaWeights, so a weight's values do not depend on the others.
std::vector<float> InitLlamaWeight(const LlamaWeight& weight, uint64_t seed);

// The name sharding rules see for weight `weight_name`: a stacked
// `layers.X` is matched as `layers.0.X` (every layer shares one layout).
std::string ShardingRuleName(std::string_view weight_name);

// Every name a rule can match, in parameter order: tok_embeddings, the nine
// layer weights as `layers.0.X`, norm, output (listed with tied embeddings
// too: a rule for it is not a typo, only unused).
std::vector<std::string> LlamaRuleNames();

// Refuses, before anything is built, a [sharding] rule that matches no
// weight name (a typo: it would be ignored) or only weights an earlier rule
// already takes (first match wins: it would be ignored too). The message
// names the rule with its file:line:col, the nearest weight names and the
// list of them.
void CheckShardingRules(const RunConfig& run);

}  // namespace weft
